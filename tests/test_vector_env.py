"""ParallelVectorEnv: a Gymnasium VectorEnv over the workers, step for step like SyncVectorEnv."""

from __future__ import annotations

from contextlib import closing

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv
from gymnasium.wrappers.vector import RecordEpisodeStatistics

from parallel_rollouts import (
    ActionError,
    CollectorClosedError,
    ConfigurationError,
    ParallelVectorEnv,
    RunnerState,
    SpaceError,
    VectorEnvClosedError,
    WorkerError,
)
from tests.leaks import ResourceSnapshot
from tests.vector_envs import ADAPTER_ENVS, step_fails, cartpole, pendulum

NUM_ENVS = 4
# Pendulum truncates at 200 steps: 260 steps cover an end and the steps after it.
STEPS = 260


def _pair(env_name: str, mode: AutoresetMode, backend: str, **options):
    env_fns = [ADAPTER_ENVS[env_name]] * NUM_ENVS
    extra = {"num_workers": 2} if backend == "async" else {}
    return (
        SyncVectorEnv(env_fns, autoreset_mode=mode),
        ParallelVectorEnv(env_fns, backend=backend, autoreset_mode=mode, **extra, **options),
    )


def _assert_same(expected, got, what):
    assert data_equivalence(expected, got, exact=True), f"{what}:\nSyncVectorEnv: {expected!r}\nParallelVectorEnv: {got!r}"


@pytest.mark.parametrize("backend", ["sync", "async"])
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
@pytest.mark.parametrize("env_name", sorted(ADAPTER_ENVS))
def test_steps_exactly_like_sync_vector_env(env_name, mode, backend, core):
    reference, ours = _pair(env_name, mode, backend, core=core)
    try:
        _assert_same(reference.reset(seed=7), ours.reset(seed=7), "reset")
        reference.action_space.seed(3)
        ended = 0
        for t in range(STEPS):
            actions = reference.action_space.sample()
            expected = reference.step(actions)
            _assert_same(expected, ours.step(actions), f"step {t}")
            ended += int(np.sum(expected[2] | expected[3]))
        assert ended > 0, "the run must cross episode ends"
        _assert_same(reference.reset(seed=[1, 2, 3, 4]), ours.reset(seed=[1, 2, 3, 4]), "reset with a seed list")
    finally:
        reference.close()
        ours.close()


@pytest.mark.parametrize("backend", ["sync", "async"])
def test_declares_what_sync_vector_env_declares(backend):
    reference, ours = _pair("dict", AutoresetMode.SAME_STEP, backend)
    try:
        assert isinstance(ours, VectorEnv)
        assert ours.num_envs == reference.num_envs
        for name in ("single_observation_space", "single_action_space", "observation_space", "action_space"):
            assert getattr(ours, name) == getattr(reference, name), name
        assert ours.metadata == reference.metadata
        assert ours.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP
        assert ours.render_mode == reference.render_mode
    finally:
        reference.close()
        ours.close()


@pytest.mark.parametrize("backend", ["sync", "async"])
def test_seed_lists_masked_resets_and_disabled_autoreset_match_sync_vector_env(backend):
    reference, ours = _pair("cartpole", AutoresetMode.DISABLED, backend)
    try:
        seeds = [11, None, 13, 14]
        _assert_same(reference.reset(seed=seeds)[0][[0, 2, 3]], ours.reset(seed=seeds)[0][[0, 2, 3]], "seed list")
        _assert_same(reference.reset(seed=5), ours.reset(seed=5), "int seed")
        resets = 0
        for t in range(120):
            actions = np.full(NUM_ENVS, t % 2)
            expected = reference.step(actions)
            _assert_same(expected, ours.step(actions), f"step {t}")
            ended = expected[2] | expected[3]
            if ended.any():
                resets += 1
                options = {"reset_mask": ended.copy()}
                _assert_same(
                    reference.reset(seed=[100 + t] * NUM_ENVS, options=dict(options)),
                    ours.reset(seed=[100 + t] * NUM_ENVS, options=dict(options)),
                    f"masked reset after step {t}",
                )
        assert resets >= 2
    finally:
        reference.close()
        ours.close()




@pytest.mark.parametrize("backend", ["sync", "async"])
def test_call_get_attr_and_set_attr_reach_every_env(backend):
    reference, ours = _pair("pendulum", AutoresetMode.NEXT_STEP, backend)
    try:
        assert ours.get_attr("max_speed") == reference.get_attr("max_speed")
        ours.set_attr("max_speed", [1.0, 2.0, 3.0, 4.0])
        assert ours.get_attr("max_speed") == (1.0, 2.0, 3.0, 4.0)
        ours.set_attr("g", 3.5)
        assert ours.get_attr("g") == (3.5,) * NUM_ENVS
        ours.reset(seed=0)
        reference.reset(seed=0)
        _assert_same(reference.call("_get_obs"), ours.call("_get_obs"), "call")
        with pytest.raises(ValueError, match="one entry per env"):
            ours.set_attr("g", [1.0, 2.0])
    finally:
        reference.close()
        ours.close()


@pytest.mark.parametrize("backend", ["sync", "async"])
def test_gymnasium_vector_wrappers_see_the_same_episodes(backend):
    reference, ours = _pair("cartpole", AutoresetMode.NEXT_STEP, backend)
    reference, ours = RecordEpisodeStatistics(reference), RecordEpisodeStatistics(ours)
    try:
        reference.reset(seed=2)
        ours.reset(seed=2)
        episodes = 0
        for t in range(150):
            actions = np.full(NUM_ENVS, (t // 3) % 2)
            expected, got = reference.step(actions)[4], ours.step(actions)[4]
            if "episode" in expected:
                episodes += int(expected["_episode"].sum())
                np.testing.assert_array_equal(expected["episode"]["r"], got["episode"]["r"])
                np.testing.assert_array_equal(expected["episode"]["l"], got["episode"]["l"])
            else:
                assert "episode" not in got
        assert episodes > 0
    finally:
        reference.close()
        ours.close()


@pytest.mark.parametrize("backend", ["sync", "async"])
def test_copy_false_returns_buffers_the_next_step_overwrites(backend):
    extra = {"num_workers": 2} if backend == "async" else {}
    copied = ParallelVectorEnv([cartpole] * 2, backend=backend, **extra)
    shared = ParallelVectorEnv([cartpole] * 2, backend=backend, copy=False, **extra)
    try:
        first_copy, _ = copied.reset(seed=0)
        first_view, _ = shared.reset(seed=0)
        kept_copy, kept_view = first_copy.copy(), first_view.copy()
        actions = np.ones(2, dtype=np.int64)
        copied.step(actions)
        second_view = shared.step(actions)[0]
        np.testing.assert_array_equal(first_copy, kept_copy)
        assert np.shares_memory(first_view, second_view)
        assert not np.array_equal(first_view, kept_view)
    finally:
        copied.close()
        shared.close()


# -- bad inputs and lifetime -----------------------------------------------------------------


def test_envs_with_different_spaces_are_rejected():
    with pytest.raises(SpaceError, match="env 1 declares the observation space"):
        ParallelVectorEnv([cartpole, pendulum], backend="sync")


def test_actions_of_the_wrong_shape_are_named():
    with closing(ParallelVectorEnv([cartpole] * 3, backend="sync")) as env:
        env.reset(seed=0)
        with pytest.raises(ActionError, match=r"shape \(2,\); expected \(3,\) \(\[num_envs=3\]"):
            env.step(np.zeros(2, dtype=np.int64))


def test_bad_arguments_are_configuration_errors():
    with pytest.raises(ConfigurationError, match="`backend` must be one of"):
        ParallelVectorEnv([cartpole], backend="ray")
    with pytest.raises(ConfigurationError, match="`autoreset_mode` must be"):
        ParallelVectorEnv([cartpole], backend="sync", autoreset_mode="sometimes")
    with pytest.raises(ConfigurationError, match="env_fns\\[0\\] is not a factory"):
        ParallelVectorEnv([cartpole()], backend="sync")


@pytest.mark.parametrize("backend", ["sync", "async"])
def test_an_env_failure_names_the_env_and_breaks_the_vector_env(backend):
    extra = {"num_workers": 2} if backend == "async" else {}
    env = ParallelVectorEnv([cartpole, step_fails], backend=backend, **extra)
    try:
        env.reset(seed=0)
        with pytest.raises(WorkerError, match="env 1 raised ValueError in `step`: the simulator diverged"):
            env.step(np.zeros(2, dtype=np.int64))
        with pytest.raises(CollectorClosedError, match="broken by an earlier failure"):
            env.step(np.zeros(2, dtype=np.int64))
    finally:
        env.close()


@pytest.mark.parametrize("backend", ["sync", "async"])
def test_close_releases_every_process_and_segment_and_later_calls_fail_clearly(backend):
    before = ResourceSnapshot.take()
    extra = {"num_workers": 2} if backend == "async" else {}
    env = ParallelVectorEnv([cartpole] * 4, backend=backend, **extra)
    env.reset(seed=0)
    env.step(np.zeros(4, dtype=np.int64))
    env.close()
    env.close()
    assert env.closed
    with pytest.raises(CollectorClosedError, match="is closed"):
        env.step(np.zeros(4, dtype=np.int64))
    del env
    before.assert_nothing_leaked()


@pytest.mark.parametrize("backend", ["sync", "async"])
def test_states_move_ready_broken_closed_with_the_collectors_messages(backend):
    extra = {"num_workers": 2} if backend == "async" else {}
    env = ParallelVectorEnv([cartpole, step_fails], backend=backend, **extra)
    try:
        assert env.state is RunnerState.READY and env.failure is None and not env.closed
        env.reset(seed=0)
        with pytest.raises(WorkerError) as failed:
            env.step(np.zeros(2, dtype=np.int64))
        assert env.state is RunnerState.BROKEN and env.failure is failed.value and not env.closed
        for call in (lambda: env.reset(seed=0), lambda: env.get_attr("spec"), lambda: env.step(np.zeros(2, dtype=np.int64))):
            with pytest.raises(
                VectorEnvClosedError,
                match=r"^this ParallelVectorEnv is broken by an earlier failure \(WorkerError: env 1 raised ValueError "
                r"in `step`: the simulator diverged(?s:.*)\); close it and create a new one\.$",
            ) as refused:
                call()
            assert refused.value.__cause__ is failed.value
    finally:
        env.close()
    assert env.state is RunnerState.CLOSED and env.failure is None and env.closed
    with pytest.raises(VectorEnvClosedError, match=r"^this ParallelVectorEnv is closed; create a new one\.$"):
        env.reset(seed=0)


def test_closing_a_ready_vector_env_moves_it_to_closed_once():
    env = ParallelVectorEnv([cartpole] * 2, backend="sync")
    env.reset(seed=0)
    env.close()
    assert env.state is RunnerState.CLOSED and env.closed
    env.close()  # idempotent: nothing is released twice
    with pytest.raises(VectorEnvClosedError, match=r"^this ParallelVectorEnv is closed; create a new one\.$"):
        env.call("render")


class _InfoCartPole(gym.Wrapper):
    """CartPole with a non-empty info at every step and reset: an ended env reports a final info
    beside the terminal observation that travels through shared memory, then a reset info."""

    def __init__(self) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self._steps = 0

    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        return observation, {**info, "resets": np.int64(self._steps)}

    def step(self, action):
        self._steps += 1
        observation, reward, terminated, truncated, info = self.env.step(action)
        return observation, reward, terminated, truncated, {**info, "steps": self._steps}


class _Float64CartPole(gym.Wrapper):
    """CartPole whose observations are float64 for its float32 space: a terminal observation that
    is not the space's own dtype is sent whole, as the env returned it."""

    def __init__(self) -> None:
        super().__init__(gym.make("CartPole-v1"))

    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        return observation.astype(np.float64), info

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        return observation.astype(np.float64), reward, terminated, truncated, info


class _ResetInfoCartPole(gym.Wrapper):
    """CartPole with an empty info at every step and a non-empty one at every reset: an ended
    env's only event is its reset info, its final observation and (empty) final info implied."""

    def __init__(self) -> None:
        super().__init__(gym.make("CartPole-v1"))

    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        return observation, {**info, "fresh": True}


@pytest.mark.parametrize("backend", ["sync", "async"])
@pytest.mark.parametrize(
    "factory", [_InfoCartPole, _Float64CartPole, _ResetInfoCartPole], ids=["infos", "float64", "reset-info-only"]
)
def test_same_step_terminal_observations_and_infos_match_sync_vector_env(factory, backend):
    reference = SyncVectorEnv([factory] * NUM_ENVS, autoreset_mode=AutoresetMode.SAME_STEP)
    extra = {"num_workers": 2} if backend == "async" else {}
    ours = ParallelVectorEnv([factory] * NUM_ENVS, backend=backend, autoreset_mode=AutoresetMode.SAME_STEP, **extra)
    try:
        _assert_same(reference.reset(seed=5), ours.reset(seed=5), "reset")
        ended = 0
        for t in range(120):
            actions = np.full(NUM_ENVS, t % 2)
            expected = reference.step(actions)
            _assert_same(expected, ours.step(actions), f"step {t}")
            ended += int(np.sum(expected[2] | expected[3]))
        assert ended > 0, "the run must cross episode ends"
    finally:
        reference.close()
        ours.close()


@pytest.mark.parametrize("backend", ["sync", "async"])
def test_ready_first_same_step_returns_each_ended_envs_terminal_observation(backend):
    """recv() of envs whose episode ended: their ``final_obs`` is the observation their step returned."""
    extra = {"num_workers": 2} if backend == "async" else {}
    env = ParallelVectorEnv(
        [_InfoCartPole] * NUM_ENVS, backend=backend, autoreset_mode=AutoresetMode.SAME_STEP, batch_size=2, **extra
    )
    twins = [_InfoCartPole() for _ in range(NUM_ENVS)]  # each env's replica, stepped alike
    try:
        env.reset(seed=[0, 1, 2, 3])
        for index, twin in enumerate(twins):
            twin.reset(seed=index)
        ended, actions = 0, {}
        env.send(np.zeros(NUM_ENVS, dtype=np.int64), np.arange(NUM_ENVS))
        actions.update({index: 0 for index in range(NUM_ENVS)})
        for _ in range(200):
            observations, _, terminations, truncations, infos = env.recv()
            for position, index in enumerate(infos["env_id"].tolist()):
                expected, _, terminated, truncated, _ = twins[index].step(actions[index])
                assert (terminations[position], truncations[position]) == (terminated, truncated)
                if terminated or truncated:
                    ended += 1
                    assert infos["_final_obs"][position] and infos["final_info"]["steps"][position] > 0
                    np.testing.assert_array_equal(infos["final_obs"][position], expected)
                    expected, _ = twins[index].reset()
                np.testing.assert_array_equal(observations[position], expected)
            actions.update({index: 1 - (index % 2) for index in infos["env_id"].tolist()})
            env.send(np.array([actions[index] for index in infos["env_id"].tolist()]), infos["env_id"])
        assert ended > 0
    finally:
        env.close()
        for twin in twins:
            twin.close()
