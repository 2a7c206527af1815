"""``episode_seeds="first"``: only each env's first episode is seeded; the rest continue its generator."""

from functools import partial

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from parallel_rollouts import ConfigurationError, ParallelRolloutCollector
from parallel_rollouts.config.seeding import episode_seed
from tests.batch_compare import assert_batches_identical
from tests.envs import CountingEnv, cartpole

ROOT_SEED = 11


def _lean(observations):
    return (observations[:, 2] > 0).astype(np.int64)


def test_later_episodes_continue_the_env_s_generator_and_are_recorded_unseeded(core):
    """A reference replay: a fresh CartPole reset with the recorded first seed, then reset()
    without a seed at each end, stepped with the batch's actions, gives every observation."""
    with ParallelRolloutCollector(
        [cartpole] * 3, _lean, "sync", horizon=200, seed=ROOT_SEED, core=core, episode_seeds="first"
    ) as collector:
        batch = collector.collect()
    assert batch.final_observation_mask.any(axis=0).all(), "every env must end an episode in the test"
    for env_index in range(3):
        first_seed = episode_seed(ROOT_SEED, env_index, 0)
        env = gym.make("CartPole-v1")
        observation, _ = env.reset(seed=first_seed)
        seeds = []
        for t in range(batch.horizon):
            np.testing.assert_array_equal(batch.observations[t, env_index], observation)
            seeds.append(batch.step_episode_seeds[t, env_index])
            observation, reward, terminated, truncated, _ = env.step(int(batch.actions[t, env_index]))
            assert reward == batch.rewards[t, env_index]
            if terminated or truncated:
                np.testing.assert_array_equal(batch.final_observations[t, env_index], observation)
                observation, _ = env.reset()
        first_end = int(np.flatnonzero(batch.final_observation_mask[:, env_index])[0])
        assert seeds[: first_end + 1] == [first_seed] * (first_end + 1)
        assert set(seeds[first_end + 1 :]) == {-1}
        ended = batch.episode_env_indices == env_index
        assert batch.episode_seeds[ended].tolist() == [first_seed] + [-1] * (int(ended.sum()) - 1)


def test_only_the_first_reset_of_each_env_gets_a_seed():
    envs = [CountingEnv(env_id=index, episode_length=2) for index in range(2)]
    with ParallelRolloutCollector(
        [lambda env=env: env for env in envs], None, "serial", horizon=7, seed=ROOT_SEED, episode_seeds="first"
    ) as collector:
        collector.collect()
    for index, env in enumerate(envs):
        assert env.reset_seeds == [episode_seed(ROOT_SEED, index, 0), None, None, None]


def test_the_first_episode_is_the_same_as_with_a_seed_for_every_episode():
    batches = {}
    for mode in ("every", "first"):
        with ParallelRolloutCollector(
            [cartpole] * 2, _lean, "sync", horizon=60, seed=ROOT_SEED, episode_seeds=mode
        ) as collector:
            batches[mode] = collector.collect()
    every, first = batches["every"], batches["first"]
    for env_index in range(2):
        end = int(np.flatnonzero(every.final_observation_mask[:, env_index])[0])
        np.testing.assert_array_equal(every.observations[: end + 1, env_index], first.observations[: end + 1, env_index])
        # After it the episodes differ: a new seed against the generator continued.
        assert not np.array_equal(every.observations[end + 1, env_index], first.observations[end + 1, env_index])


@pytest.mark.parametrize("backend, options", [
    ("serial", {}),
    ("async", {"num_workers": 2}),
    ("async", {"num_workers": 2, "policy_placement": "workers"}),
])
def test_every_backend_gives_the_same_batch_and_a_run_repeats_it(backend, options):
    def collect(backend, **options):
        with ParallelRolloutCollector(
            [cartpole] * 4, _lean, backend, horizon=40, seed=ROOT_SEED, episode_seeds="first", **options
        ) as collector:
            return [collector.collect() for _ in range(2)]

    reference = collect("sync")
    for expected, got in zip(reference, collect(backend, **options)):
        assert_batches_identical(expected, got)
    for expected, got in zip(reference, collect("sync")):
        assert_batches_identical(expected, got)


class _DisabledResetLog(gym.vector.SyncVectorEnv):
    """A vector env without autoreset that logs the seeds of its resets."""

    def __init__(self, num_envs):
        super().__init__([partial(gym.make, "CartPole-v1")] * num_envs, autoreset_mode=AutoresetMode.DISABLED)
        self.reset_seeds = []

    def reset(self, *, seed=None, options=None):
        self.reset_seeds.append(seed)
        return super().reset(seed=seed, options=options)


def test_a_vector_env_without_autoreset_is_reset_without_seeds_after_the_first_reset():
    vector_env = _DisabledResetLog(2)
    with ParallelRolloutCollector(
        [lambda: vector_env], _lean, "sync", horizon=80, seed=ROOT_SEED, episode_seeds="first"
    ) as collector:
        batch = collector.collect()
    first, *later = vector_env.reset_seeds
    assert first == [episode_seed(ROOT_SEED, 0, 0), episode_seed(ROOT_SEED, 1, 0)]
    assert later and all(seed is None for seed in later)
    assert set(batch.episode_seeds[batch.episode_env_indices >= 0][2:].tolist()) <= {-1}


@pytest.mark.parametrize("bad", ["none", "all", None, 1])
def test_an_unknown_mode_is_refused_naming_the_argument(bad):
    with pytest.raises(ConfigurationError, match="episode_seeds"):
        ParallelRolloutCollector([cartpole], None, "sync", horizon=2, seed=0, episode_seeds=bad)
