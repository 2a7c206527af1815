"""A bounded soak of random worker deaths: SIGKILL at random moments over 60 collects.

A timer thread kills a random worker a random few milliseconds into some collects, so
deaths fall wherever the protocol happens to be: a step, the finish, the start of a
collect, a replacement's start-up. Whatever the moment, the collector must stay usable,
every valid row must replay on plain Gymnasium, no seed may start two episodes, every
lost row must be zero, and nothing may be left behind.
"""

from __future__ import annotations

import os
import signal
import threading
from functools import partial

import gymnasium as gym
import numpy as np
import pytest

from parallel_rollouts import ParallelRolloutCollector, RunnerState
from tests.test_restart_moments import MODES, assert_lost_rows_are_zero, pool_of
from tests.test_restarts import assert_valid_rows_replay

pytestmark = pytest.mark.timeout(300)

COLLECTS_PER_MODE, NUM_ENVS, HORIZON = 20, 4, 32


def kill_a_random_worker(pool, random: np.random.Generator) -> None:
    worker = pool.workers[int(random.integers(len(pool.workers)))]
    try:
        os.kill(worker.process.pid, signal.SIGKILL)
    except (ProcessLookupError, ValueError, AttributeError):
        pass  # already gone, or being replaced right now


def test_random_kills_over_sixty_collects_leave_every_batch_right(no_leaks):
    random = np.random.default_rng(2026)
    kills = 0
    for mode in MODES:
        fns = [partial(gym.make, "CartPole-v1") for _ in range(NUM_ENVS)]
        with ParallelRolloutCollector(
            fns, None, "async", horizon=HORIZON, seed=11, num_workers=2, max_restarts=1000, **MODES[mode]
        ) as collector:
            pool = pool_of(collector)
            batches = []
            for _ in range(COLLECTS_PER_MODE):
                timer = None
                if random.random() < 0.4:
                    kills += 1
                    timer = threading.Timer(float(random.uniform(0, 0.01)), kill_a_random_worker, (pool, random))
                    timer.start()
                batches.append(collector.collect())
                if timer is not None:
                    timer.join()
            assert collector._backend.state is RunnerState.READY
        for batch in batches:
            assert_lost_rows_are_zero(batch)
        assert_valid_rows_replay(batches)
        assert any(batch.lost_env_indices.size for batch in batches), f"no kill of {mode} landed"
    assert kills >= 15
