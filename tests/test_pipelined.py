"""Pipelined stepping (``pipelined=True``): the full ``[T, N]`` batch ``sync`` gives."""

from functools import partial

import numpy as np
import pytest

from parallel_rollouts import CollectorClosedError, ConfigurationError, ParallelRolloutCollector, WorkerError
from tests.batch_compare import assert_batches_identical
from tests.envs import ConstantPolicy, CountingEnv, FaultyEnv, ObservationDependentPolicy, cartpole
from tests.policies import RaisingPolicy, ValuedPolicy
from tests.test_backend_identity import space_env_fns

pytestmark = pytest.mark.timeout(120)


def collect(backend, env_fns, policy=None, collects=3, **kwargs):
    with ParallelRolloutCollector(env_fns, policy, backend, **kwargs) as collector:
        return [collector.collect() for _ in range(collects)]


@pytest.mark.parametrize("num_workers", [2, 3, 4])
def test_pipelined_matches_sync_for_any_number_of_workers(num_workers, core, no_leaks):
    policy = ObservationDependentPolicy(2)
    reference = collect("sync", [cartpole] * 5, policy, horizon=30, seed=17, core=core)
    candidate = collect("async", [cartpole] * 5, policy, horizon=30, seed=17, core=core, num_workers=num_workers, pipelined=True)
    for first, second in zip(reference, candidate):
        assert_batches_identical(first, second)


@pytest.mark.parametrize("reuse_buffers", [False, True])
def test_random_actions_values_and_log_probs_match_sync(reuse_buffers):
    fns = [partial(CountingEnv, env_id=i, episode_length=3) for i in range(4)]
    for policy in (None, ValuedPolicy(4)):
        reference = collect("sync", fns, policy, horizon=7, seed=2, info_keys=("step_in_episode",))
        candidate = collect(
            "async", fns, policy, horizon=7, seed=2, num_workers=2, pipelined=True,
            info_keys=("step_in_episode",), reuse_buffers=reuse_buffers,
        )
        pairs = zip(reference, candidate) if not reuse_buffers else [(reference[-1], candidate[-1])]
        for first, second in pairs:
            assert_batches_identical(first, second)


@pytest.mark.parametrize("case", ["dict_nested", "tuple_nested"])
def test_nested_spaces_match_sync(case):
    reference = collect("sync", space_env_fns(case, 4), horizon=8, seed=3)
    candidate = collect("async", space_env_fns(case, 4), horizon=8, seed=3, num_workers=2, pipelined=True)
    for first, second in zip(reference, candidate):
        assert_batches_identical(first, second)


@pytest.mark.parametrize("fail_on", [1, 4, 5])
def test_a_policy_exception_drops_the_rollout_and_every_env_continues_where_it_stands(fail_on, no_leaks):
    # Calls alternate between the halves: call 4 is the second half at t=1 (the first half
    # is then one step ahead), call 5 the first half at t=2.
    fns = [partial(CountingEnv, env_id=i, episode_length=50) for i in range(4)]
    with ParallelRolloutCollector(fns, RaisingPolicy(fail_on), "async", horizon=4, seed=0, num_workers=2, pipelined=True) as collector:
        with pytest.raises(KeyError, match="the policy failed on purpose"):
            collector.collect()
        batch = collector.collect()
    steps = batch.observations[:, :, 1]
    assert (np.diff(steps, axis=0) == 1).all()
    first_half_steps, second_half_steps = steps[0, :2], steps[0, 2:]
    expected_first = {1: 0, 4: 2, 5: 2}[fail_on]
    expected_second = {1: 0, 4: 1, 5: 2}[fail_on]
    assert (first_half_steps == expected_first).all() and (second_half_steps == expected_second).all()


def test_an_env_failure_breaks_the_collector_without_hanging(no_leaks):
    fns = [partial(CountingEnv, env_id=i, episode_length=5) for i in range(4)]
    fns[1] = partial(FaultyEnv, env_id=1, phase="step", at=2)
    collector = ParallelRolloutCollector(fns, ConstantPolicy(4), "async", horizon=6, seed=0, num_workers=2, pipelined=True)
    with pytest.raises(WorkerError, match=r"env 1 raised ValueError in `step`"):
        collector.collect()
    with pytest.raises(CollectorClosedError, match="broken"):
        collector.collect()
    collector.close()


def test_pipelining_needs_two_workers_and_the_policy_in_the_main_process(no_leaks):
    fns = [partial(CountingEnv, env_id=i) for i in range(2)]
    with pytest.raises(ConfigurationError, match=r"needs num_workers >= 2; got 1"):
        ParallelRolloutCollector(fns, None, "async", num_workers=1, pipelined=True)
    with pytest.raises(ConfigurationError, match=r"applies to backend='async' with policy_placement='main' only"):
        ParallelRolloutCollector(fns, None, "sync", pipelined=True)
    with pytest.raises(ConfigurationError, match=r"applies to backend='async' with policy_placement='main' only"):
        ParallelRolloutCollector(fns, None, "async", pipelined=True, policy_placement="workers")
