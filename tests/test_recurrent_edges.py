"""A recurrent policy's state at its edges: a policy that changes its state in place, a learned
initial state updated between collects, and a named-tuple state whose class lives in the script
being run (rollout workers return it to this process)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from functools import partial

import numpy as np
import pytest

from parallel_rollouts import ParallelRolloutCollector
from tests.envs import counting

pytestmark = pytest.mark.timeout(180)

NUM_ENVS, HORIZON = 4, 8

MODES = {
    "sync": dict(backend="sync"),
    "async per-step": dict(backend="async", num_workers=2),
    "rollout workers": dict(backend="async", num_workers=2, policy_placement="workers"),
}


class InPlaceCounter:
    """Counts the rows of each episode by adding to the array it is handed, in place, and
    returns that same array as the next state."""

    def initial_state(self, num_envs: int) -> dict:
        return {"count": np.zeros(num_envs, dtype=np.int64)}

    def __call__(self, observations, state, episode_starts):
        state["count"] += 1
        return np.zeros(len(observations), dtype=np.int64), state


class LearnedStart:
    """A state whose initial value (``start``) the learner changes between collects."""

    def __init__(self) -> None:
        self.start = 0

    def initial_state(self, num_envs: int) -> dict:
        return {"value": np.full(num_envs, self.start, dtype=np.int64)}

    def __call__(self, observations, state, episode_starts):
        return np.zeros(len(observations), dtype=np.int64), {"value": state["value"] + 1000}


def _factories(episode_length: int) -> list:
    return [partial(counting, env_id=index, episode_length=episode_length) for index in range(NUM_ENVS)]


@pytest.mark.parametrize("mode", list(MODES))
def test_a_policy_that_changes_its_state_in_place_does_not_change_later_episode_starts(mode):
    options = dict(MODES[mode])
    backend = options.pop("backend")
    with ParallelRolloutCollector(_factories(3), InPlaceCounter(), backend, horizon=HORIZON, seed=1,
                                  store_states=True, **options) as collector:
        batches = [collector.collect() for _ in range(2)]
    for batch in batches:
        starts = batch.episode_starts
        assert starts[1:].sum() >= NUM_ENVS, "too few episode starts after row 0 to test"
        # Every episode start hands the policy the initial count; every later row one more.
        assert (batch.states["count"][starts] == 0).all(), batch.states["count"]
        assert (batch.states["count"][~starts] > 0).all()


@pytest.mark.parametrize("mode", list(MODES))
def test_an_initial_state_changed_between_collects_is_used_for_episodes_starting_at_row_0(mode):
    options = dict(MODES[mode])
    backend = options.pop("backend")
    policy = LearnedStart()
    # Episodes of 4 steps and a horizon of 8: every env's episode ends at the last row, so
    # every env starts the next collect with a fresh episode.
    with ParallelRolloutCollector(_factories(4), policy, backend, horizon=HORIZON, seed=1,
                                  store_states=True, **options) as collector:
        first = collector.collect()
        policy.start = 7
        second = collector.collect()
    assert first.dones[-1].all() and second.episode_starts[0].all()
    np.testing.assert_array_equal(second.initial_state["value"], np.full(NUM_ENVS, 7))
    np.testing.assert_array_equal(second.states["value"][second.episode_starts], 7)
    # The replay a learner runs from initial_state, episode_starts and initial_state() gives
    # every state the policy was handed.
    value = second.initial_state["value"]
    for t in range(HORIZON):
        value = np.where(second.episode_starts[t], policy.initial_state(NUM_ENVS)["value"], value)
        np.testing.assert_array_equal(value, second.states["value"][t])
        value = value + 1000


_SCRIPT = """
import collections
from functools import partial

import numpy as np

from parallel_rollouts import ParallelRolloutCollector
from tests.envs import counting

State = collections.namedtuple("State", ["count", "total"])


class Policy:
    def initial_state(self, num_envs):
        return State(np.zeros(num_envs, dtype=np.int64), np.zeros(num_envs))

    def __call__(self, observations, state, episode_starts):
        return np.zeros(len(observations), dtype=np.int64), State(state.count + 1, state.total + 0.5)


if __name__ == "__main__":
    fns = [partial(counting, env_id=index, episode_length=3) for index in range(4)]
    batches = {}
    for placement in ("main", "workers"):
        with ParallelRolloutCollector(fns, Policy(), "async", horizon=8, seed=2, num_workers=2,
                                      policy_placement=placement, store_states=True) as collector:
            batches[placement] = [collector.collect() for _ in range(2)]
    for main, workers in zip(batches["main"], batches["workers"]):
        assert type(workers.initial_state) is State, type(workers.initial_state)
        assert type(workers.states) is State and type(workers.final_states) is State
        for field in State._fields:
            np.testing.assert_array_equal(getattr(main.states, field), getattr(workers.states, field))
            np.testing.assert_array_equal(getattr(main.final_states, field), getattr(workers.final_states, field))
    print("named-tuple state ok")
"""


def test_a_named_tuple_state_defined_in_the_script_being_run_works_in_rollout_workers(tmp_path):
    script = tmp_path / "named_tuple_state.py"
    script.write_text(textwrap.dedent(_SCRIPT))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=150, env=environment)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "named-tuple state ok" in result.stdout
