"""Observations of another dtype: converted by one rule, said in one wording by ``check`` and the docs,
and warned about once per env and leaf at collect time when the conversion may round them."""

from __future__ import annotations

import re
import warnings
from functools import partial
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from parallel_rollouts import ObservationRoundingWarning, ParallelRolloutCollector
from parallel_rollouts.checks.conversion import CONVERSION_RULE, may_round
from parallel_rollouts.conformance.spaces_check import check_spaces
from parallel_rollouts.core import _core as compiled
from parallel_rollouts.core import rows as python_core
from parallel_rollouts.data.spaces import SpaceLayout
from tests import conformance_envs as envs

DOCS = Path(__file__).resolve().parent.parent / "docs"


class Float64Walk(gym.Env):
    """Declares float32 and returns float64 draws, which float32 cannot all hold."""

    observation_space = spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.np_random.uniform(-1.0, 1.0, size=3), {}

    def step(self, action):
        return self.np_random.uniform(-1.0, 1.0, size=3), 0.0, False, False, {}


class Float64Position(gym.Env):
    """A Dict space whose float32 ``position`` comes back as float64."""

    observation_space = spaces.Dict({"position": spaces.Box(-1.0, 1.0, (2,), np.float32), "cell": spaces.Discrete(4)})
    action_space = spaces.Discrete(2)

    def _observation(self):
        return {"position": self.np_random.uniform(-1.0, 1.0, size=2), "cell": 1}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._observation(), {}

    def step(self, action):
        return self._observation(), 0.0, False, False, {}


class Float64Vector(gym.vector.VectorWrapper):
    """A vector env whose batched observations come back as float64."""

    def reset(self, **kwargs):
        observations, info = self.env.reset(**kwargs)
        return observations.astype(np.float64), info

    def step(self, actions):
        observations, *rest = self.env.step(actions)
        return observations.astype(np.float64), *rest


def _rounding_warnings(collector_args: tuple, collects: int = 2, **kwargs) -> tuple[list[str], list]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ParallelRolloutCollector(*collector_args, **kwargs) as collector:
            batches = [collector.collect() for _ in range(collects)]
    return [str(w.message) for w in caught if issubclass(w.category, ObservationRoundingWarning)], batches


@pytest.mark.parametrize(
    ("source", "target", "rounds"),
    [
        (np.float64, np.float32, True), (np.float32, np.float16, True), (np.int32, np.float32, True),
        (np.int64, np.float64, True), (np.float16, np.float32, False), (np.float32, np.float64, False),
        (np.int16, np.float32, False), (np.uint8, np.float16, False), (np.int32, np.float64, False),
        (np.int64, np.int32, False), (np.bool_, np.float32, False), (np.float32, np.float32, False),
    ],
)
def test_only_a_float_leaf_that_cannot_hold_every_value_may_round(source, target, rounds):
    assert may_round(np.dtype(source), np.dtype(target)) is rounds


def test_float64_observations_are_stored_rounded_and_warned_about_once_per_env(core):
    messages, batches = _rounding_warnings(([Float64Walk] * 2, None, "sync", 4, 0), core=core)
    assert len(messages) == 2, messages
    for env_index, message in enumerate(messages):
        assert message.startswith(
            f"env {env_index} returned observations of dtype float64, but the observation space declares float32: "
            "they are stored as float32, rounded to its precision, so values may change."
        )
        assert "Return float32 observations (e.g. `observation.astype(np.float32)`)" in message
    assert batches[0].observations.dtype == np.float32
    env = Float64Walk()
    first, _ = env.reset(seed=int(batches[0].step_episode_seeds[0, 0]))
    np.testing.assert_array_equal(batches[0].observations[0, 0], first.astype(np.float32))


def test_a_step_that_returns_float64_after_float32_resets_is_warned_about_too():
    # OutOfSpaceEnv("dtype") returns float32 but for its 5th step: the step path decides too.
    messages, _ = _rounding_warnings(([partial(envs.OutOfSpaceEnv, "dtype")], None, "sync", 8, 0))
    assert len(messages) == 1 and messages[0].startswith("env 0 returned observations of dtype float64")


def test_the_warning_names_the_leaf_of_a_nested_space():
    messages, _ = _rounding_warnings(([Float64Position], None, "sync", 3, 0), collects=1)
    assert messages == [messages[0]] and messages[0].startswith(
        "env 0 returned observations at ['position'] of dtype float64, but the observation space declares float32"
    )


def test_a_vector_env_is_warned_about_once_for_all_its_sub_envs():
    source = partial(lambda: Float64Vector(gym.vector.SyncVectorEnv([Float64Walk] * 3)))
    messages, _ = _rounding_warnings(([source], None, "sync", 4, 0))
    assert len(messages) == 1, messages
    assert messages[0].startswith("the vector env of envs 0..2 returned observations of dtype float64")


def test_a_warning_in_a_worker_process_reaches_this_process_once_per_env(no_leaks):
    messages, _ = _rounding_warnings(
        ([partial(envs.OutOfSpaceEnv, "dtype")] * 2, None, "async", 8, 0), num_workers=1, main_process_envs=0,
    )
    assert sorted(message[:6] for message in messages) == ["env 0 ", "env 1 "], messages


def test_a_conversion_that_changes_nothing_is_not_warned_about():
    class Float32ForFloat64(Float64Walk):
        observation_space = spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float64)

        def step(self, action):
            observation, *rest = super().step(action)
            return observation.astype(np.float32), *rest

    messages, _ = _rounding_warnings(([Float32ForFloat64], None, "sync", 4, 0), collects=1)
    assert messages == []


@pytest.mark.parametrize("core", [compiled, python_core], ids=["compiled", "python"])
def test_the_writer_tells_a_conversion_once_per_column_not_once_per_step(core):
    told = []
    writer = core.ObservationWriter(
        np.zeros((5, 2, 3), np.float32), np.zeros((4, 2, 3), np.float32), lambda column, dtype: told.append((column, dtype))
    )
    for row in range(5):
        assert writer.write_row(row, 0, np.ones(3, np.float32))
        assert writer.write_row(row, 1, np.full(3, 0.1))
    assert told == [(1, np.dtype(np.float64))]


def test_check_says_what_the_collector_does_with_another_dtype():
    result, _ = check_spaces(partial(envs.OutOfSpaceEnv, "dtype"), False, SpaceLayout(envs.BOX, "observation"), 0, 30, 2)
    assert result.status.value == "warn"
    assert "observation has dtype float64, the space declares float32: stored as float32, rounded to its precision: " \
           "values may change" in result.reason
    assert CONVERSION_RULE in result.reason


class FloatsForIntegers(envs.WalkEnv):
    observation_space = spaces.Box(-10, 10, shape=(3,), dtype=np.int64)


def test_check_fails_floats_for_an_integer_space_as_the_collector_refuses_them():
    layout = SpaceLayout(FloatsForIntegers.observation_space, "observation")
    result, _ = check_spaces(FloatsForIntegers, False, layout, 0, 30, 2)
    assert result.status.value == "fail"
    assert "the first reset: observation cannot be stored: got floats (dtype float32) for an integer leaf of dtype " \
           "int64: storing them would truncate them" in result.reason


def test_the_docs_quote_the_rule_check_reports():
    lines = (DOCS / "conformance.md").read_text(encoding="utf-8").splitlines()
    page = " ".join(" ".join(re.sub(r"^> ?", "", line) for line in lines).split())
    assert CONVERSION_RULE in page
    assert re.search(r"ObservationRoundingWarning", (DOCS / "batch-contract.md").read_text(encoding="utf-8"))
