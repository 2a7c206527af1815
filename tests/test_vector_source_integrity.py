"""Vector-env sources under the rules single envs follow: one conversion rule, checked values, verified autoreset modes."""

from __future__ import annotations

from functools import partial

import gymnasium as gym
import numpy as np
import pytest

from parallel_rollouts import ParallelRolloutCollector
from parallel_rollouts.errors import ObservationError, WorkerError
from tests.envs import counting
from tests.vector_envs import ScriptedVectorEnv, cartpole_declaring, scripted_vector

BACKENDS = ["sync", "async"]


def _collect(env_fn, backend, core, info_keys=(), horizon=12):
    with ParallelRolloutCollector(
        [env_fn], None, backend=backend, horizon=horizon, seed=3, core=core, info_keys=info_keys
    ) as collector:
        return collector.collect()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "where, bad, culprit, reason",
    [
        ("step", 300, "env 1", r"integer 300 \(dtype int64\), which does not fit"),
        ("step", 0.5, "env 0", r"floats \(dtype float64\) for an integer leaf of dtype uint8"),
        ("reset", -1, "env 1", r"integer -1 \(dtype int64\)"),
        ("mask_reset", 256, "env 1", r"integer 256"),
    ],
)
def test_observations_a_uint8_space_cannot_hold_are_refused_not_wrapped(backend, where, bad, culprit, reason, core):
    behaves = "disabled" if where == "mask_reset" else "next_step"
    env_fn = partial(scripted_vector, behaves, behaves, where, bad)
    with pytest.raises(ObservationError, match=f"{culprit} returned .*cannot store: got {reason}"):
        _collect(env_fn, backend, core)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_terminal_observation_in_final_obs_a_uint8_space_cannot_hold_is_refused(backend, core):
    env_fn = partial(scripted_vector, "same_step", "same_step", "final_obs", 300)
    with pytest.raises(ObservationError, match=r"env 1 returned a terminal observation \(info\['final_obs'\]\) at step t=2 .*integer 300"):
        _collect(env_fn, backend, core)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "where, bad, match",
    [
        ("rewards", "1.5", r"env 1 raised TypeError in `step`: .*rewards\[1\] = '1.5'.*must be a real number"),
        ("terminations", 0.25, r"env 1 raised TypeError in `step`: .*terminations\[1\] = 0.25.*must be a bool"),
        ("terminations", 2, r"env 1 raised TypeError in `step`: .*terminations\[1\] = 2 .*must be a bool"),
    ],
)
def test_rewards_and_flags_follow_the_rule_of_single_envs(backend, where, bad, match, core):
    with pytest.raises(WorkerError, match=match):
        _collect(partial(scripted_vector, "next_step", "next_step", where, bad), backend, core)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "bad, match",
    [
        ("1.5", r"env 1 raised TypeError in `info`: info\['score'\] is str '1.5', not a number"),
        (10**400, r"env 1 raised ValueError in `info`: info\['score'\] is int .*does not fit a float64"),
        ([1.0], r"env 1 raised TypeError in `info`: info\['score'\] is list \[1.0\], not a number"),
    ],
)
def test_info_values_must_be_numbers_from_a_vector_env(backend, bad, match, core):
    env_fn = partial(scripted_vector, "next_step", "next_step", "info", bad)
    with pytest.raises(WorkerError, match=match):
        _collect(env_fn, backend, core, info_keys=("score",))


class InfoValue(gym.Wrapper):
    """An env whose ``info["score"]`` is ``value`` from its second step on."""

    def __init__(self, env, value):
        super().__init__(env)
        self._value, self._steps = value, 0

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        self._steps += 1
        return observation, reward, terminated, truncated, dict(info, score=self._value if self._steps > 1 else 0.5)


def info_value_env(value):
    return InfoValue(counting(0, 50), value)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "bad, match",
    [
        ("1.5", r"env 1 raised TypeError in `info`: info\['score'\] is str '1.5', not a number"),
        (10**400, r"env 1 raised ValueError in `info`: info\['score'\] is int .*does not fit a float64"),
        (np.array([1.0]), r"env 1 raised TypeError in `info`: info\['score'\] is an array of shape \(1,\)"),
    ],
)
def test_info_values_must_be_numbers_from_single_envs_with_the_same_error(backend, bad, match, core):
    env_fns = [partial(info_value_env, 1.0), partial(info_value_env, bad)]
    with ParallelRolloutCollector(env_fns, None, backend=backend, horizon=8, seed=0, core=core, info_keys=("score",)) as c:
        with pytest.raises(WorkerError, match=match):
            c.collect()


@pytest.mark.parametrize("backend", BACKENDS)
def test_numbers_of_every_kind_are_stored_as_info_values(backend, core):
    values = [True, 3, np.int32(-4), np.float32(0.25), np.array(2.5), np.uint64(7)]
    env_fns = [partial(info_value_env, value) for value in values]
    with ParallelRolloutCollector(env_fns, None, backend=backend, horizon=4, seed=0, core=core, info_keys=("score",)) as c:
        batch = c.collect()
    np.testing.assert_array_equal(batch.infos["score"][1:], np.tile([1.0, 3.0, -4.0, 0.25, 2.5, 7.0], (3, 1)))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("declares", [None, "next_step", "disabled"])
def test_a_vector_env_resetting_within_the_step_but_declaring_otherwise_is_named(backend, declares, core):
    expected = "declares no metadata" if declares is None else f"declares autoreset_mode {declares.upper()}"
    with pytest.raises(ObservationError, match=f"{expected}.*behaves as SAME_STEP: at step t=2 its info holds 'final_obs'"):
        _collect(partial(scripted_vector, "same_step", declares), backend, core)


@pytest.mark.parametrize("declares", [None, "next_step"])
def test_gymnasium_same_step_vector_env_declared_otherwise_is_named_at_its_first_episode_end(declares, core):
    with ParallelRolloutCollector(
        [partial(cartpole_declaring, "same_step", declares)], None, backend="sync", horizon=100, seed=0, core=core
    ) as collector:
        with pytest.raises(ObservationError, match="behaves as SAME_STEP.*set metadata\\['autoreset_mode'\\]"):
            collector.collect()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_disabled_vector_env_declared_next_step_is_named_at_the_step_after_an_end(backend, core):
    with pytest.raises(ObservationError, match=r"declares autoreset_mode NEXT_STEP, but it behaves as DISABLED: at step t=3 "):
        _collect(partial(scripted_vector, "disabled", "next_step"), backend, core)


@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
def test_a_correctly_declared_scripted_vector_env_gives_its_episodes(mode, core):
    batch = _collect(partial(scripted_vector, mode, mode), "sync", core, info_keys=("score",), horizon=12)
    # Every episode lasts three counted steps; NEXT_STEP spends one more row on each reset.
    assert set(batch.episode_lengths.tolist()) == {3}
    ends = np.flatnonzero(batch.terminations[:, 0])
    np.testing.assert_array_equal(batch.final_observations[ends, 0, 0], np.full(ends.size, 3, dtype=np.uint8))
    assert not batch.truncations.any()
    assert isinstance(ScriptedVectorEnv(mode, mode).metadata["autoreset_mode"], gym.vector.AutoresetMode)
