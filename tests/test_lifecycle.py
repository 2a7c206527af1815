"""The collector's one state (``RunnerState``), owned by its runner, and the message of each state."""

from functools import partial

import pytest

from parallel_rollouts import CollectorClosedError, ParallelRolloutCollector, RunnerState, WorkerError
from tests.envs import ConstantPolicy, CountingEnv, FaultyEnv


@pytest.mark.parametrize("backend", ["serial", "sync"])
def test_states_move_ready_broken_closed_with_one_message_each(backend):
    fns = [partial(CountingEnv, env_id=0), partial(FaultyEnv, env_id=1, phase="step", at=5)]
    collector = ParallelRolloutCollector(fns, ConstantPolicy(2), backend, horizon=3, seed=0)
    assert collector.state is RunnerState.READY and collector.failure is None
    collector.collect()
    assert collector.state is RunnerState.READY
    with pytest.raises(WorkerError):
        collector.collect()
    assert collector.state is RunnerState.BROKEN
    assert isinstance(collector.failure, WorkerError)
    assert "broken" in repr(collector)
    with pytest.raises(CollectorClosedError, match=r"broken by an earlier failure \(WorkerError"):
        collector.collect()
    collector.close()
    assert collector.state is RunnerState.CLOSED and collector.failure is None and collector.closed
    with pytest.raises(CollectorClosedError, match="this collector is closed"):
        collector.collect()


def test_a_policy_that_calls_collect_is_refused_while_collecting_and_the_collector_stays_usable():
    seen = []

    def policy(observations):
        seen.append(collector.state)
        if len(seen) == 1:
            with pytest.raises(CollectorClosedError, match=r"`collect\(\)` is already under way"):
                collector.collect()
        return ConstantPolicy(observations.shape[0])(observations)

    collector = ParallelRolloutCollector([partial(CountingEnv, env_id=0)], policy, "sync", horizon=2, seed=0)
    collector.collect()
    assert seen[0] is RunnerState.COLLECTING
    assert collector.state is RunnerState.READY
    collector.collect()
    collector.close()


def test_a_policy_failure_leaves_the_collector_ready():
    calls = []

    def policy(observations):
        calls.append(1)
        if len(calls) == 2:
            raise ZeroDivisionError("policy bug")
        return ConstantPolicy(observations.shape[0])(observations)

    collector = ParallelRolloutCollector([partial(CountingEnv, env_id=0)], policy, "sync", horizon=3, seed=0)
    with pytest.raises(ZeroDivisionError):
        collector.collect()
    assert collector.state is RunnerState.READY and collector.failure is None
    collector.collect()
    collector.close()
