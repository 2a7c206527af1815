"""Small deterministic envs with known behaviour, shared by the tests.

They are top-level classes so that the async backend's spawned workers can
import them.
"""

from __future__ import annotations

import numpy as np
import gymnasium as gym
from gymnasium import spaces


class CountingEnv(gym.Env):
    """Episodes of known length; every number in it says where it came from.

    Observation ``[env_id, step_in_episode, episode_seed % 1000, last_action]``
    (float32). An episode ends after ``episode_length`` steps, by termination if
    ``terminate`` else by truncation. Reward is ``step_in_episode + action``.
    """

    metadata = {"render_modes": []}

    def __init__(self, env_id: int = 0, episode_length: int = 3, terminate: bool = True, num_actions: int = 4):
        self.env_id = env_id
        self.episode_length = episode_length
        self.terminate = terminate
        self.observation_space = spaces.Box(-1e6, 1e6, shape=(4,), dtype=np.float32)
        self.action_space = spaces.Discrete(num_actions)
        self._step = 0
        self._seed_tag = 0.0
        self.reset_seeds: list[int | None] = []

    def _observation(self, last_action: float) -> np.ndarray:
        return np.array([self.env_id, self._step, self._seed_tag, last_action], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.reset_seeds.append(seed)
        self._step = 0
        self._seed_tag = float(seed % 1000) if seed is not None else -1.0
        return self._observation(-1.0), {"kind": "reset"}

    def step(self, action):
        self._step += 1
        ended = self._step >= self.episode_length
        reward = float(self._step + int(action))
        info = {"step_in_episode": self._step, "double_action": 2.0 * int(action)}
        return (
            self._observation(float(action)),
            reward,
            ended and self.terminate,
            ended and not self.terminate,
            info,
        )


class SpaceEnv(gym.Env):
    """Any observation/action space; observations sampled from the seeded space.

    Episode lengths are drawn from ``self.np_random`` (1..max_length) and end by
    termination or truncation at random, so the done pattern depends on the
    reset seed alone. The reward depends on the action, so a wrong action in
    storage shows up in the rewards.
    """

    metadata = {"render_modes": []}

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, max_length: int = 6):
        self.observation_space = observation_space
        self.action_space = action_space
        self.max_length = max_length
        self._remaining = 0
        self._terminates = True

    def _sample_observation(self):
        self.observation_space.seed(int(self.np_random.integers(2**31)))
        return self.observation_space.sample()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._remaining = int(self.np_random.integers(1, self.max_length + 1))
        self._terminates = bool(self.np_random.integers(2))
        return self._sample_observation(), {}

    def step(self, action):
        self._remaining -= 1
        leaves = spaces.flatten(self.action_space, action)
        reward = float(np.sum(np.asarray(leaves, dtype=np.float64) * np.arange(1, leaves.size + 1)))
        ended = self._remaining <= 0
        return self._sample_observation(), reward, ended and self._terminates, ended and not self._terminates, {}


class FaultyEnv(CountingEnv):
    """A CountingEnv that fails on purpose: ``fail_at`` names the phase and call count."""

    def __init__(self, env_id: int = 0, phase: str = "step", at: int = 1, episode_length: int = 3, how: str = "raise"):
        super().__init__(env_id=env_id, episode_length=episode_length)
        self.phase = phase
        self.at = at
        self.how = how
        self._calls = {"reset": 0, "step": 0}

    def _maybe_fail(self, phase: str) -> None:
        self._calls[phase] += 1
        if phase == self.phase and self._calls[phase] == self.at:
            if self.how == "raise":
                raise ValueError(f"env {self.env_id} fails in {phase} on call {self.at}")
            if self.how == "exit":
                import os

                os._exit(3)
            if self.how == "kill":
                import os
                import signal

                os.kill(os.getpid(), signal.SIGKILL)
            if self.how == "segfault":
                import ctypes

                ctypes.string_at(0)
            if self.how == "hang":
                import time

                time.sleep(3600)
            if self.how == "bad_shape":
                return
        return

    def reset(self, *, seed=None, options=None):
        self._maybe_fail("reset")
        return super().reset(seed=seed, options=options)

    def step(self, action):
        self._maybe_fail("step")
        observation, reward, terminated, truncated, info = super().step(action)
        if self.how == "bad_shape" and self.phase == "step" and self._calls["step"] >= self.at:
            observation = np.zeros(7, dtype=np.float32)
        if self.how == "out_of_space" and self.phase == "step" and self._calls["step"] >= self.at:
            observation = np.full(4, 1e9, dtype=np.float32)
        return observation, reward, terminated, truncated, info


class UnpicklableFactory:
    """A factory holding a lock, which no pickler can serialise."""

    def __init__(self):
        import threading

        self.lock = threading.Lock()

    def __call__(self):
        return CountingEnv()


class RaisingFactory:
    """An env factory that raises, as a picklable object."""

    def __init__(self, message: str = "factory exploded"):
        self.message = message

    def __call__(self):
        raise RuntimeError(self.message)


class HangingCloseEnv(CountingEnv):
    """Its close() never returns (the collector's close must still be bounded)."""

    def close(self):
        import time

        time.sleep(3600)


def counting(env_id: int = 0, episode_length: int = 3, terminate: bool = True) -> CountingEnv:
    return CountingEnv(env_id=env_id, episode_length=episode_length, terminate=terminate)


def cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


class ConstantPolicy:
    """Every env takes action ``value`` (a deterministic, batched policy).

    It sizes its output by the observations it is given, so it also serves a
    Ray actor that sees only its slice of the envs.
    """

    def __init__(self, num_envs: int, value: int = 1, dtype=np.int64):
        self.num_envs = num_envs
        self.value = value
        self.dtype = dtype

    def __call__(self, observations):
        return np.full(observations.shape[0], self.value, dtype=self.dtype)


class ObservationDependentPolicy:
    """A deterministic policy that reads its observations (Box obs, Discrete(k) actions)."""

    def __init__(self, num_actions: int):
        self.num_actions = num_actions

    def __call__(self, observations):
        flat = np.asarray(observations, dtype=np.float64).reshape(observations.shape[0], -1)
        return (np.abs(np.floor(flat.sum(axis=1) * 7.0)) % self.num_actions).astype(np.int64)
        return (np.abs(np.floor(flat.sum(axis=1) * 7.0)) % self.num_actions).astype(np.int64)


_MODULE_LEVEL_ENV: CountingEnv | None = None


def module_level_env() -> CountingEnv:
    """A factory that returns one env per process, made on the first call (a mistake users make)."""
    global _MODULE_LEVEL_ENV
    if _MODULE_LEVEL_ENV is None:
        _MODULE_LEVEL_ENV = CountingEnv(env_id=7)
    return _MODULE_LEVEL_ENV


class CrashingCartPole(gym.Wrapper):
    """CartPole whose process dies (or hangs) at its ``at_step``-th step, once per ``marker`` file.

    The first env to reach that step creates ``marker`` and fails; envs made afterwards (a
    replacement included) find it and run on as plain CartPole. Without ``marker`` every
    instance fails. ``how``: ``"kill"`` (SIGKILL), ``"abort"`` (``os.abort()``: SIGABRT, as a
    crashing simulator), ``"segfault"``, ``"exit"`` (``os._exit(3)``), ``"hang"``.
    """

    def __init__(self, at_step: int, how: str, marker: str | None = None):
        super().__init__(gym.make("CartPole-v1"))
        self.at_step, self.how, self.marker = at_step, how, marker
        self._steps = 0

    def step(self, action):
        import os

        self._steps += 1
        if self._steps == self.at_step and (self.marker is None or not os.path.exists(self.marker)):
            if self.marker is not None:
                open(self.marker, "w").close()
            crash(self.how)
        return self.env.step(action)


def crash(how: str) -> None:
    """End this process the way ``how`` says (or hang for an hour)."""
    import os
    import signal
    import time

    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif how == "abort":
        os.abort()
    elif how == "segfault":
        import ctypes

        ctypes.string_at(0)
    elif how == "exit":
        os._exit(3)
    elif how == "hang":
        time.sleep(3600)
    raise ValueError(how)


class DiesWhenRemade:
    """A CartPole factory whose first call after ``armed`` exists (and ``spent`` does not) ends
    its process: the replacement of a lost worker dies while it makes its envs."""

    def __init__(self, armed: str, spent: str) -> None:
        self.armed, self.spent = armed, spent

    def __call__(self):
        import os

        if os.path.exists(self.armed) and not os.path.exists(self.spent):
            open(self.spent, "w").close()
            os._exit(3)
        return gym.make("CartPole-v1")
