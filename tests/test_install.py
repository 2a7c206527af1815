"""The quick check of an install (`python -m pytest tests/test_install.py`, about a minute): the
compiled core is built and chosen, and every front door collects or steps once with it: the
collector in this process and in worker processes, `ParallelVectorEnv`, the Stable-Baselines3
`ParallelVecEnv` under SB3's PPO, and the command line. The whole suite is `python -m pytest`."""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium
import numpy as np
import pytest

import parallel_rollouts
from parallel_rollouts import ParallelRolloutCollector, ParallelVectorEnv, PolicyOutput


@pytest.fixture(autouse=True)
def _no_fallback():
    # A collector that fell back to the pure-Python core would warn; here that is a failure.
    with warnings.catch_warnings():
        warnings.simplefilter("error", parallel_rollouts.CoreFallbackWarning)
        yield


def lean_policy(observations):
    return (observations[:, 2] > 0).astype(np.int64)


def make_cartpole():
    return gymnasium.make("CartPole-v1")


def test_the_compiled_core_is_built_and_chosen():
    import parallel_rollouts.core._core as compiled

    assert Path(compiled.__file__).suffix in (".so", ".pyd"), compiled.__file__
    assert parallel_rollouts.active_core() == "compiled"


def test_make_collector_collects_a_batch_on_the_compiled_core():
    with parallel_rollouts.make_collector("CartPole-v1", num_envs=4, policy=lean_policy, horizon=64, seed=0) as collector:
        batch = collector.collect()
    assert collector.core == "compiled"
    assert batch.observations.shape == (64, 4, 4) and batch.observations.dtype == np.float32
    assert batch.actions.shape == (64, 4) and batch.rewards.dtype == np.float64
    np.testing.assert_array_equal(batch.final_observation_mask, batch.dones)
    assert batch.seed == 0 and batch.valid.all()


def test_the_async_collector_gives_the_sync_batch_bit_for_bit():
    def policy(observations):
        return PolicyOutput(lean_policy(observations), values=observations[:, 0])

    batches = {}
    for backend in ("sync", "async"):
        with ParallelRolloutCollector([make_cartpole] * 4, policy, backend=backend, horizon=64, seed=3,
                                      num_workers=2 if backend == "async" else None) as collector:
            batches[backend] = collector.collect()
            assert collector.core == "compiled"
    for field in ("observations", "actions", "rewards", "terminations", "truncations", "values",
                  "final_observations", "bootstrap_observations", "step_episode_seeds", "episode_returns"):
        np.testing.assert_array_equal(getattr(batches["sync"], field), getattr(batches["async"], field), err_msg=field)


def test_parallel_vector_env_steps_like_sync_vector_env():
    reference = gymnasium.vector.SyncVectorEnv([make_cartpole] * 4)
    envs = ParallelVectorEnv([make_cartpole] * 4, backend="async", num_workers=2)
    try:
        expected, _ = reference.reset(seed=7)
        observations, _ = envs.reset(seed=7)
        np.testing.assert_array_equal(observations, expected)
        for _ in range(50):
            actions = lean_policy(expected)
            expected, *expected_rest, _ = reference.step(actions)
            observations, *rest, _ = envs.step(actions)
            np.testing.assert_array_equal(observations, expected)
            for ours, theirs in zip(rest, expected_rest):
                np.testing.assert_array_equal(ours, theirs)
    finally:
        envs.close()
        reference.close()


def test_stable_baselines3_ppo_learns_on_parallel_vec_env():
    from stable_baselines3 import PPO

    from parallel_rollouts.sb3 import ParallelVecEnv

    vec_env = ParallelVecEnv([make_cartpole] * 4, backend="sync")
    try:
        model = PPO("MlpPolicy", vec_env, n_steps=32, batch_size=64, n_epochs=1, seed=0, device="cpu")
        model.learn(total_timesteps=256)
        assert model.num_timesteps == 256
        assert vec_env.root_seed == 0
    finally:
        vec_env.close()


def _console_script() -> str:
    script = shutil.which("parallel-rollouts", path=str(Path(sys.executable).parent))
    assert script is not None, "the parallel-rollouts console script is not installed next to this Python"
    return script


def test_the_command_line_prints_its_version_and_checks_an_env(tmp_path):
    version = subprocess.run([_console_script(), "--version"], capture_output=True, text=True, timeout=120)
    installed = importlib.metadata.version("parallel-rollouts")  # the source version and the build's commit
    assert installed.startswith(parallel_rollouts.__version__)
    assert version.returncode == 0 and version.stdout.startswith(f"parallel-rollouts {installed}")
    check = subprocess.run(
        [_console_script(), "check", "CartPole-v1", "--max-steps", "200"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "0 failed" in check.stdout, check.stdout
