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


class ScriptedVectorEnv(gym.vector.VectorEnv):
    """Three sub-envs with uint8 observations ``[steps in episode, column, 7]``, episodes of ``episode_length`` steps.

    ``behaves`` is the autoreset mode it implements; ``declares`` the one its
    metadata names (``None``: no ``autoreset_mode`` key). ``bad`` replaces sub-env
    1's entry of one field the first time ``where`` comes up: ``"reset"``,
    ``"step"``, ``"final_obs"`` or ``"mask_reset"`` (an observation),
    ``"rewards"``, ``"terminations"`` or ``"info"`` (the ``score`` entry).
    """

    def __init__(self, behaves="next_step", declares="next_step", where=None, bad=None, episode_length=3, num_envs=3):
        self.num_envs = num_envs
        self.single_observation_space = spaces.Box(0, 255, shape=(3,), dtype=np.uint8)
        self.single_action_space = spaces.Discrete(2)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.metadata = {} if declares is None else {"autoreset_mode": MODES[declares]}
        self._behaves = MODES[behaves]
        self._where, self._bad = where, bad
        self._length = episode_length
        self._counts = np.zeros(num_envs, dtype=np.int64)
        self._pending = np.zeros(num_envs, dtype=bool)

    def _inject(self, where: str, values):
        if self._where != where:
            return values
        self._where = None
        # A bad reward or info entry sits among numbers, as in a list the env built.
        mixed = where in ("rewards", "info")
        values = np.array(values, dtype=object if mixed else np.asarray(self._bad).dtype)
        values[1] = self._bad
        return values

    def _observations(self) -> np.ndarray:
        columns = np.arange(self.num_envs)
        return np.stack([self._counts, columns, np.full(self.num_envs, 7)], axis=1).astype(np.uint8)

    def reset(self, *, seed=None, options=None):
        mask = (options or {}).get("reset_mask")
        mask = np.ones(self.num_envs, dtype=bool) if mask is None else np.asarray(mask)
        self._counts[mask] = 0
        self._pending[mask] = False
        return self._inject("mask_reset" if options else "reset", self._observations()), {}

    def step(self, actions):
        rewards = np.ones(self.num_envs)
        resetting = self._pending.copy()
        self._counts[~resetting] += 1
        self._counts[resetting] = 0
        rewards[resetting] = 0.0
        terminations = (self._counts >= self._length) & ~resetting
        truncations = np.zeros(self.num_envs, dtype=bool)
        info = {"score": self._inject("info", self._counts * 0.5), "_score": np.ones(self.num_envs, dtype=bool)}
        if self._behaves is AutoresetMode.NEXT_STEP:
            self._pending = terminations.copy()
        elif self._behaves is AutoresetMode.SAME_STEP and terminations.any():
            rows = self._inject("final_obs", self._observations())
            final = np.empty(self.num_envs, dtype=object)  # as Gymnasium gives it: one entry per sub-env
            for column in np.flatnonzero(terminations):
                final[column] = rows[column]
            info["final_obs"] = final
            info["_final_obs"] = terminations.copy()
            self._counts[terminations] = 0
        observations = self._inject("step", self._observations())
        return (
            observations,
            self._inject("rewards", rewards),
            self._inject("terminations", terminations),
            truncations,
            info,
        )


def scripted_vector(behaves="next_step", declares="next_step", where=None, bad=None) -> ScriptedVectorEnv:
    return ScriptedVectorEnv(behaves, declares, where, bad)


class DeclaresMode(gym.vector.VectorWrapper):
    """A Gymnasium vector env whose metadata names another autoreset mode than the one it runs (or none)."""

    def __init__(self, env, declares):
        super().__init__(env)
        self.metadata = {key: value for key, value in env.metadata.items() if key != "autoreset_mode"}
        if declares is not None:
            self.metadata["autoreset_mode"] = MODES[declares]


def cartpole_declaring(behaves: str, declares) -> DeclaresMode:
    return DeclaresMode(sync_vector("cartpole", 2, behaves), declares)

RECORDER_ACTION_SPACES = {
    "discrete": spaces.Discrete(3),
    "float_box": spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32),
    "uint8_box": spaces.Box(0, 255, shape=(2,), dtype=np.uint8),
    "multi_discrete": spaces.MultiDiscrete([3, 4]),
    "dict": spaces.Dict({"move": spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32), "tool": spaces.Discrete(4)}),
}


def describe_action(action) -> object:
    """Everything an env could tell about the action it received: type, dtype, shape, exact bytes."""
    if isinstance(action, dict):
        return {key: describe_action(value) for key, value in action.items()}
    array = np.asarray(action)
    return (type(action).__name__, array.dtype.str, array.shape, array.tobytes())


class ActionRecorder(gym.Env):
    """Records each action it is stepped with (``received``): a sub-env that shows what it was handed."""

    observation_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)

    def __init__(self, action_space: spaces.Space):
        self.action_space = action_space
        self.received = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, dtype=np.float32), {}

    def step(self, action):
        self.received.append(describe_action(action))
        return np.zeros(1, dtype=np.float32), 0.0, False, False, {}


def action_recorder(space_name: str) -> ActionRecorder:
    return ActionRecorder(RECORDER_ACTION_SPACES[space_name])
