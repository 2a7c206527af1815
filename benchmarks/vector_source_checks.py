"""CPU time per transition of the collector on two vector-env sources (sync, default settings).

Run it with two checkouts on PYTHONPATH in turn, interleaved, to compare versions:
`for r in 1..7: PYTHONPATH=A python benchmarks/vector_source_checks.py; PYTHONPATH=B ...`.
"""
import json
import time
from functools import partial

import gymnasium as gym
import numpy as np

from parallel_rollouts import ParallelRolloutCollector


def vec(n):
    return gym.make_vec("CartPole-v1", num_envs=n, vectorization_mode="vector_entry_point")


def sync16():
    return gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 16, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


def policy(observations):
    return (observations[:, 2] > 0).astype(np.int64)


out = {}
for name, fn, h in (("cartpole_vector_1024", partial(vec, 1024), 128), ("sync_vector_16_same_step", sync16, 256)):
    with ParallelRolloutCollector([fn], policy, "sync", horizon=h, seed=0, info_keys=()) as c:
        c.collect()
        t = time.process_time(); n = 0
        for _ in range(5):
            b = c.collect(); n += b.rewards.size
        out[name] = (time.process_time() - t) / n * 1e6
print(json.dumps(out))
