"""Vector envs for the vector-env tests: top-level factories, so async workers can import them."""

from __future__ import annotations

from functools import partial

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import batch_space

from tests.envs import SpaceEnv

MODES = {"next_step": AutoresetMode.NEXT_STEP, "same_step": AutoresetMode.SAME_STEP, "disabled": AutoresetMode.DISABLED}

DICT_SPACE = spaces.Dict(
    {"position": spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32), "cell": spaces.Discrete(5)}
)


def short_cartpole() -> gym.Env:
    """CartPole truncated after 12 steps: episodes end by termination and by truncation."""
    return gym.make("CartPole-v1", max_episode_steps=12)


def dict_env() -> gym.Env:
    """Dict observations, episodes of random length ending by either flag."""
    return SpaceEnv(DICT_SPACE, spaces.Discrete(3), max_length=5)


SINGLE_ENVS = {"cartpole": short_cartpole, "dict": dict_env}


def sync_vector(name: str, num_envs: int, mode: str) -> SyncVectorEnv:
    return SyncVectorEnv([SINGLE_ENVS[name]] * num_envs, autoreset_mode=MODES[mode])


def sync_vector_fn(name: str, num_envs: int, mode: str):
    return partial(sync_vector, name, num_envs, mode)


def async_vector(name: str, num_envs: int, mode: str) -> AsyncVectorEnv:
    """Gymnasium's AsyncVectorEnv: one process of its own per sub-env."""
    return AsyncVectorEnv([SINGLE_ENVS[name]] * num_envs, autoreset_mode=MODES[mode])


def async_vector_fn(name: str, num_envs: int, mode: str):
    return partial(async_vector, name, num_envs, mode)


def cartpole_vector(num_envs: int) -> gym.vector.VectorEnv:
    return gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode="vector_entry_point")


class MisdeclaredVectorEnv(gym.vector.VectorEnv):
    """A vector env whose batched observation space does not batch its single space."""

    def __init__(self, num_envs: int = 3, declared_rows: int = 2, returned_rows: int | None = None):
        self.num_envs = num_envs
        self.single_observation_space = spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32)
        self.single_action_space = spaces.Discrete(2)
        self.observation_space = batch_space(self.single_observation_space, declared_rows)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}
        self._rows = num_envs if returned_rows is None else returned_rows

    def reset(self, *, seed=None, options=None):
        return np.zeros((self._rows, 4), dtype=np.float32), {}

    def step(self, actions):
        n = self._rows
        return np.zeros((n, 4), dtype=np.float32), np.ones(n), np.zeros(n, bool), np.zeros(n, bool), {}


def misdeclared(num_envs: int = 3, declared_rows: int = 2, returned_rows: int | None = None) -> MisdeclaredVectorEnv:
    return MisdeclaredVectorEnv(num_envs, declared_rows, returned_rows)


def frozen_lake() -> gym.Env:
    """Discrete observations and a non-empty info ({"prob": ...}) on every reset and step."""
    return gym.make("FrozenLake-v1")


def pendulum() -> gym.Env:
    """Box actions; every episode is truncated after 200 steps."""
    return gym.make("Pendulum-v1")


def cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


ADAPTER_ENVS = {"cartpole": cartpole, "pendulum": pendulum, "frozen_lake": frozen_lake, "dict": dict_env}


class StepFails(gym.Wrapper):
    """CartPole whose ``step`` raises: a broken env behind a vector env."""

    def step(self, action):
        raise ValueError("the simulator diverged")


def step_fails() -> gym.Env:
    return StepFails(gym.make("CartPole-v1"))


class FailingVectorEnv(gym.vector.VectorWrapper):
    """A CartPoleVectorEnv whose ``step`` raises."""

    def step(self, actions):
        return failing_step()


def failing_step():
    raise ValueError("the batch simulator diverged")


def failing_vector(num_envs: int) -> FailingVectorEnv:
    return FailingVectorEnv(cartpole_vector(num_envs))


class IntSeedOnly(gym.vector.VectorWrapper):
    """A CartPoleVectorEnv whose reset rejects a seed list with a RuntimeError (as C++ bindings may)."""

    def reset(self, *, seed=None, options=None):
        if isinstance(seed, list):
            raise RuntimeError("seed must be an int")
        return self.env.reset(seed=seed, options=options)


def int_seed_only(num_envs: int) -> IntSeedOnly:
    return IntSeedOnly(cartpole_vector(num_envs))


class ResetFails(gym.vector.VectorWrapper):
    def reset(self, *, seed=None, options=None):
        raise OSError("the simulator did not start")


def reset_fails(num_envs: int) -> ResetFails:
    return ResetFails(cartpole_vector(num_envs))


class NanObservation(gym.vector.VectorWrapper):
    """A CartPoleVectorEnv whose second sub-env returns NaN at every step."""

    def step(self, actions):
        observations, rewards, terminations, truncations, infos = self.env.step(actions)
        observations = observations.copy()
        observations[1, 0] = np.nan
        return observations, rewards, terminations, truncations, infos


def nan_observation(num_envs: int) -> NanObservation:
    return NanObservation(cartpole_vector(num_envs))


class NanAtEpisodeEnd(gym.vector.VectorWrapper):
    """NaN in each terminal observation: ``info["final_obs"]`` (SAME_STEP) or the step's own row."""

    def step(self, actions):
        observations, rewards, terminations, truncations, infos = self.env.step(actions)
        ended = np.logical_or(terminations, truncations)
        if "final_obs" in infos:
            final = infos["final_obs"].copy()
            for index in np.flatnonzero(ended):
                final[index] = np.full_like(final[index], np.nan)
            infos = dict(infos, final_obs=final)
        else:
            observations = observations.copy()
            observations[ended] = np.nan
        return observations, rewards, terminations, truncations, infos


def nan_at_episode_end(num_envs: int, mode: str) -> NanAtEpisodeEnd:
    from tests.envs import CountingEnv

    return NanAtEpisodeEnd(SyncVectorEnv([partial(CountingEnv, episode_length=2)] * num_envs, autoreset_mode=MODES[mode]))
