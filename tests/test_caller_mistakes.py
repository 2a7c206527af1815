"""A caller's mistake never breaks a vector env: a refused step, a missing attribute, a method
that raises on a bad argument raise their own clear error and leave every env where it was;
only an env's own failure in `step` or `reset` (or a dead or hung worker) breaks it."""

from __future__ import annotations

import re
import threading
from contextlib import closing

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from parallel_rollouts import ParallelVectorEnv, ResetNeededError, RunnerState, WorkerError
from tests.agent_envs import make_relay
from tests.vector_envs import cartpole

pytestmark = pytest.mark.timeout(120)

BACKENDS = ["sync", "async"]


def _vector_env(fns, backend, **options):
    if backend == "async":
        options.setdefault("num_workers", 2)
    return ParallelVectorEnv(fns, backend=backend, **options)


def _step_until_an_env_ends(envs, num_columns):
    for _ in range(300):
        _, _, terminations, truncations, infos = envs.step(np.zeros(num_columns, dtype=np.int64))
        ended = infos["env_done"] if "env_done" in infos else terminations | truncations
        if ended.any():
            return ended.copy()
    raise AssertionError("no episode ended")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("source", ["single envs", "multi-agent envs"])
def test_disabled_mode_refuses_stepping_an_ended_env_and_the_advised_reset_then_works(backend, source):
    fns, columns = ([cartpole] * 2, 2) if source == "single envs" else ([make_relay] * 2, 8)
    with closing(_vector_env(fns, backend, autoreset_mode=AutoresetMode.DISABLED)) as envs:
        envs.reset(seed=0)
        ended = _step_until_an_env_ends(envs, columns)
        expected = np.flatnonzero(ended).tolist()
        with pytest.raises(ResetNeededError, match=rf"would step envs {re.escape(repr(expected))}, whose episode ended .*reset_mask"):
            envs.step(np.zeros(columns, dtype=np.int64))
        assert envs.state is RunnerState.READY
        observations, _ = envs.reset(seed=7, options={"reset_mask": ended})
        assert observations.shape[0] == columns
        envs.step(np.zeros(columns, dtype=np.int64))  # stepping goes on from where every env was
        assert envs.state is RunnerState.READY


@pytest.mark.parametrize("backend", BACKENDS)
def test_ready_first_send_refuses_an_ended_env_in_disabled_mode_and_keeps_the_others(backend):
    with closing(_vector_env([cartpole] * 2, backend, autoreset_mode="Disabled", batch_size=2)) as envs:
        envs.reset(seed=0)
        for _ in range(300):
            envs.send(np.zeros(2, dtype=np.int64))
            _, _, terminations, truncations, infos = envs.recv()
            ended_ids = infos["env_id"][terminations | truncations]
            if ended_ids.size:
                break
        with pytest.raises(ResetNeededError, match=rf"`send` would step envs {re.escape(repr(sorted(ended_ids.tolist())))}"):
            envs.send(np.zeros(2, dtype=np.int64))
        mask = np.zeros(2, dtype=bool)
        mask[ended_ids] = True
        envs.reset(options={"reset_mask": mask})
        envs.send(np.zeros(2, dtype=np.int64), env_ids=[0, 1])
        assert sorted(envs.recv()[4]["env_id"].tolist()) == [0, 1]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("source", ["single envs", "multi-agent envs"])
def test_get_attr_of_a_missing_attribute_raises_attribute_error_and_the_vector_env_stays_usable(backend, source):
    fns, columns = ([cartpole] * 3, 3) if source == "single envs" else ([make_relay] * 2, 8)
    with closing(_vector_env(fns, backend)) as envs:
        envs.reset(seed=0)
        with pytest.raises(AttributeError, match="no_such_attribute") as raised:
            envs.get_attr("no_such_attribute")
        assert any("raised by env 0 answering call('no_such_attribute')" in note for note in raised.value.__notes__)
        assert envs.state is RunnerState.READY
        envs.step(np.zeros(columns, dtype=np.int64))
        assert len(envs.get_attr("np_random_seed")) == columns


class _Strict(gym.Wrapper):
    """A wrapper with a method that refuses a bad argument and a read-only attribute."""

    def scaled(self, factor):
        if factor <= 0:
            raise ValueError(f"factor must be positive, got {factor}")
        return factor * 2

    @property
    def read_only(self):
        return 1

    @property
    def lock(self):
        return threading.Lock()


def _strict_cartpole():
    return _Strict(gym.make("CartPole-v1"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_call_and_set_attr_that_raise_leave_every_env_where_it_was(backend):
    with closing(_vector_env([_strict_cartpole] * 3, backend)) as envs:
        envs.reset(seed=0)
        before = envs.step(np.zeros(3, dtype=np.int64))[0]
        with pytest.raises(ValueError, match="factor must be positive, got -1"):
            envs.call("scaled", -1)
        with pytest.raises(AttributeError):
            envs.set_attr("read_only", 5)
        assert envs.call("scaled", 2) == (4, 4, 4)
        # The envs stood still: the next step continues the same episodes as a twin that saw no mistake.
        with closing(_vector_env([_strict_cartpole] * 3, backend)) as twin:
            twin.reset(seed=0)
            np.testing.assert_array_equal(twin.step(np.zeros(3, dtype=np.int64))[0], before)
            np.testing.assert_array_equal(
                twin.step(np.ones(3, dtype=np.int64))[0], envs.step(np.ones(3, dtype=np.int64))[0]
            )


class _StepFails(gym.Wrapper):
    def step(self, action):
        raise RuntimeError("the env broke")


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_env_failing_in_step_still_breaks_the_vector_env(backend):
    with closing(_vector_env([cartpole, lambda: _StepFails(gym.make("CartPole-v1"))], backend)) as envs:
        envs.reset(seed=0)
        with pytest.raises(WorkerError, match="the env broke"):
            envs.step(np.zeros(2, dtype=np.int64))
        assert envs.state is RunnerState.BROKEN


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_sb3_adapter_s_per_env_requests_raise_and_stay_usable(backend):
    from parallel_rollouts.sb3 import ParallelVecEnv

    vec_env = ParallelVecEnv([_strict_cartpole] * 2, backend=backend)
    try:
        vec_env.reset()
        with pytest.raises(AttributeError, match="no_such_attribute"):
            vec_env.get_attr("no_such_attribute")
        with pytest.raises(ValueError, match="factor must be positive"):
            vec_env.env_method("scaled", -3, indices=[1])
        vec_env.step(np.zeros(2, dtype=np.int64))
        assert vec_env.env_method("scaled", 3) == [6, 6]
    finally:
        vec_env.close()


def test_an_answer_that_cannot_leave_its_worker_is_refused_and_the_vector_env_stays_usable(no_leaks):
    with closing(_vector_env([_strict_cartpole] * 2, "async", main_process_envs=0)) as envs:
        envs.reset(seed=0)
        with pytest.raises(TypeError, match=r"the answer to call\('lock'\) cannot be sent from a worker process"):
            envs.get_attr("lock")
        assert envs.state is RunnerState.READY
        envs.step(np.zeros(2, dtype=np.int64))


def test_set_attr_failing_at_a_later_env_names_it_and_keeps_the_vector_env_usable():
    class RefusesOnEnvTwo(gym.Wrapper):
        def __setattr__(self, name, value):
            if name == "target" and getattr(self, "index", None) == 2:
                raise ValueError("env two takes no target")
            super().__setattr__(name, value)

    def factory(index):
        env = RefusesOnEnvTwo(gym.make("CartPole-v1"))
        env.index = index
        return env

    with closing(ParallelVectorEnv([lambda i=i: factory(i) for i in range(3)], backend="sync")) as envs:
        envs.reset(seed=0)
        with pytest.raises(ValueError, match="env two takes no target") as raised:
            envs.set_attr("target", 5)
        assert any("raised by env 2 answering set_attr('target')" in note for note in raised.value.__notes__)
        # The envs before it took the value (as with SyncVectorEnv); the episodes are untouched.
        assert envs.get_attr("index") == (0, 1, 2)
        envs.step(np.zeros(3, dtype=np.int64))
        assert envs.state is RunnerState.READY


def test_the_default_backend_is_sync_unless_an_option_only_workers_use_is_given(no_leaks):
    from parallel_rollouts.sb3 import ParallelVecEnv

    with closing(ParallelVectorEnv([cartpole] * 2)) as envs:
        assert envs.backend == "sync"
    with closing(ParallelVectorEnv([cartpole] * 2, num_workers=1)) as envs:
        assert envs.backend == "async"
    with ParallelVecEnv([cartpole] * 2) as vec_env:
        assert vec_env.backend == "sync"
    with ParallelVecEnv([cartpole] * 2, main_process_envs=0) as vec_env:
        assert vec_env.backend == "async"
