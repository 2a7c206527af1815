"""Seeding: documented, reproducible, layout-independent, and every episode replayable."""

import gymnasium as gym
import numpy as np
import pytest

from parallel_rollouts import ParallelRolloutCollector
from parallel_rollouts.config.seeding import EPISODE_SEED_BLOCK, EpisodeSeeds, action_sampler_seed, episode_seed
from tests.batch_compare import assert_batches_identical
from tests.envs import cartpole


def test_episode_seeds_follow_the_documented_seed_sequence_scheme():
    root = 2024
    block = np.random.SeedSequence(root, spawn_key=(3, 0, 0)).generate_state(EPISODE_SEED_BLOCK, np.uint32)
    assert [episode_seed(root, 3, k) for k in range(5)] == block[:5].tolist()
    second_block = np.random.SeedSequence(root, spawn_key=(3, 0, 1)).generate_state(EPISODE_SEED_BLOCK, np.uint32)
    assert episode_seed(root, 3, EPISODE_SEED_BLOCK + 7) == int(second_block[7])
    stream = EpisodeSeeds(root, 3)
    assert [stream.seed_of(k) for k in range(0, 600, 37)] == [episode_seed(root, 3, k) for k in range(0, 600, 37)]
    expected_action = int(np.random.SeedSequence(root, spawn_key=(3, 1)).generate_state(1, np.uint32)[0])
    assert action_sampler_seed(root, 3) == expected_action


def test_neighbouring_root_seeds_do_not_share_env_streams():
    # With `seed + i`, root 0's env 1 would equal root 1's env 0.
    assert episode_seed(0, 1, 0) != episode_seed(1, 0, 0)
    seeds = {episode_seed(root, env, k) for root in range(4) for env in range(4) for k in range(4)}
    assert len(seeds) == 64


@pytest.mark.parametrize("backend", ["serial", "sync"])
def test_same_seed_same_batches_different_seed_different_batches(backend):
    def run(seed):
        with ParallelRolloutCollector([cartpole] * 3, None, backend, horizon=30, seed=seed) as collector:
            return [collector.collect() for _ in range(2)]

    first, again, other = run(5), run(5), run(6)
    for a, b in zip(first, again):
        assert_batches_identical(a, b)
    assert not np.array_equal(first[0].observations, other[0].observations)


def test_seed_none_draws_a_seed_that_reproduces_the_run():
    with ParallelRolloutCollector([cartpole] * 2, None, "sync", horizon=20) as collector:
        drawn = collector.seed
        batch = collector.collect()
    assert isinstance(drawn, int) and drawn >= 0
    assert batch.seed == drawn
    with ParallelRolloutCollector([cartpole] * 2, None, "sync", horizon=20, seed=drawn) as collector:
        assert_batches_identical(batch, collector.collect())


def test_any_completed_episode_replays_alone_from_its_seed_and_actions():
    # Random actions (policy=None) end CartPole episodes within a few dozen steps.
    with ParallelRolloutCollector([cartpole] * 3, None, "sync", horizon=80, seed=31) as collector:
        batch = collector.collect()
    replayed = 0
    for return_, length, env, end, seed in zip(
        batch.episode_returns, batch.episode_lengths, batch.episode_env_indices, batch.episode_end_steps, batch.episode_seeds
    ):
        start = end - length + 1
        if start < 0:
            continue  # began before this batch
        assert (batch.step_episode_seeds[start : end + 1, env] == seed).all()
        env_copy = gym.make("CartPole-v1")
        observation, _ = env_copy.reset(seed=int(seed))
        np.testing.assert_array_equal(observation, batch.observations[start, env])
        total = 0.0
        for t in range(start, end + 1):
            observation, reward, terminated, truncated, _ = env_copy.step(batch.actions[t, env])
            total += reward
        np.testing.assert_array_equal(observation, batch.final_observations[end, env])
        assert terminated == batch.terminations[end, env] and truncated == batch.truncations[end, env]
        assert total == return_
        replayed += 1
    assert replayed >= 3
