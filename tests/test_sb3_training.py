"""Stable-Baselines3's PPO trains on ParallelVecEnv exactly as on DummyVecEnv given the same episode seeds.

A short run (1,024 steps, 4 updates) for the suite; the 100k-step comparison
and HalfCheetah runs are ``examples/sb3_training.py``.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor

from benchmarks.sb3_training import LearningCurve
from parallel_rollouts.sb3 import ParallelVecEnv
from tests.sb3_envs import replaying

NUM_ENVS = 4
STEPS = 1024


def cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


def train(venv) -> tuple[list, dict]:
    model = PPO("MlpPolicy", VecMonitor(venv), n_steps=64, batch_size=64, n_epochs=2, seed=0, device="cpu")
    log = LearningCurve()
    model.learn(total_timesteps=STEPS, callback=log)
    return log.episodes, {name: value.clone() for name, value in model.policy.state_dict().items()}


def test_ppo_gives_the_same_learning_curve_on_the_adapter_as_on_dummy_vec_env():
    with ParallelVecEnv([cartpole] * NUM_ENVS, "sync") as ours:
        curve, weights = train(ours)
        control = DummyVecEnv([replaying(cartpole, index, ours) for index in range(NUM_ENVS)])
        control_curve, control_weights = train(control)
        control.close()
        # PPO(seed=0) called seed(0): the run's episodes are the collector's for root seed 0.
        assert ours.root_seed == 0
    with ParallelVecEnv([cartpole] * NUM_ENVS, "async") as ours_async:
        async_curve, async_weights = train(ours_async)

    assert len(curve) > 25
    assert curve == control_curve
    assert curve == async_curve
    for name, value in weights.items():
        assert torch.equal(value, control_weights[name]), name
        assert torch.equal(value, async_weights[name]), name
    # The policy moved: these are four real updates, not a copied initialisation.
    first = PPO("MlpPolicy", DummyVecEnv([cartpole]), seed=0, device="cpu").policy.state_dict()
    assert any(not torch.equal(first[name], value) for name, value in weights.items())
    assert np.isfinite([r for r, _ in curve]).all()
