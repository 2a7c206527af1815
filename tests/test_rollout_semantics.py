"""The batch contract on envs whose every number is known in advance."""

from functools import partial

import numpy as np
import pytest

from parallel_rollouts import ParallelRolloutCollector
from parallel_rollouts.config.seeding import episode_seed
from tests.envs import ConstantPolicy, CountingEnv

BACKENDS = ["serial", "sync"]


def counting_fns(num_envs, episode_length=3, terminate=True):
    return [partial(CountingEnv, env_id=i, episode_length=episode_length, terminate=terminate) for i in range(num_envs)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("terminate", [True, False], ids=["terminated", "truncated"])
def test_episode_end_fills_final_observation_and_resets_at_once(backend, terminate, core):
    with ParallelRolloutCollector(
        counting_fns(2, 3, terminate), ConstantPolicy(2, 1), backend, horizon=5, seed=11, core=core
    ) as collector:
        batch = collector.collect()

    # step_in_episode column: 0,1,2 then the reset observation 0, then 1; no no-op row.
    np.testing.assert_array_equal(batch.observations[:, :, 1], [[0, 0], [1, 1], [2, 2], [0, 0], [1, 1]])
    np.testing.assert_array_equal(batch.bootstrap_observations[:, 1], [2, 2])
    np.testing.assert_array_equal(batch.rewards, [[2, 2], [3, 3], [4, 4], [2, 2], [3, 3]])
    ended_at_2 = np.zeros((5, 2), dtype=bool)
    ended_at_2[2] = True
    np.testing.assert_array_equal(batch.terminations, ended_at_2 if terminate else ~ended_at_2 & False)
    np.testing.assert_array_equal(batch.truncations, ended_at_2 if not terminate else ~ended_at_2 & False)
    np.testing.assert_array_equal(batch.dones, ended_at_2)
    np.testing.assert_array_equal(batch.final_observation_mask, ended_at_2)
    # The terminal observation: env id, step 3, the episode-0 seed tag, last action 1.
    for env in range(2):
        tag = episode_seed(11, env, 0) % 1000
        np.testing.assert_array_equal(batch.final_observations[2, env], [env, 3, tag, 1])
    assert not batch.final_observations[~ended_at_2].any(), "final_observations must be zero where the mask is false"
    # The row after the end is the next episode's first observation, reset with episode 1's seed.
    for env in range(2):
        np.testing.assert_array_equal(batch.observations[3, env], [env, 0, episode_seed(11, env, 1) % 1000, -1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_episode_statistics_count_across_collects(backend, core):
    lengths = [2, 3]
    fns = [partial(CountingEnv, env_id=i, episode_length=lengths[i]) for i in range(2)]
    with ParallelRolloutCollector(fns, ConstantPolicy(2, 0), backend, horizon=4, seed=5, core=core) as collector:
        first = collector.collect()
        second = collector.collect()

    # Env 0 ends at t=1 and t=3; env 1 ends at t=2. Ordered by end step, then env.
    np.testing.assert_array_equal(first.episode_end_steps, [1, 2, 3])
    np.testing.assert_array_equal(first.episode_env_indices, [0, 1, 0])
    np.testing.assert_array_equal(first.episode_lengths, [2, 3, 2])
    np.testing.assert_array_equal(first.episode_returns, [1 + 2, 1 + 2 + 3, 1 + 2])
    np.testing.assert_array_equal(
        first.episode_seeds, [episode_seed(5, 0, 0), episode_seed(5, 1, 0), episode_seed(5, 0, 1)]
    )
    # Env 1's second episode started at t=3 of the first collect and ends at t=1 of the second:
    # its length and return span both collects.
    np.testing.assert_array_equal(second.episode_env_indices, [0, 1, 0])
    np.testing.assert_array_equal(second.episode_end_steps, [1, 1, 3])
    np.testing.assert_array_equal(second.episode_lengths, [2, 3, 2])
    np.testing.assert_array_equal(second.episode_returns, [3, 6, 3])
    # The second collect starts exactly where the first one's bootstrap row left off.
    np.testing.assert_array_equal(second.observations[0], first.bootstrap_observations)


@pytest.mark.parametrize("backend", BACKENDS)
def test_step_episode_seeds_name_the_episode_of_every_row(backend, core):
    with ParallelRolloutCollector(counting_fns(3, 2), ConstantPolicy(3, 2), backend, horizon=5, seed=99, core=core) as collector:
        batch = collector.collect()
    for env in range(3):
        expected = [episode_seed(99, env, k) for k in (0, 0, 1, 1, 2)]
        np.testing.assert_array_equal(batch.step_episode_seeds[:, env], expected)
        np.testing.assert_array_equal(batch.observations[:, env, 2], [s % 1000 for s in expected])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_returned_batch_is_never_overwritten_by_the_next_collect(backend, core):
    with ParallelRolloutCollector(counting_fns(2, 4), ConstantPolicy(2, 1), backend, horizon=3, seed=1, core=core) as collector:
        first = collector.collect()
        snapshot = first.observations.copy(), first.rewards.copy(), first.final_observations.copy()
        second = collector.collect()
    assert not np.shares_memory(first.observations, second.observations)
    np.testing.assert_array_equal(first.observations, snapshot[0])
    np.testing.assert_array_equal(first.rewards, snapshot[1])
    np.testing.assert_array_equal(first.final_observations, snapshot[2])


@pytest.mark.parametrize("backend", BACKENDS)
def test_reuse_buffers_writes_into_the_same_arrays_and_clears_old_final_observations(backend, core):
    with ParallelRolloutCollector(
        counting_fns(1, 3), ConstantPolicy(1, 1), backend, horizon=4, seed=1, core=core, reuse_buffers=True
    ) as collector:
        first = collector.collect()
        assert first.final_observation_mask[2, 0]
        second = collector.collect()
    assert np.shares_memory(first.observations, second.observations)
    # The second rollout's episode ends at t=1 (steps 3 of the episode started at t=3);
    # row 2's terminal observation from the first rollout must be gone.
    np.testing.assert_array_equal(second.final_observation_mask[:, 0], [False, True, False, False])
    assert not second.final_observations[2].any()


@pytest.mark.parametrize("backend", BACKENDS)
def test_editing_a_returned_batch_does_not_change_where_the_next_starts(backend, core):
    with ParallelRolloutCollector(counting_fns(2, 10), ConstantPolicy(2, 1), backend, horizon=3, seed=1, core=core) as collector:
        first = collector.collect()
        expected_start = first.bootstrap_observations.copy()
        first.observations[...] = -7
        first.bootstrap_observations[...] = -7
        second = collector.collect()
    np.testing.assert_array_equal(second.observations[0], expected_start)


@pytest.mark.parametrize("backend", BACKENDS)
def test_policy_sees_read_only_observations_of_the_current_step(backend, core):
    seen = []

    def policy(observations):
        seen.append(observations.copy())
        with pytest.raises(ValueError, match="read-only"):
            observations[0, 0] = 5
        return np.zeros(observations.shape[0], dtype=np.int64)

    with ParallelRolloutCollector(counting_fns(2, 2), policy, backend, horizon=3, seed=1, core=core) as collector:
        batch = collector.collect()
    np.testing.assert_array_equal(np.stack(seen), batch.observations)


@pytest.mark.parametrize("backend", BACKENDS)
def test_requested_info_keys_become_time_by_env_arrays(backend, core):
    with ParallelRolloutCollector(
        counting_fns(2, 2), ConstantPolicy(2, 3), backend, horizon=3, seed=1, core=core,
        info_keys=("step_in_episode", "double_action"),
    ) as collector:
        batch = collector.collect()
    assert set(batch.infos) == {"step_in_episode", "double_action"}
    np.testing.assert_array_equal(batch.infos["step_in_episode"], [[1, 1], [2, 2], [1, 1]])
    np.testing.assert_array_equal(batch.infos["double_action"], np.full((3, 2), 6.0))
    assert batch.infos["double_action"].dtype == np.float64


def test_batch_shapes_and_dtypes(core):
    with ParallelRolloutCollector(counting_fns(3), ConstantPolicy(3, 1), "sync", horizon=7, seed=0, core=core) as collector:
        batch = collector.collect()
    assert (batch.horizon, batch.num_envs, batch.num_transitions) == (7, 3, 21)
    assert batch.observations.shape == (7, 3, 4) and batch.observations.dtype == np.float32
    assert batch.bootstrap_observations.shape == (3, 4)
    assert batch.actions.shape == (7, 3) and batch.actions.dtype == np.int64
    assert batch.rewards.dtype == np.float64
    for flags in (batch.terminations, batch.truncations, batch.final_observation_mask, batch.dones):
        assert flags.shape == (7, 3) and flags.dtype == bool
    assert batch.final_observations.shape == (7, 3, 4)
    assert batch.step_episode_seeds.dtype == np.int64
    assert batch.values is None and batch.log_probs is None
    assert batch.seed == 0
