"""Rollout workers (``policy_placement="workers"``): the batch ``sync`` gives, one exchange per collect."""

from functools import partial

import numpy as np
import pytest
import torch

from parallel_rollouts import (
    ActionError,
    CollectorClosedError,
    ConfigurationError,
    ParallelRolloutCollector,
    PolicyTransferError,
    WorkerDiedError,
)
from tests.batch_compare import assert_batches_identical
from tests.envs import ConstantPolicy, CountingEnv, FaultyEnv, ObservationDependentPolicy, cartpole
from tests.policies import ArrayStatePolicy, RaisingPolicy, ValuedPolicy
from tests.test_backend_identity import space_env_fns
from tests.torch_policies import MLPPolicy, ModeReportingPolicy

pytestmark = pytest.mark.timeout(120)


def collect(backend, env_fns, policy=None, collects=3, **kwargs):
    with ParallelRolloutCollector(env_fns, policy, backend, **kwargs) as collector:
        return [collector.collect() for _ in range(collects)]


def workers(env_fns, policy=None, collects=3, **kwargs):
    return collect("async", env_fns, policy, collects, policy_placement="workers", **kwargs)


@pytest.mark.parametrize("num_workers", [1, 2, 3])
def test_rollout_workers_match_sync_for_any_number_of_workers(num_workers, core, no_leaks):
    policy = ObservationDependentPolicy(2)
    reference = collect("sync", [cartpole] * 5, policy, horizon=30, seed=17, core=core)
    candidate = workers([cartpole] * 5, policy, horizon=30, seed=17, core=core, num_workers=num_workers)
    for first, second in zip(reference, candidate):
        assert_batches_identical(first, second)


@pytest.mark.parametrize("reuse_buffers", [False, True])
def test_random_actions_values_and_log_probs_match_sync(reuse_buffers):
    fns = [partial(CountingEnv, env_id=i, episode_length=3) for i in range(4)]
    for policy in (None, ValuedPolicy(4)):
        reference = collect("sync", fns, policy, horizon=7, seed=2, info_keys=("step_in_episode",))
        candidate = workers(
            fns, policy, horizon=7, seed=2, num_workers=2, info_keys=("step_in_episode",), reuse_buffers=reuse_buffers
        )
        # With reuse_buffers the earlier batches were overwritten: compare the last one only.
        pairs = zip(reference, candidate) if not reuse_buffers else [(reference[-1], candidate[-1])]
        for first, second in pairs:
            assert_batches_identical(first, second)


@pytest.mark.parametrize("case", ["dict_nested", "box_image_uint8", "tuple_nested"])
def test_nested_and_image_spaces_match_sync(case):
    reference = collect("sync", space_env_fns(case, 4), horizon=8, seed=3)
    candidate = workers(space_env_fns(case, 4), horizon=8, seed=3, num_workers=2)
    for first, second in zip(reference, candidate):
        assert_batches_identical(first, second)


def test_array_updates_reach_the_workers_on_every_collect(no_leaks):
    fns = [partial(CountingEnv, env_id=i, episode_length=50) for i in range(4)]
    policy = ArrayStatePolicy(bias=1)
    with ParallelRolloutCollector(fns, policy, "async", horizon=3, seed=0, num_workers=2, policy_placement="workers") as collector:
        assert (collector.collect().actions == 1).all()
        policy.bias[0] = 3
        assert (collector.collect().actions == 3).all()
        policy.bias = np.array([2])  # a new array object, same shape
        assert (collector.collect().actions == 2).all()


def test_a_torch_module_ships_its_new_weights_on_every_collect():
    fns = [cartpole] * 4
    module = MLPPolicy()
    with ParallelRolloutCollector(fns, module, "async", horizon=16, seed=1, num_workers=2, policy_placement="workers") as collector:
        with ParallelRolloutCollector(fns, module, "sync", horizon=16, seed=1) as reference:
            for _ in range(2):
                got, expected = collector.collect(), reference.collect()
                np.testing.assert_array_equal(got.actions, expected.actions)
                np.testing.assert_array_equal(got.observations, expected.observations)
                with torch.no_grad():
                    for parameter in module.parameters():
                        parameter.mul_(-1.0)  # flips every logit: new actions from here on


def test_train_and_eval_modes_of_a_torch_module_reach_the_workers():
    fns = [partial(CountingEnv, env_id=i, episode_length=50) for i in range(4)]
    module = ModeReportingPolicy()
    with ParallelRolloutCollector(fns, module, "async", horizon=2, seed=0, num_workers=2, policy_placement="workers") as collector:
        assert (collector.collect().actions == 1).all()
        module.eval()
        assert (collector.collect().actions == 0).all()
        module.train()
        assert (collector.collect().actions == 1).all()


def test_torch_mlp_values_from_smaller_batches_agree_to_float32_rounding_only():
    """Pins the documented limit of bit-identity: row results of a PyTorch MLP depend on the batch size.

    Sync evaluates 16 rows per call, each worker 8 (and a pipelined half 8). The actions and
    observations agree; the float32 values agree to rounding, not necessarily to the bit.
    """
    module = MLPPolicy(hidden=256)
    fns = [cartpole] * 16
    (expected,) = collect("sync", fns, module, collects=1, horizon=32, seed=4)
    (got,) = workers(fns, module, collects=1, horizon=32, seed=4, num_workers=2)
    np.testing.assert_array_equal(got.actions, expected.actions)
    np.testing.assert_array_equal(got.observations, expected.observations)
    np.testing.assert_allclose(got.values, expected.values, rtol=1e-5, atol=1e-6)
    # Row by row the same module is bit-identical: the difference comes from batching alone.
    observations = torch.as_tensor(expected.observations[0])
    row_by_row = torch.cat([module(observations[i : i + 1]).values for i in range(16)])
    halves = torch.cat([module(observations[:8]).values, module(observations[8:]).values])
    np.testing.assert_allclose(row_by_row.numpy(), halves.numpy(), rtol=1e-5, atol=1e-6)


# -- faults -------------------------------------------------------------------------------------


def test_a_worker_dying_mid_rollout_is_named_and_breaks_the_collector(no_leaks):
    fns = [partial(CountingEnv, env_id=i, episode_length=5) for i in range(4)]
    fns[3] = partial(FaultyEnv, env_id=3, phase="step", at=3, how="exit")
    collector = ParallelRolloutCollector(fns, ConstantPolicy(4), "async", horizon=8, seed=0, num_workers=2, policy_placement="workers")
    with pytest.raises(WorkerDiedError, match=r"worker 1 \(pid \d+, envs 2..3\) exited with code 3"):
        collector.collect()
    with pytest.raises(CollectorClosedError, match="broken"):
        collector.collect()
    collector.close()


def test_a_policy_raising_inside_a_worker_reaches_the_caller_and_the_collector_stays_usable(no_leaks):
    fns = [partial(CountingEnv, env_id=i, episode_length=50) for i in range(4)]
    with ParallelRolloutCollector(fns, RaisingPolicy(fail_on=3), "async", horizon=4, seed=0, num_workers=2, policy_placement="workers") as collector:
        with pytest.raises(KeyError, match="the policy failed on purpose") as raised:
            collector.collect()
        assert any("rollout worker" in note for note in getattr(raised.value, "__notes__", []))
        batch = collector.collect()  # each env continues from where it stands
        steps = batch.observations[:, :, 1]
        assert (np.diff(steps, axis=0) == 1).all()


def test_a_policy_that_cannot_be_rebuilt_in_the_workers_raises_without_running_the_rollout(no_leaks):
    fns = [partial(CountingEnv, env_id=i, episode_length=50) for i in range(4)]
    policy = ArrayStatePolicy(bias=1)
    with ParallelRolloutCollector(fns, policy, "async", horizon=2, seed=0, num_workers=2, policy_placement="workers") as collector:
        first = collector.collect()
        policy.bias[0] = -1
        with pytest.raises(PolicyTransferError, match=r"could not be rebuilt here \(ValueError: refusing a negative bias -1\)"):
            collector.collect()
        policy.bias[0] = 2
        second = collector.collect()
        assert (second.actions == 2).all()
        # No env moved during the failed collect.
        np.testing.assert_array_equal(second.observations[0], first.bootstrap_observations)


def test_state_of_another_shape_reaches_the_workers(no_leaks):
    fns = [partial(CountingEnv, env_id=i, episode_length=50) for i in range(2)]
    policy = ArrayStatePolicy(bias=1)
    with ParallelRolloutCollector(fns, policy, "async", horizon=2, seed=0, num_workers=2, policy_placement="workers") as collector:
        policy.bias = np.array([3, 2])
        assert (collector.collect().actions == 3).all()


def test_mixed_optional_fields_across_workers_are_an_action_error():
    class HalfValued:
        def __call__(self, observations):
            from parallel_rollouts import PolicyOutput

            actions = np.zeros(observations.shape[0], dtype=np.int64)
            if observations[0, 0] == 0:  # env 0's worker only
                return PolicyOutput(actions, values=np.zeros(observations.shape[0]))
            return actions

    fns = [partial(CountingEnv, env_id=i, episode_length=50) for i in range(2)]
    with ParallelRolloutCollector(fns, HalfValued(), "async", horizon=2, seed=0, num_workers=2, policy_placement="workers") as collector:
        with pytest.raises(ActionError, match=r"returned `values` for envs 0..0 but not for envs 1..1"):
            collector.collect()


def test_unpicklable_policies_and_impossible_placements_are_configuration_errors(no_leaks):
    import threading

    lock = threading.Lock()
    fns = [partial(CountingEnv, env_id=i) for i in range(2)]
    with pytest.raises(ConfigurationError, match="cannot be serialised"):
        ParallelRolloutCollector(fns, lambda observations, lock=lock: observations, "async", policy_placement="workers")
    with pytest.raises(ConfigurationError, match=r"needs worker processes"):
        ParallelRolloutCollector(fns, None, "sync", policy_placement="workers")
    with pytest.raises(ConfigurationError, match=r"`policy_placement` must be one of"):
        ParallelRolloutCollector(fns, None, "async", policy_placement="gpu")
