"""Stable-Baselines3 PPO trained end to end on ParallelVecEnv, against DummyVecEnv given the same episode seeds.

Run: ``python -m benchmarks.sb3_training [--runs cartpole halfcheetah] [--output benchmarks/results/sb3_training_<run>.json]``

``cartpole``
    ``PPO("MlpPolicy")`` on CartPole-v1 for 100k steps (8 envs, RL Zoo's
    hyperparameters) on ``ParallelVecEnv`` (sync), then on ``DummyVecEnv`` whose
    envs are reset with the episode seeds the first run recorded. The two
    learning curves (every episode's return and length, in the order episodes
    end) and the final weights must be identical.
``halfcheetah``
    ``PPO("MlpPolicy")`` on HalfCheetah-v5 for 50k steps (8 envs) on both
    backends of ``ParallelVecEnv``; the backends must give identical curves.

PyTorch runs on one thread. Wall times are whole ``learn()`` calls (PPO's updates included), on whatever
else the machine is running: they say that the runs finish, not how fast.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor

from parallel_rollouts.sb3 import ParallelVecEnv
from tests.sb3_envs import replaying

# Env factories from modules that import neither PyTorch nor SB3: the async workers import them.
from .envs import halfcheetah
from .report import machine_record
from .vector_envs import cartpole

CARTPOLE_STEPS = 100_000
HALFCHEETAH_STEPS = 50_000
NUM_ENVS = 8
# RL Zoo's PPO settings for CartPole-v1 (constant rates in place of its linear schedules).
CARTPOLE_PPO = dict(n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0, learning_rate=1e-3)
HALFCHEETAH_PPO = dict(n_steps=512, batch_size=64)


class LearningCurve(BaseCallback):
    """Every finished episode's (return, length), in the order they end."""

    def __init__(self) -> None:
        super().__init__()
        self.episodes: list[tuple[float, int]] = []

    def _on_step(self) -> bool:
        for info in self.locals["infos"]:
            if "episode" in info:
                self.episodes.append((float(info["episode"]["r"]), int(info["episode"]["l"])))
        return True


def train(vec_env, steps: int, settings: dict) -> dict:
    model = PPO("MlpPolicy", VecMonitor(vec_env), seed=0, device="cpu", **settings)
    curve = LearningCurve()
    start = time.perf_counter()
    model.learn(total_timesteps=steps, callback=curve)
    wall = time.perf_counter() - start
    returns = [r for r, _ in curve.episodes]
    return {
        "wall_seconds": wall,
        "episodes": len(curve.episodes),
        "mean_return_first_20": float(np.mean(returns[:20])),
        "mean_return_last_20": float(np.mean(returns[-20:])),
        "curve": curve.episodes,
        "weights": {name: value.clone() for name, value in model.policy.state_dict().items()},
    }


def same_weights(first: dict, second: dict) -> bool:
    return all(torch.equal(value, second[name]) for name, value in first.items())


def public(run: dict) -> dict:
    return {key: value for key, value in run.items() if key not in ("curve", "weights")}


def run_cartpole() -> dict:
    with ParallelVecEnv([cartpole] * NUM_ENVS, "sync") as adapter:
        ours = train(adapter, CARTPOLE_STEPS, CARTPOLE_PPO)
        control_env = DummyVecEnv([replaying(cartpole, index, adapter) for index in range(NUM_ENVS)])
        control = train(control_env, CARTPOLE_STEPS, CARTPOLE_PPO)
        control_env.close()
        episodes_seeded = sum(len(seeds) for seeds in adapter.episode_seeds())
    return {
        "steps": CARTPOLE_STEPS,
        "num_envs": NUM_ENVS,
        "ppo": CARTPOLE_PPO,
        "ParallelVecEnv sync": public(ours),
        "DummyVecEnv replaying the recorded seeds": public(control),
        "episodes_seeded_and_recorded": episodes_seeded,
        "same_learning_curve": ours["curve"] == control["curve"],
        "same_final_weights": same_weights(ours["weights"], control["weights"]),
    }


def run_halfcheetah() -> dict:
    runs = {}
    for backend in ("sync", "async"):
        with ParallelVecEnv([halfcheetah] * NUM_ENVS, backend) as vec_env:
            runs[backend] = train(vec_env, HALFCHEETAH_STEPS, HALFCHEETAH_PPO)
    return {
        "steps": HALFCHEETAH_STEPS,
        "num_envs": NUM_ENVS,
        "ppo": HALFCHEETAH_PPO,
        **{f"ParallelVecEnv {backend}": public(run) for backend, run in runs.items()},
        "same_learning_curve": runs["sync"]["curve"] == runs["async"]["curve"],
        "same_final_weights": same_weights(runs["sync"]["weights"], runs["async"]["weights"]),
    }


RUNS = {"cartpole": run_cartpole, "halfcheetah": run_halfcheetah}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="*", default=list(RUNS), choices=list(RUNS))
    parser.add_argument("--output", type=Path, default=Path("benchmark-results/sb3_training.json"))
    args = parser.parse_args(argv)
    # One thread: the machine's cores go to the envs and other work, not to PyTorch's spinning.
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    results = {}
    for name in args.runs:
        print(f"running {name} ...", flush=True)
        results[name] = RUNS[name]()
        print(json.dumps(results[name], indent=2), flush=True)
    document = {
        "machine": machine_record(),
        "load_average": {"before": load_before, "after": os.getloadavg()},
        "runs": results,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(document, indent=2, default=str) + "\n")
    print(f"wrote {args.output.resolve()}")


if __name__ == "__main__":
    main()
