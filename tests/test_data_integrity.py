"""The batch holds exactly what happened: no silent conversion, checks at the step, inputs nobody rewrites."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path
from functools import partial

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from parallel_rollouts import (
    ActionError,
    CollectorClosedError,
    ObservationError,
    ObservationWarning,
    ParallelRolloutCollector,
    PolicyOutput,
    SpaceError,
    WorkerError,
)
from tests.batch_compare import assert_batches_identical
from tests.envs import ConstantPolicy, CountingEnv

IN_PROCESS = ["serial", "sync"]
REPO_ROOT = Path(__file__).resolve().parent.parent
ALL_LOCAL = ["serial", "sync", "async"]


def _options(backend):
    return {"num_workers": 2} if backend == "async" else {}


class ReturnsEnv(gym.Env):
    """Returns ``make_observation(step)`` from ``step`` (and ``reset`` when ``at_reset``)."""

    metadata = {"render_modes": []}

    def __init__(self, space, make_observation, bad_from_step=2, at_reset=False, episode_length=100):
        self.observation_space = space
        self.action_space = spaces.Discrete(2)
        self.make_observation = make_observation
        self.bad_from_step = bad_from_step
        self.at_reset = at_reset
        self.episode_length = episode_length
        self._steps = 0

    def _good(self):
        return np.zeros(self.observation_space.shape, self.observation_space.dtype)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._steps = 0
        return (self.make_observation(0) if self.at_reset else self._good()), {}

    def step(self, action):
        self._steps += 1
        observation = self.make_observation(self._steps) if self._steps >= self.bad_from_step else self._good()
        return observation, 0.0, False, self._steps >= self.episode_length, {}


def _frames_in_unit_range(step):
    return np.full((3, 3), 0.5, np.float32)


def _int64_300(step):
    return np.array([300, 1], np.int64)


def _python_floats(step):
    return [1.0, 2.0]


def _strings(step):
    return np.array(["a", "b"])


def _none_element(step):
    return [None, 1.0]


CONVERSION_CASES = {
    # name: (space, observation, message)
    "float-frames-into-uint8": (spaces.Box(0, 255, (3, 3), np.uint8), _frames_in_unit_range, r"floats \(dtype float32\) for an integer leaf of dtype uint8"),
    "int64-300-into-uint8": (spaces.Box(0, 255, (2,), np.uint8), _int64_300, r"integer 300 \(dtype int64\), which does not fit the leaf's dtype uint8"),
    "python-floats-into-int": (spaces.Box(0, 9, (2,), np.int64), _python_floats, r"floats \(dtype float64\) for an integer leaf of dtype int64"),
    "strings": (spaces.Box(0, 1, (2,), np.float32), _strings, r"non-numeric elements \(dtype <U1"),
    "none-element": (spaces.Box(0, 1, (2,), np.float32), _none_element, r"non-numeric elements \(dtype object"),
}


CONVERSION_RUNS = [(backend, case) for backend in IN_PROCESS for case in sorted(CONVERSION_CASES)] + [
    ("async", "float-frames-into-uint8"),
    ("async", "int64-300-into-uint8"),
]


@pytest.mark.parametrize("backend, case", CONVERSION_RUNS)
def test_an_observation_that_would_change_in_storage_raises_naming_env_row_and_leaf(backend, case, core):
    space, make_observation, message = CONVERSION_CASES[case]
    fns = [partial(ReturnsEnv, space, make_observation, bad_from_step=10**9)] * 1 + [partial(ReturnsEnv, space, make_observation)]
    with ParallelRolloutCollector(fns, ConstantPolicy(2), backend, horizon=4, seed=0, core=core, **_options(backend)) as collector:
        with pytest.raises(ObservationError, match=r"env 1 returned an observation at step t=1 \(observations row t=2\) .*" + message):
            collector.collect()
        with pytest.raises(CollectorClosedError):
            collector.collect()


@pytest.mark.parametrize("backend", IN_PROCESS)
def test_a_conversion_error_in_a_nested_space_names_the_leaf_path(backend, core):
    space = spaces.Dict({"camera": spaces.Box(0, 255, (3, 3), np.uint8), "speed": spaces.Box(-1, 1, (1,), np.float32)})

    def observation(step):
        return {"camera": np.full((3, 3), 0.5, np.float32), "speed": np.zeros(1, np.float32)}

    class NestedEnv(ReturnsEnv):
        def _good(self):
            return {"camera": np.zeros((3, 3), np.uint8), "speed": np.zeros(1, np.float32)}

    fns = [partial(NestedEnv, space, observation, at_reset=True)]
    with pytest.raises(ObservationError, match=r"env 0 returned an observation from its first `reset` \(observations row t=0\) at \['camera'\] .*floats"):
        ParallelRolloutCollector(fns, ConstantPolicy(1), backend, horizon=2, seed=0, core=core)


@pytest.mark.parametrize("backend", IN_PROCESS)
def test_float64_observations_are_rounded_into_a_float32_space(backend, core):
    space = spaces.Box(-10, 10, (2,), np.float32)
    fns = [partial(ReturnsEnv, space, lambda step: np.array([0.1, step], np.float64), bad_from_step=1)]
    with ParallelRolloutCollector(fns, ConstantPolicy(1), backend, horizon=3, seed=0, core=core) as collector:
        batch = collector.collect()
    np.testing.assert_array_equal(batch.observations[1:, 0, 0], np.float32(0.1))
    assert batch.observations.dtype == np.float32


# -- value checks at the step, before the policy ----------------------------------------------


class RaisesOnNan:
    """A policy that, like torch.distributions.Categorical, refuses NaN inputs."""

    def __call__(self, observations):
        if np.isnan(observations).any():
            raise ValueError("the policy got NaN")
        return np.zeros(observations.shape[0], np.int64)


@pytest.mark.parametrize("backend, mode", [("serial", "warn"), ("sync", "warn"), ("sync", "raise"), ("async", "warn")])
def test_a_nan_observation_raises_observation_error_before_the_policy_sees_it(backend, mode, core):
    space = spaces.Box(-1, 1, (2,), np.float32)
    fns = [partial(ReturnsEnv, space, lambda step: np.array([np.nan, 0], np.float32), bad_from_step=3)] * 2
    with ParallelRolloutCollector(
        fns, RaisesOnNan(), backend, horizon=5, seed=0, core=core, observation_check=mode, **_options(backend)
    ) as collector:
        with pytest.raises(ObservationError, match=r"env 0 returned an observation at step t=2 \(observations row t=3\) outside"):
            collector.collect()


class OvershootEnv(gym.Env):
    """Declares Box(-2.5, 2.5) like LunarLander's position and overshoots it by 1%, as LunarLander does."""

    metadata = {"render_modes": []}

    def __init__(self):
        self.observation_space = spaces.Box(-2.5, 2.5, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self._steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._steps = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self._steps += 1
        height = np.float32(2.526 if self._steps % 3 == 0 else 1.0)
        return np.array([0.0, height], np.float32), 1.0, False, self._steps >= 7, {}


WARNING_MODES = [
    pytest.param("serial", {}, id="serial"),
    pytest.param("sync", {}, id="sync"),
    pytest.param("async", {"num_workers": 2}, id="async"),
    pytest.param("async", {"num_workers": 2, "policy_placement": "workers"}, id="rollout-workers"),
]


@pytest.mark.parametrize("backend, options", WARNING_MODES)
def test_a_float_bounds_overshoot_warns_and_never_ends_the_run_by_default(backend, options, core):
    with ParallelRolloutCollector(
        [OvershootEnv] * 2, ConstantPolicy(2), backend, horizon=10, seed=0, core=core, **options
    ) as collector:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            batches = [collector.collect() for _ in range(3)]
    assert all(batch.observations[3, :, 1].tolist() == [np.float32(2.526)] * 2 for batch in batches[:1])
    assert batches[2].episode_lengths.tolist()  # episodes keep ending and resetting
    # Worker processes send their warnings back: the caller's filters see them on every backend.
    messages = sorted(str(w.message) for w in caught if issubclass(w.category, ObservationWarning))
    # Once per env and leaf, not once per step.
    assert len(messages) == 2
    assert "env 0 returned an observation at step t=2 (observations row t=3) outside its observation space" in messages[0]
    assert "env 1 returned an observation at step t=2" in messages[1]


@pytest.mark.parametrize("options", [{}, {"policy_placement": "workers"}], ids=["per-step", "rollout-workers"])
def test_a_filter_in_the_main_process_decides_what_worker_warnings_do(options, no_leaks):
    def make():
        return ParallelRolloutCollector(
            [OvershootEnv] * 2, ConstantPolicy(2), "async", horizon=10, seed=0, num_workers=2, **options
        )

    with make() as collector:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # Filters by module see the module that raised it in the worker, as they would in-process.
            warnings.filterwarnings("ignore", category=ObservationWarning, module=r"parallel_rollouts\.")
            collector.collect()
        assert not [w for w in caught if issubclass(w.category, ObservationWarning)]
    with make() as collector:
        with warnings.catch_warnings():
            warnings.simplefilter("error", ObservationWarning)
            with pytest.raises(ObservationWarning, match="env 0 returned an observation at step t=2"):
                collector.collect()
        # Raised once the rollout was complete: that batch is dropped, the collector goes on
        # from where the envs stand.
        batch = collector.collect()
    with make() as collector, warnings.catch_warnings():
        warnings.simplefilter("ignore", ObservationWarning)
        expected = [collector.collect() for _ in range(2)][1]
    assert_batches_identical(batch, expected)


def test_dash_w_error_applies_in_the_main_process_not_as_an_env_failure_in_the_workers(tmp_path):
    # Spawned workers inherit -W options; they must still send the warning back rather than fail on it.
    script = tmp_path / "w_error.py"
    script.write_text(
        "from parallel_rollouts import ObservationWarning, ParallelRolloutCollector\n"
        "from tests.envs import ConstantPolicy\n"
        "from tests.test_data_integrity import OvershootEnv\n"
        "if __name__ == '__main__':\n"
        "    with ParallelRolloutCollector([OvershootEnv] * 2, ConstantPolicy(2), 'async', horizon=10, seed=0, num_workers=2) as c:\n"
        "        try:\n"
        "            c.collect()\n"
        "        except ObservationWarning as warning:\n"
        "            print('raised in the main process:', type(warning).__name__)\n"
        "        c.collect()\n"
        "        print('still usable')\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    completed = subprocess.run(
        [sys.executable, "-W", "error::UserWarning", str(script)], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT, env=env
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines() == ["raised in the main process: ObservationWarning", "still usable"]


class _FailsAtStepThree(OvershootEnv):
    def step(self, action):
        if self._steps == 2:
            raise RuntimeError("simulator crashed")
        return super().step(action)


def test_an_env_failure_is_not_hidden_by_a_warning_made_an_error(no_leaks):
    # Env 0 warns at t=2 while env 1 fails at t=2: the failure is what the caller sees.
    with ParallelRolloutCollector([OvershootEnv, _FailsAtStepThree], ConstantPolicy(2), "async", horizon=10, seed=0, num_workers=2) as collector:
        with warnings.catch_warnings():
            warnings.simplefilter("error", ObservationWarning)
            with pytest.raises(WorkerError, match="env 1 raised RuntimeError in `step`: simulator crashed"):
                collector.collect()


@pytest.mark.parametrize("backend", IN_PROCESS)
def test_raise_mode_stops_on_a_float_bounds_overshoot_and_off_mode_stores_it(backend, core):
    with ParallelRolloutCollector([OvershootEnv], ConstantPolicy(1), backend, horizon=4, seed=0, core=core, observation_check="raise") as collector:
        with pytest.raises(ObservationError, match=r"env 0 returned an observation at step t=2 .*got \[0.0, 2.52"):
            collector.collect()
    with ParallelRolloutCollector([OvershootEnv], ConstantPolicy(1), backend, horizon=4, seed=0, core=core, observation_check="off") as collector:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            batch = collector.collect()
    assert batch.observations[3, 0, 1] == np.float32(2.526)


@pytest.mark.parametrize("backend", IN_PROCESS)
def test_an_integer_space_value_out_of_range_raises_in_the_default_mode(backend, core):
    space = spaces.Box(0, 5, (2,), np.int64)
    fns = [partial(ReturnsEnv, space, lambda step: np.array([6, 0], np.int64))]
    with ParallelRolloutCollector(fns, ConstantPolicy(1), backend, horizon=3, seed=0, core=core) as collector:
        with pytest.raises(ObservationError, match=r"env 0 returned an observation at step t=1 .* got \[6, 0\]"):
            collector.collect()


def test_a_terminal_observation_is_checked_at_its_step():
    class BadEnd(CountingEnv):
        def step(self, action):
            observation, reward, terminated, truncated, info = super().step(action)
            if terminated:
                observation = np.full(4, np.nan, np.float32)
            return observation, reward, terminated, truncated, info

    with ParallelRolloutCollector([partial(BadEnd, episode_length=2)], RaisesOnNan(), "sync", horizon=4, seed=0) as collector:
        with pytest.raises(ObservationError, match=r"env 0 returned a terminal observation at step t=1 \(final_observations row t=1\)"):
            collector.collect()


def test_observation_check_must_be_one_of_the_modes():
    with pytest.raises(ValueError, match=r"`observation_check` must be one of \('warn', 'raise', 'off'\); got 'strict'"):
        ParallelRolloutCollector([CountingEnv], backend="sync", horizon=2, seed=0, observation_check="strict")


# -- actions the envs receive -----------------------------------------------------------------


class KeepsAndMutatesAction(gym.Env):
    """Keeps every action it gets (as StickyAction does) and then scribbles over it."""

    metadata = {"render_modes": []}

    def __init__(self):
        self.observation_space = spaces.Box(-100, 100, (2,), np.float32)
        self.action_space = spaces.Box(-1, 1, (2,), np.float32)
        self.kept: list[np.ndarray] = []
        self.seen: list[list[float]] = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.kept.append(action)
        self.seen.append(np.asarray(action).tolist())
        action[...] = 0.75  # an in-place change must not reach the batch
        return np.zeros(2, np.float32), 0.0, False, False, {}


class StepPolicy:
    def __init__(self):
        self.calls = 0

    def __call__(self, observations):
        self.calls += 1
        return np.full((observations.shape[0], 2), -1 + 0.01 * self.calls, np.float32)


@pytest.mark.parametrize("reuse", [False, True])
@pytest.mark.parametrize("backend", IN_PROCESS)
def test_an_env_keeping_or_mutating_its_action_sees_and_changes_nothing_else(backend, reuse, core):
    envs = [KeepsAndMutatesAction(), KeepsAndMutatesAction()]
    fns = [lambda e=env: e for env in envs]
    with ParallelRolloutCollector(fns, StepPolicy(), backend, horizon=3, seed=0, core=core, reuse_buffers=reuse) as collector:
        first = collector.collect()
        first_actions = first.actions.copy()
        collector.collect()
    expected = [[-1 + 0.01 * call] * 2 for call in range(1, 7)]
    for env in envs:
        # What each env kept is what it was given, then changed by itself alone.
        np.testing.assert_allclose(env.seen, expected, rtol=1e-6)
        assert all(np.all(kept == 0.75) for kept in env.kept)
    # The batch records what the policy chose, not the envs' scribbles.
    np.testing.assert_allclose(first_actions[:, 0], expected[:3], rtol=1e-6)
    if not reuse:
        np.testing.assert_allclose(first.actions[:, 1], expected[:3], rtol=1e-6)


# -- arrays handed to the policy --------------------------------------------------------------


class KeepsInputs:
    """A policy that keeps every observation array it is handed (a frame history)."""

    def __init__(self):
        self.kept = []

    def __call__(self, observations):
        self.kept.append(observations)
        return np.ones(observations.shape[0], np.int64)


@pytest.mark.parametrize("backend", ALL_LOCAL)
def test_a_policy_may_keep_its_inputs_by_default_on_every_backend(backend, core):
    policy = KeepsInputs()
    fns = [partial(CountingEnv, env_id=i, episode_length=5) for i in range(2)]
    with ParallelRolloutCollector(fns, policy, backend, horizon=4, seed=0, core=core, **_options(backend)) as collector:
        batches = [collector.collect() for _ in range(3)]
    kept = np.stack(policy.kept)
    expected = np.concatenate([batch.observations for batch in batches])
    np.testing.assert_array_equal(kept, expected)
    assert not policy.kept[0].flags.writeable


class TriesToWriteItsInputs:
    """A policy that turns its observations' write flag back on and overwrites them."""

    def __init__(self) -> None:
        self.calls = self.refusals = 0

    def __call__(self, observations):
        self.calls += 1
        try:
            observations.flags.writeable = True
        except ValueError:
            self.refusals += 1
        else:
            observations[...] = -7
        return np.ones(observations.shape[0], np.int64)


@pytest.mark.parametrize(
    "backend, options",
    [
        ("serial", {}), ("sync", {}), ("sync", {"reuse_buffers": True}), ("async", {"num_workers": 2}),
        ("async", {"num_workers": 2, "pipelined": True}), ("async", {"num_workers": 2, "reuse_buffers": True}),
    ],
    ids=["serial", "sync", "sync-reuse", "async", "async-pipelined", "async-reuse"],
)
def test_a_policy_cannot_make_its_inputs_writeable_and_change_the_batch(backend, options, core):
    fns = [partial(CountingEnv, env_id=i, episode_length=5) for i in range(2)]
    policy = TriesToWriteItsInputs()
    with ParallelRolloutCollector(fns, policy, backend, horizon=4, seed=0, core=core, **options) as collector:
        written = collector.collect()
    with ParallelRolloutCollector(fns, lambda o: np.ones(o.shape[0], np.int64), backend, horizon=4, seed=0, core=core, **options) as collector:
        untouched = collector.collect()
    assert policy.refusals == policy.calls >= 4  # every call, every row
    np.testing.assert_array_equal(written.observations, untouched.observations)
    assert not (written.observations == -7).any()


class RefusesWritableInputs:
    """A policy that fails unless writing into its observations raises (it runs in a worker)."""

    def __call__(self, observations):
        try:
            observations[0] = -7
        except ValueError:
            return np.ones(observations.shape[0], np.int64)
        raise AssertionError("the policy was handed observations it can write into")


@pytest.mark.parametrize("options", [{}, {"reuse_buffers": True}], ids=["private-copies", "reused-buffers"])
def test_a_policy_in_the_workers_gets_read_only_inputs_too(options, core):
    fns = [partial(CountingEnv, env_id=i, episode_length=5) for i in range(2)]
    with ParallelRolloutCollector(
        fns, RefusesWritableInputs(), "async", horizon=4, seed=0, core=core, num_workers=2, policy_placement="workers", **options
    ) as collector:
        batch = collector.collect()
    assert batch.valid.all() and not (batch.observations == -7).any()


@pytest.mark.parametrize("backend", ALL_LOCAL)
def test_with_reused_buffers_copied_policy_inputs_still_hold_after_the_next_collect_on_every_backend(backend, core):
    policy = KeepsInputs()
    fns = [partial(CountingEnv, env_id=i, episode_length=5) for i in range(2)]
    with ParallelRolloutCollector(
        fns, policy, backend, horizon=4, seed=0, core=core, reuse_buffers=True, policy_inputs="copies", **_options(backend)
    ) as collector:
        batch = collector.collect()
        during = np.stack(policy.kept).copy()
        np.testing.assert_array_equal(during, batch.observations)
        second = collector.collect()
        # Documented: with "copies" the policy's rows are its own; the next collect rewrites the
        # batch alone (protected rows of reused storage follow it: tests/test_policy_inputs.py).
        np.testing.assert_array_equal(np.stack(policy.kept[:4]), during)
        np.testing.assert_array_equal(np.stack(policy.kept[4:]), second.observations)
        assert not np.array_equal(during, second.observations)


# -- an interruption anywhere ----------------------------------------------------------------


class LoggingEnv(CountingEnv):
    """A CountingEnv that remembers the last observation it returned."""

    def reset(self, *, seed=None, options=None):
        observation, info = super().reset(seed=seed, options=options)
        self.last = observation.copy()
        return observation, info

    def step(self, action):
        result = super().step(action)
        self.last = result[0].copy()
        return result


_WATCHED = (
    "policy/loop.py", "local.py", "in_process.py", "single_envs.py", "chain.py", "building.py", "batch_memory.py",
    "policy_inputs.py", "collector.py",
)


def _lines_in_a_collect(collector, watched=_WATCHED) -> int:
    """How many lines of the watched files one ``collect()`` runs."""
    trace, count = _interrupt_at_line(10**9, watched)
    sys.settrace(trace)
    try:
        collector.collect()
    finally:
        sys.settrace(None)
    return count[0]


def _collect_interrupted_at(collector, number, watched=_WATCHED) -> bool:
    """``collect()`` with a KeyboardInterrupt at the ``number``-th watched line; False if not reached."""
    trace, _ = _interrupt_at_line(number, watched)
    sys.settrace(trace)
    try:
        collector.collect()
        return False
    except KeyboardInterrupt:
        return True
    finally:
        sys.settrace(None)


def _interrupt_at_line(number, watched=_WATCHED):
    """A trace function raising KeyboardInterrupt at the ``number``-th line run in the watched files."""
    count = [0]

    def local(frame, event, arg):
        if event == "line":
            count[0] += 1
            if count[0] == number:
                raise KeyboardInterrupt
        return local

    def global_trace(frame, event, arg):
        if frame.f_code.co_filename.endswith(watched) and "parallel_rollouts" in frame.f_code.co_filename:
            return local
        return None

    return global_trace, count


def _interrupt_every_line(build, watched=_WATCHED) -> dict:
    """For each line of a collect in ``watched`` files: a fresh ``build() -> (envs, collector)``,
    one collect interrupted at that line, then the next collect. Each must either start where every
    env really stands (consistent) or refuse with a message about the interruption (broken)."""
    envs, collector = build()
    with collector:
        collector.collect()
        lines_in_a_collect = _lines_in_a_collect(collector, watched)
    assert lines_in_a_collect > 50
    outcomes = {"consistent": 0, "broken": 0, "not reached": 0}
    for number in range(1, lines_in_a_collect + 1):
        envs, collector = build()
        try:
            collector.collect()
            if not _collect_interrupted_at(collector, number, watched):
                outcomes["not reached"] += 1
            where = [env.last.copy() for env in envs]
            try:
                batch = collector.collect()
            except CollectorClosedError as error:
                assert "interrupted" in str(error) or "KeyboardInterrupt" in str(error), str(error)
                outcomes["broken"] += 1
                continue
            # Consistent: the batch starts where every env really stands.
            for column in range(len(envs)):
                np.testing.assert_array_equal(batch.observations[0, column], where[column], err_msg=f"line {number}")
            outcomes["consistent"] += 1
        finally:
            collector.close()
    assert outcomes["consistent"] > 0 and outcomes["broken"] > 0
    return outcomes


@pytest.mark.parametrize("backend", IN_PROCESS)
def test_an_interruption_at_any_line_leaves_the_collector_consistent_or_clearly_broken(backend):
    def build():
        envs = [LoggingEnv(env_id=i, episode_length=3) for i in range(2)]
        fns = [lambda e=env: e for env in envs]
        return envs, ParallelRolloutCollector(fns, ConstantPolicy(2), backend, horizon=4, seed=0, core="compiled")

    _interrupt_every_line(build)


_WATCHED_VECTOR = _WATCHED + ("vector_source.py", "policy/output.py", "checks/actions.py")


@pytest.mark.parametrize("mode", ["NEXT_STEP", "DISABLED"])
def test_an_interruption_at_any_line_of_a_vector_env_source_leaves_it_consistent_or_clearly_broken(mode):
    """The same for a Gymnasium vector env as the collector's source (one group, its own row)."""
    from gymnasium.vector import AutoresetMode, SyncVectorEnv

    def build():
        envs = [LoggingEnv(env_id=i, episode_length=3) for i in range(2)]
        vector_env = SyncVectorEnv([lambda e=env: e for env in envs], autoreset_mode=getattr(AutoresetMode, mode))
        return envs, ParallelRolloutCollector([lambda: vector_env], ConstantPolicy(2), "sync", horizon=4, seed=0, core="compiled")

    outcomes = _interrupt_every_line(build, _WATCHED_VECTOR)
    assert outcomes["not reached"] == 0


_WATCHED_ASYNC = _WATCHED + ("processes.py", "pool.py", "waiting.py", "shared_memory.py", "batch_segments.py")


def test_an_async_interruption_at_sampled_lines_leaves_the_collector_consistent_or_clearly_broken(no_leaks):
    """The main process's side of an async collect, interrupted at evenly spaced lines.

    The envs live in the workers, so consistency is read from the batch: each env's
    step counter goes up by one from row 0 to row 1 only if row 0 is where the env stands.
    """
    fns = [partial(CountingEnv, env_id=i, episode_length=10**6) for i in range(2)]

    def make():
        return ParallelRolloutCollector(fns, ConstantPolicy(2), "async", horizon=4, seed=0, num_workers=1)

    collector = make()
    try:
        collector.collect()
        lines_in_a_collect = _lines_in_a_collect(collector, _WATCHED_ASYNC)
        assert lines_in_a_collect > 50
        outcomes = {"consistent": 0, "broken": 0, "not reached": 0}
        for number in sorted(set(np.linspace(1, lines_in_a_collect, 24).astype(int).tolist())):
            if not _collect_interrupted_at(collector, number, _WATCHED_ASYNC):
                outcomes["not reached"] += 1
            try:
                batch = collector.collect()
            except CollectorClosedError as error:
                assert "interrupted" in str(error) or "KeyboardInterrupt" in str(error), str(error)
                outcomes["broken"] += 1
                collector.close()
                collector = make()
                collector.collect()
                continue
            steps = batch.observations[:, :, 1]
            np.testing.assert_array_equal(np.diff(steps, axis=0), 1, err_msg=f"line {number}")
            outcomes["consistent"] += 1
    finally:
        collector.close()
    assert outcomes["consistent"] > 0 and outcomes["broken"] > 0, outcomes


# -- final observations ----------------------------------------------------------------------


@pytest.mark.parametrize("backend", ALL_LOCAL)
def test_final_observations_are_zero_where_no_episode_ended_across_reused_and_fresh_batches(backend, core):
    fns = [partial(CountingEnv, env_id=i + 1, episode_length=2 + i) for i in range(3)]
    for reuse in (False, True):
        with ParallelRolloutCollector(fns, ConstantPolicy(3), backend, horizon=5, seed=0, core=core, reuse_buffers=reuse, **_options(backend)) as collector:
            for _ in range(4):
                batch = collector.collect()
                ended = batch.final_observation_mask
                assert ended.any()
                assert not batch.final_observations[~ended].any()
                assert batch.final_observations[ended][:, 0].tolist() == (np.argwhere(ended)[:, 1] + 1).tolist()


def test_an_interrupted_reused_rollout_leaves_no_stale_final_observation():
    fns = [partial(CountingEnv, env_id=i + 1, episode_length=2) for i in range(2)]

    class InterruptOnce:
        def __init__(self):
            self.calls = 0

        def __call__(self, observations):
            self.calls += 1
            if self.calls == 9:  # second collect, step 3: after the episode ends at t=1
                raise KeyboardInterrupt
            return np.ones(observations.shape[0], np.int64)

    with ParallelRolloutCollector(fns, InterruptOnce(), "sync", horizon=5, seed=0, reuse_buffers=True) as collector:
        collector.collect()
        with pytest.raises(KeyboardInterrupt):
            collector.collect()
        batch = collector.collect()
        assert not batch.final_observations[~batch.final_observation_mask].any()


# -- what envs return ------------------------------------------------------------------------


_UNSET = object()


class BadReturns(CountingEnv):
    def __init__(self, env_id=0, reward=_UNSET, terminated=_UNSET, reset_obs_only=False, step_four=False):
        super().__init__(env_id=env_id)
        self.bad_reward, self.bad_terminated = reward, terminated
        self.reset_obs_only, self.step_four = reset_obs_only, step_four

    def reset(self, *, seed=None, options=None):
        observation, info = super().reset(seed=seed, options=options)
        return observation if self.reset_obs_only else (observation, info)

    def step(self, action):
        observation, reward, terminated, truncated, info = super().step(action)
        if self.step_four:
            return observation, reward, terminated, info
        if self.bad_reward is not _UNSET:
            reward = self.bad_reward
        if self.bad_terminated is not _UNSET:
            terminated = self.bad_terminated
        return observation, reward, terminated, truncated, info


@pytest.mark.parametrize("backend", IN_PROCESS)
@pytest.mark.parametrize(
    "kwargs, phase, message",
    [
        ({"reward": np.array([1.0, 2.0])}, "step", r"the reward returned by `step` is an array of shape \(2,\)"),
        ({"reward": np.array([1.0])}, "step", r"the reward returned by `step` is an array of shape \(1,\)"),
        ({"reward": None}, "step", r"the reward returned by `step` is NoneType None, not a number"),
        ({"reward": "1.5"}, "step", r"the reward returned by `step` is str '1.5', not a number"),
        ({"terminated": None}, "step", r"`terminated` returned by `step` is NoneType None, not a bool"),
        ({"terminated": np.array([True, False])}, "step", r"`terminated` returned by `step` is an array of shape \(2,\)"),
        ({"step_four": True}, "step", r"`step` returned 4 values; Gymnasium envs return 5: .*pre-0.26 Gym API"),
        ({"reset_obs_only": True}, "reset", r"`reset` returned an array of shape \(4,\) .*; Gymnasium envs return a pair \(observation, info\)"),
    ],
    ids=["reward-array", "reward-one-element-array", "reward-none", "reward-string", "terminated-none", "terminated-array", "old-step-api", "old-reset-api"],
)
def test_bad_env_returns_name_the_env_the_field_and_the_fix(backend, kwargs, phase, message):
    fns = [partial(CountingEnv, env_id=0), partial(BadReturns, env_id=1, **kwargs)]
    with pytest.raises(WorkerError, match=rf"env 1 raised TypeError in `{phase}`: {message}") as info:
        with ParallelRolloutCollector(fns, ConstantPolicy(2), backend, horizon=2, seed=0, **_options(backend)) as collector:
            collector.collect()
    assert info.value.env_indices == (1,)


def test_a_bad_reward_in_an_async_worker_names_the_env():
    fns = [partial(CountingEnv, env_id=0), partial(BadReturns, env_id=1, reward=np.array([1.0, 2.0]))]
    with pytest.raises(WorkerError, match=r"env 1 raised TypeError in `step`: the reward returned by `step` is an array"):
        with ParallelRolloutCollector(fns, ConstantPolicy(2), "async", horizon=2, seed=0, num_workers=2) as collector:
            collector.collect()


def test_numpy_and_integer_rewards_and_flags_are_accepted():
    class Scalars(CountingEnv):
        def step(self, action):
            observation, reward, terminated, truncated, info = super().step(action)
            return observation, np.float32(reward), np.bool_(terminated), int(truncated), info

    with ParallelRolloutCollector([Scalars], ConstantPolicy(1), "sync", horizon=4, seed=0) as collector:
        batch = collector.collect()
    assert batch.rewards[:, 0].tolist() == [2.0, 3.0, 4.0, 2.0]
    assert batch.terminations[:, 0].tolist() == [False, False, True, False]


@pytest.mark.parametrize("space", [spaces.Box(0, 1, (0,)), spaces.Dict({"a": spaces.Box(0, 1, (2, 0))})], ids=["box", "nested"])
def test_a_zero_size_box_is_refused_at_construction(space):
    class ZeroSize(CountingEnv):
        def __init__(self):
            super().__init__()
            self.observation_space = space

    with pytest.raises(SpaceError, match=r"the observation space is not storable: .*holds no values"):
        ParallelRolloutCollector([ZeroSize], backend="sync", horizon=2, seed=0)


# -- what the policy returns -----------------------------------------------------------------

def _torch():
    # Imported here, not at module level: async workers import this module to unpickle its envs.
    import torch

    return torch


@pytest.mark.parametrize(
    "make_output, message",
    [
        (lambda n: [[0, 1], [1]], r"actions cannot be made into one array .*ragged"),
        (lambda n: _torch().zeros(n, dtype=_torch().int64, device="meta"), r"'meta' device, which holds shapes but no values"),
        (lambda n: PolicyOutput(np.zeros(n, np.int64), values=_torch().zeros(n, device="meta")), r"`values`.*'meta' device"),
        (lambda n: PolicyOutput(np.zeros(n, np.int64), values=[[1.0], [2.0, 3.0]]), r"`values` cannot be made into one array"),
        (lambda n: _torch().zeros(n, dtype=_torch().bfloat16), r"actions have dtype float32; the action space Discrete\(4\) needs integers"),
    ],
    ids=["ragged-actions", "meta-actions", "meta-values", "ragged-values", "bfloat16-actions-for-discrete"],
)
def test_policy_outputs_that_cannot_be_arrays_are_named(make_output, message):
    with ParallelRolloutCollector([CountingEnv, CountingEnv], lambda obs: make_output(2), "sync", horizon=2, seed=0) as collector:
        with pytest.raises(ActionError, match=message):
            collector.collect()
        assert not collector.closed


def test_bfloat16_values_and_box_actions_are_converted_exactly():
    class BoxActions(CountingEnv):
        def __init__(self):
            super().__init__()
            self.action_space = spaces.Box(-1, 1, (2,), np.float32)

        def step(self, action):
            return super().step(0)

    torch = _torch()

    def policy(observations):
        return PolicyOutput(torch.full((2, 2), 0.5, dtype=torch.bfloat16), values=torch.full((2,), 1.25, dtype=torch.bfloat16))

    with ParallelRolloutCollector([BoxActions] * 2, policy, "sync", horizon=2, seed=0) as collector:
        batch = collector.collect()
    assert batch.actions.dtype == np.float32 and (batch.actions == 0.5).all()
    assert (batch.values == 1.25).all()
