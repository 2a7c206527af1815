"""One measurement of the tree on PYTHONPATH: us per vector step / ms per collect, CartPole and frames x16."""
import json, sys, time, warnings
warnings.simplefilter("ignore")
import numpy as np, gymnasium as gym
from gymnasium import spaces
import parallel_rollouts
from parallel_rollouts import ParallelRolloutCollector, ParallelVectorEnv

class Frames(gym.Env):
    """84x84x4 uint8 frames at almost no simulation cost (a fresh copy of one of 8 frames a step)."""
    def __init__(self):
        self.observation_space = spaces.Box(0, 255, (84, 84, 4), np.uint8)
        self.action_space = spaces.Discrete(4)
        self._bank = np.zeros((8, 84, 84, 4), np.uint8); self._i = 0; self._t = 0
    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._bank = self.np_random.integers(0, 256, self._bank.shape, dtype=np.uint8); self._i = 0; self._t = 0
        return self._bank[0].copy(), {}
    def step(self, a):
        self._i = (self._i + 1 + int(a)) % 8; self._t += 1
        return self._bank[self._i].copy(), float(self._i == 0), False, self._t >= 100, {}

def cartpole(): return gym.make("CartPole-v1")
def frames(): return Frames()

def cart_policy(obs): return (obs[:, 2] > 0).astype(np.int64)
def frame_policy(obs): return (obs[:, 0, 0, 0] & 3).astype(np.int64)

def steps(env, n, actions):
    t = time.perf_counter()
    for i in range(n): env.step(actions[i % len(actions)])
    return (time.perf_counter() - t) / n * 1e6

def collects(c, n):
    t = time.perf_counter()
    for _ in range(n): c.collect()
    return (time.perf_counter() - t) / n * 1e3

if __name__ == "__main__":
    out = {"tree": parallel_rollouts.__file__}
    rng = np.random.default_rng(0)
    for wname, make, pol, acts, nsteps, ncol in (("cartpole", cartpole, cart_policy, 2, 1500, 10), ("frames", frames, frame_policy, 4, 400, 4)):
        actions = [rng.integers(0, acts, 16) for _ in range(64)]
        for backend in ("sync", "async"):
            env = ParallelVectorEnv([make] * 16, backend=backend)
            env.reset(seed=0); steps(env, nsteps // 5, actions)
            out[f"{wname} pve-{backend} us/step"] = min(steps(env, nsteps, actions) for _ in range(3))
            env.close()
        for name, kw in (("collector-sync", {"backend": "sync"}), ("collector-async", {"backend": "async"}), ("rollout-workers", {"backend": "async", "policy_placement": "workers"})):
            c = ParallelRolloutCollector([make] * 16, pol, horizon=128, seed=0, **kw)
            collects(c, 2)
            out[f"{wname} {name} ms/collect"] = min(collects(c, ncol) for _ in range(3))
            c.close()
    print(json.dumps(out))
