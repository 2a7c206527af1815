"""What a DummyVecEnv or SubprocVecEnv user passes works on ParallelVecEnv: MultiBinary policies, make_vec_env.

SB3's policies for a ``MultiBinary`` space emit float32 actions that are exactly
0.0 or 1.0; ``DummyVecEnv`` hands them to the env, and the adapter takes them
as the integers they are (no value changes), while still refusing a float that
is not a whole number. ``make_vec_env(..., vec_env_cls=..., vec_env_kwargs=
dict(start_method=...))`` is how ``SubprocVecEnv`` users choose the start method.
"""

from __future__ import annotations

from contextlib import ExitStack

import numpy as np
import pytest
import torch
from stable_baselines3 import A2C, PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor

from benchmarks.sb3_training import LearningCurve
from parallel_rollouts import ActionError, ConfigurationError
from parallel_rollouts.checks.conversion import whole_floats_as
from parallel_rollouts.sb3 import ParallelVecEnv
from tests.sb3_envs import MatchBitsEnv, replaying

BACKENDS = ["sync", "async"]
NUM_ENVS = 3


@pytest.fixture
def stack():
    with ExitStack() as resources:
        yield resources


def test_whole_floats_convert_to_integers_only_when_no_value_changes():
    assert whole_floats_as(np.array([0.0, 1.0, 1.0], np.float32), np.int8).tolist() == [0, 1, 1]
    assert whole_floats_as(np.array([0.0, 1.0], np.float32), np.int8).dtype == np.int8
    assert whole_floats_as(np.array([-3.0, 7.0]), np.int64).tolist() == [-3, 7]
    assert whole_floats_as(np.array([1.0, 0.0]), np.bool_).tolist() == [True, False]
    for refused, dtype in (
        ([0.0, 0.5], np.int8),  # a fraction
        ([1.5], np.int64),
        ([np.nan], np.int64),
        ([np.inf], np.int64),
        ([300.0], np.int8),  # past int8
        ([-1.0], np.uint8),
        ([2.0], np.bool_),  # a bool holds 0 and 1 only
    ):
        assert whole_floats_as(np.array(refused), dtype) is None, (refused, dtype)
    assert whole_floats_as(np.array([1, 0]), np.int8) is None  # not floats: nothing to convert


@pytest.mark.parametrize("backend", BACKENDS)
def test_float_zero_one_multibinary_actions_step_like_dummy_vec_env(stack, backend):
    ours = ParallelVecEnv([MatchBitsEnv] * NUM_ENVS, backend, seed=5)
    stack.callback(ours.close)
    control = DummyVecEnv([replaying(MatchBitsEnv, index, ours) for index in range(NUM_ENVS)])
    stack.callback(control.close)
    assert np.array_equal(ours.reset(), control.reset())
    rng = np.random.default_rng(0)
    for t in range(20):
        actions = rng.integers(0, 2, size=(NUM_ENVS, 4)).astype(np.float32)  # what SB3's Bernoulli gives
        observations, rewards, dones, _ = ours.step(actions)
        control_observations, control_rewards, control_dones, _ = control.step(actions)
        assert np.array_equal(observations, control_observations), t
        assert np.array_equal(rewards, control_rewards), t
        assert np.array_equal(dones, control_dones), t


@pytest.mark.parametrize("backend", BACKENDS)
def test_float_actions_that_are_no_whole_numbers_are_refused_naming_the_env(stack, backend):
    ours = ParallelVecEnv([MatchBitsEnv] * NUM_ENVS, backend, seed=5)
    stack.callback(ours.close)
    ours.reset()
    good = np.zeros((NUM_ENVS, 4), np.float32)
    half = good.copy()
    half[1, 2] = 0.5
    with pytest.raises(ActionError, match=r"MultiBinary\(4\) needs integers \(env 1 got \[0.0, 0.0, 0.5, 0.0\]\)"):
        ours.step(half)
    one_and_a_half = good.copy()
    one_and_a_half[2, 0] = 1.5
    with pytest.raises(ActionError, match=r"needs integers \(env 2 got \[1.5, 0.0, 0.0, 0.0\]\)"):
        ours.step(one_and_a_half)
    two = good.copy()
    two[1, 3] = 2.0  # a whole number, but no bit
    with pytest.raises(ActionError, match=r"action for env 1 is outside the action space MultiBinary\(4\): got \[0, 0, 0, 2\]"):
        ours.step(two)
    ours.step(good)  # the refused batches stepped nothing, and the env still steps


def _train(algorithm, venv) -> tuple[list, dict]:
    model = algorithm("MlpPolicy", VecMonitor(venv), seed=0, device="cpu", n_steps=32,
                      **({"batch_size": 48, "n_epochs": 2} if algorithm is PPO else {}))
    curve = LearningCurve()
    model.learn(total_timesteps=768, callback=curve)
    return curve.episodes, {name: value.clone() for name, value in model.policy.state_dict().items()}


@pytest.mark.parametrize("algorithm", [PPO, A2C], ids=["ppo", "a2c"])
def test_sb3_trains_on_multibinary_through_the_adapter_as_on_dummy_vec_env(algorithm):
    with ParallelVecEnv([MatchBitsEnv] * NUM_ENVS, "sync") as ours:
        curve, weights = _train(algorithm, ours)
        control = DummyVecEnv([replaying(MatchBitsEnv, index, ours) for index in range(NUM_ENVS)])
        control_curve, control_weights = _train(algorithm, control)
        control.close()
    assert len(curve) >= 90  # 768 steps of 8-step episodes
    assert curve == control_curve
    for name, value in weights.items():
        assert torch.equal(value, control_weights[name]), name
    untrained = algorithm("MlpPolicy", DummyVecEnv([MatchBitsEnv]), seed=0, device="cpu").policy.state_dict()
    assert any(not torch.equal(untrained[name], value) for name, value in weights.items())


@pytest.mark.parametrize("start_method, backend", [("spawn", "async"), (None, "sync")])
def test_make_vec_env_passes_subproc_vec_envs_start_method(start_method, backend, no_leaks):
    """A start method asks for worker processes, as of SubprocVecEnv; without one the default, sync."""
    venv = make_vec_env(MatchBitsEnv, n_envs=2, seed=3, vec_env_cls=ParallelVecEnv,
                        vec_env_kwargs=dict(start_method=start_method))
    try:
        assert isinstance(venv, ParallelVecEnv)
        assert venv.backend == backend
        assert venv.reset().shape == (2, 4)
        _, rewards, _, _ = venv.step(np.ones((2, 4), np.float32))
        assert rewards.shape == (2,)
    finally:
        venv.close()


def test_a_start_method_that_cannot_apply_is_refused(no_leaks):
    with pytest.raises(ConfigurationError, match="`start_method`='spawn' and `context`='spawn' both choose"):
        ParallelVecEnv([MatchBitsEnv], "async", start_method="spawn", context="spawn")
    with pytest.raises(ConfigurationError, match="applies to backend 'async' only"):
        ParallelVecEnv([MatchBitsEnv], "sync", start_method="spawn")
    with pytest.raises(ValueError, match="cannot find context for 'illegal_method'"):
        ParallelVecEnv([MatchBitsEnv], "async", start_method="illegal_method")
