"""Envs and the seed-replaying control for the Stable-Baselines3 adapter's tests.

Top-level so that the async backend's spawned workers can import them; this
module imports nothing from Stable-Baselines3.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from tests.envs import SpaceEnv

SPACES = {
    "box": (spaces.Box(-2.0, 2.0, shape=(3,), dtype=np.float32), spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)),
    "discrete": (spaces.Discrete(5), spaces.Discrete(3)),
    "multidiscrete": (spaces.MultiDiscrete([3, 4]), spaces.MultiDiscrete([2, 5])),
    "dict": (
        spaces.Dict(
            {
                "position": spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32),
                "mode": spaces.Discrete(4),
                "pixels": spaces.Box(0, 255, shape=(2, 2), dtype=np.uint8),
            }
        ),
        spaces.Discrete(3),
    ),
}


class InfoEnv(SpaceEnv):
    """A :class:`~tests.envs.SpaceEnv` whose step and reset infos carry values, and that renders.

    Step infos hold the step count and, every third step, an array; reset infos
    hold the seed the episode was reset with (so a wrong seed shows up in
    ``reset_infos``) and the options received.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 7}

    def __init__(self, kind: str, render_mode: str | None = None, max_length: int = 6) -> None:
        observation_space, action_space = SPACES[kind]
        super().__init__(observation_space, action_space, max_length=max_length)
        self.render_mode = render_mode
        self.steps = 0
        self.colour = 0

    def reset(self, *, seed=None, options=None):
        observation, _ = super().reset(seed=seed, options=options)
        info = {"reset_seed": seed}
        if options:
            info["options"] = dict(options)
        return observation, info

    def step(self, action):
        observation, reward, terminated, truncated, _ = super().step(action)
        self.steps += 1
        info: dict[str, Any] = {"steps": self.steps}
        if self.steps % 3 == 0:
            info["pair"] = np.array([self.steps, -self.steps], dtype=np.int32)
        return observation, reward, terminated, truncated, info

    def render(self):
        frame = np.zeros((4, 6, 3), dtype=np.uint8)
        frame[..., 0] = self.steps % 256
        frame[..., 1] = self.colour
        return frame

    @property
    def stable_baselines3_loaded(self) -> bool:
        return "stable_baselines3" in sys.modules

    @property
    def process_id(self) -> int:
        return os.getpid()

    def bump(self, amount: int = 1) -> int:
        self.colour += amount
        return self.colour


def info_env(kind: str, render_mode: str | None = None) -> InfoEnv:
    return InfoEnv(kind, render_mode)


def reversed_keys_env() -> gym.Env:
    """The ``"dict"`` :class:`InfoEnv` returning its observations' keys in reverse of the space's sorted order.

    As MiniGrid behind ``FilterObservation`` does: a ``Dict`` space sorts its keys, the env need not.
    """
    env = InfoEnv("dict")
    return gym.wrappers.TransformObservation(env, _reverse_keys, env.observation_space)


def _reverse_keys(observation: dict) -> dict:
    return {key: observation[key] for key in reversed(list(observation))}


def failing_cartpole(fail_at: int) -> gym.Env:
    return FailingStepEnv(gym.make("CartPole-v1"), fail_at)


class FailingStepEnv(gym.Wrapper):
    """Raises on its ``fail_at``-th step."""

    def __init__(self, env: gym.Env, fail_at: int) -> None:
        super().__init__(env)
        self.fail_at = fail_at
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps == self.fail_at:
            raise RuntimeError(f"step {self.steps} exploded")
        return self.env.step(action)


class FloatFramesEnv(gym.Env):
    """Declares a uint8 Box but returns float frames: DummyVecEnv casts them, the adapter refuses."""

    observation_space = spaces.Box(0, 255, shape=(2,), dtype=np.uint8)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.array([1.5, 2.5]), {}

    def step(self, action):
        return np.array([1.5, 2.5]), 0.0, False, False, {}


class SeedOnlyResetEnv(SpaceEnv):
    """A :class:`~tests.envs.SpaceEnv` whose ``reset`` takes no ``options``, as some envs in SB3's own tests."""

    def reset(self, seed=None):
        return super().reset(seed=seed)


class ReplayRecordedSeeds(gym.Wrapper):
    """The control's env: every reset takes the next seed the adapter recorded for this env.

    ``recorded()`` returns that env's recorded seeds (the adapter's
    ``episode_seeds()[index]``); the seed ``DummyVecEnv`` passes is ignored.
    """

    def __init__(self, env: gym.Env, recorded: Callable[[], list[int]]) -> None:
        super().__init__(env)
        self._recorded = recorded
        self._seeds: list[int] = []
        self._episodes = 0

    def __setattr__(self, name: str, value: Any) -> None:
        # Transparent to DummyVecEnv's set_attr (a plain setattr on its env): the env gets it.
        if name == "env" or name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            setattr(self.env, name, value)

    def reset(self, *, seed=None, options=None):
        if self._episodes >= len(self._seeds):
            self._seeds = self._recorded()
        assert self._episodes < len(self._seeds), "the control reset an episode the adapter did not begin"
        seed = self._seeds[self._episodes]
        self._episodes += 1
        if not options:  # as DummyVecEnv: `options` only when there are some
            return self.env.reset(seed=seed)
        return self.env.reset(seed=seed, options=options)


def replaying(env_fn: Callable[[], gym.Env], index: int, adapter: Any) -> Callable[[], gym.Env]:
    """A factory for the control's env ``index``, replaying the seeds ``adapter`` records for it."""
    return partial(_replaying_env, env_fn, index, adapter)


def _replaying_env(env_fn: Callable[[], gym.Env], index: int, adapter: Any) -> gym.Env:
    return ReplayRecordedSeeds(env_fn(), lambda: adapter.episode_seeds()[index])


class MatchBitsEnv(gym.Env):
    """Shows 4 random bits; the ``MultiBinary(4)`` action scores one point per bit it copies.

    Learnable in a few thousand steps, and strict: an action that is not 0 or 1
    in every position is an error, so a value the adapter changed would show.
    Episodes last 8 steps (truncated).
    """

    observation_space = spaces.Box(0.0, 1.0, shape=(4,), dtype=np.float32)
    action_space = spaces.MultiBinary(4)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._steps = 0
        self._bits = self.np_random.integers(0, 2, size=4)
        return self._bits.astype(np.float32), {}

    def step(self, action):
        action = np.asarray(action)
        if action.shape != (4,) or not np.isin(action, (0, 1)).all():
            raise ValueError(f"MatchBitsEnv takes 4 bits of 0 or 1; got {action!r}")
        reward = float((action == self._bits).sum())
        self._steps += 1
        self._bits = self.np_random.integers(0, 2, size=4)
        return self._bits.astype(np.float32), reward, False, self._steps >= 8, {}
