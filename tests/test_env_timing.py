"""Per-env timing in every batch: seconds in ``step`` and ``reset`` per env, and for ``async``
the seconds this process waited for each env's worker."""

from __future__ import annotations

import time
from functools import partial

import gymnasium as gym
import numpy as np
import pytest

from parallel_rollouts import ParallelRolloutCollector
from tests.envs import CountingEnv

pytestmark = pytest.mark.timeout(120)

SLOW_SECONDS = 0.01


class SlowStepEnv(CountingEnv):
    """A CountingEnv whose ``step`` sleeps: the straggler."""

    def step(self, action):
        time.sleep(SLOW_SECONDS)
        return super().step(action)


class SlowResetEnv(CountingEnv):
    def reset(self, *, seed=None, options=None):
        time.sleep(SLOW_SECONDS)
        return super().reset(seed=seed, options=options)


def fns_with(slow_class, slow_index: int, num_envs: int = 4) -> list:
    fns = [partial(CountingEnv, env_id=i, episode_length=3) for i in range(num_envs)]
    fns[slow_index] = partial(slow_class, env_id=slow_index, episode_length=3)
    return fns


BACKENDS = [
    ("serial", {}),
    ("sync", {}),
    ("async", {"num_workers": 2}),
    ("async", {"num_workers": 2, "policy_placement": "workers"}),
]
IDS = ["serial", "sync", "async-per-step", "async-rollout-workers"]


@pytest.mark.parametrize("backend, extra", BACKENDS, ids=IDS)
def test_a_slow_env_shows_up_as_the_slowest_in_step_and_reset_seconds(backend, extra, core):
    horizon = 12
    with ParallelRolloutCollector(fns_with(SlowStepEnv, 2), None, backend, horizon=horizon, seed=0, core=core, **extra) as collector:
        batch = collector.collect()
    for field in (batch.env_step_seconds, batch.env_reset_seconds, batch.env_wait_seconds):
        assert field.shape == (4,) and field.dtype == np.float64 and (field >= 0).all()
    assert int(np.argmax(batch.env_step_seconds)) == 2
    # It slept horizon times: at least that, and the others far less.
    assert batch.env_step_seconds[2] >= horizon * SLOW_SECONDS
    assert (batch.env_step_seconds[[0, 1, 3]] < batch.env_step_seconds[2]).all()
    # Episodes of 3 steps end four times in 12 rows: every env was reset within the rollout.
    assert (batch.env_reset_seconds > 0).all()
    if backend == "async":
        # Worker 1 (envs 2, 3) hosts the straggler: this process waited longest for it.
        assert batch.env_wait_seconds[2] == batch.env_wait_seconds[3] > 0
        assert batch.env_wait_seconds[2] >= batch.env_wait_seconds[0]
    else:
        assert (batch.env_wait_seconds == 0).all()


class SlowAtFirstEnv(CountingEnv):
    """Sleeps in its first three steps and resets only: the first rollout's, when the horizon is 3."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.calls = 0

    def step(self, action):
        self.calls += 1
        if self.calls <= 3:
            time.sleep(0.1)
        return super().step(action)


@pytest.mark.parametrize("backend, extra", BACKENDS[1:3], ids=IDS[1:3])
def test_reset_seconds_count_the_resets_within_the_rollout(backend, extra):
    with ParallelRolloutCollector(fns_with(SlowResetEnv, 1), None, backend, horizon=9, seed=0, **extra) as collector:
        batch = collector.collect()
    # Three episode ends per env in 9 rows, each followed by a reset that sleeps.
    assert int(np.argmax(batch.env_reset_seconds)) == 1
    assert batch.env_reset_seconds[1] >= 3 * SLOW_SECONDS


@pytest.mark.parametrize("backend, extra", BACKENDS, ids=IDS)
@pytest.mark.parametrize("reuse_buffers", [False, True])
def test_timings_start_from_zero_in_every_collect(backend, extra, reuse_buffers):
    fns = [partial(SlowAtFirstEnv, env_id=0, episode_length=100), partial(CountingEnv, env_id=1, episode_length=100)]
    with ParallelRolloutCollector(fns, None, backend, horizon=3, seed=0, reuse_buffers=reuse_buffers, **extra) as collector:
        first, second = collector.collect().env_step_seconds[0], collector.collect().env_step_seconds[0]
    assert first >= 3 * 0.1
    # A running total would still hold the first rollout's 0.3 s.
    assert second < 0.1


def test_a_vector_env_shares_its_step_time_among_its_sub_envs():
    fns = [partial(gym.make_vec, "CartPole-v1", num_envs=3, vectorization_mode="sync")]
    with ParallelRolloutCollector(fns, None, "sync", horizon=5, seed=0) as collector:
        batch = collector.collect()
    assert batch.env_step_seconds.shape == (3,)
    assert (batch.env_step_seconds > 0).all() and np.ptp(batch.env_step_seconds) < 1e-12
