"""Benchmark-only envs, each standing for one kind of workload.

They are top-level classes in an importable module so that the spawned workers
of the async backend and of Gymnasium's ``AsyncVectorEnv`` can unpickle a
``functools.partial`` of them. Every env is deterministic for a reset seed.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = [
    "BURN_ITERATIONS",
    "DictObservationEnv",
    "FrameImageEnv",
    "HalfMillisecondEnv",
    "RowBurnPolicy",
    "SlowStep",
    "measure_step_cpu_seconds",
    "slow_cartpole",
]

# Iterations of the burn loop in `HalfMillisecondEnv.step`. Chosen so one step costs about
# 0.5 ms of CPU on the 2-core x86 development machine (Python 3.11); a fixed count rather
# than a calibration at import keeps the work identical in every process and every run, so
# contenders measured on one machine always do the same work. `measure_step_cpu_seconds`
# reports what it costs on the machine at hand.
BURN_ITERATIONS = 5600

_LCG_MULTIPLIER = 1103515245
_LCG_INCREMENT = 12345
_LCG_MASK = 0x7FFFFFFF


class HalfMillisecondEnv(gym.Env):
    """A pure-Python simulator stand-in: a fixed amount of arithmetic per step, about 0.5 ms.

    Observation: ``Box(-1, 1, (4,), float32)`` read off the simulator state. Action:
    ``Discrete(2)``, folded into the state. Reward: the first observation entry. Episodes are
    truncated after ``episode_length`` steps and never terminate. The burn loop holds the GIL,
    as a simulator written in Python does.
    """

    metadata = {"render_modes": []}

    def __init__(self, episode_length: int = 200, burn_iterations: int = BURN_ITERATIONS) -> None:
        if episode_length < 1 or burn_iterations < 0:
            raise ValueError(
                f"`episode_length` must be >= 1 and `burn_iterations` >= 0; got "
                f"{episode_length!r} and {burn_iterations!r}."
            )
        self.episode_length = episode_length
        self.burn_iterations = burn_iterations
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self._state = 1
        self._steps = 0

    def _observation(self) -> np.ndarray:
        state = self._state
        # Four 8-bit fields of the 31-bit state, scaled into [-1, 1).
        return np.array(
            [((state >> shift) & 0xFF) / 128.0 - 1.0 for shift in (0, 8, 16, 23)], dtype=np.float32
        )

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._state = int(self.np_random.integers(1, _LCG_MASK))
        self._steps = 0
        return self._observation(), {}

    def step(self, action: Any):
        state = self._state + int(action)
        for _ in range(self.burn_iterations):
            state = (state * _LCG_MULTIPLIER + _LCG_INCREMENT) & _LCG_MASK
        self._state = state
        self._steps += 1
        observation = self._observation()
        return observation, float(observation[0]), False, self._steps >= self.episode_length, {}


class RowBurnPolicy:
    """A policy whose cost grows with the rows it is given, as a wide CPU network's does.

    Per row it runs the same arithmetic as ``HalfMillisecondEnv.step`` (``burn_iterations``
    of the LCG, seeded from the row), so with equal burns one batched call costs as much as
    stepping every env once. The action is 1 where the row's first entry is positive:
    deterministic per row.
    """

    def __init__(self, burn_iterations: int) -> None:
        self.burn_iterations = burn_iterations

    def __call__(self, observations: np.ndarray) -> np.ndarray:
        checksum = 0
        for row in observations:
            state = int(abs(float(row[0])) * 1e6) + 1
            for _ in range(self.burn_iterations):
                state = (state * _LCG_MULTIPLIER + _LCG_INCREMENT) & _LCG_MASK
            checksum ^= state
        # The checksum keeps the burn from looking unused; it cannot change the action.
        return ((observations[:, 0] > 0) | (checksum < 0)).astype(np.int64)


FRAME_SHAPE = (84, 84, 4)
FRAME_BANK_SIZE = 8


class HeavyTailEnv(HalfMillisecondEnv):
    """Heavy-tailed step times: ~50 µs per step, and one step in about 50 a straggler of ~5 ms.

    Which steps straggle is drawn from the env's own generator, so it follows the reset
    seed. The synchronous vector step waits for the slowest env every step; ready-first
    stepping lets the other envs go on.
    """

    STRAGGLE_EVERY = 50

    def __init__(self, episode_length: int = 200) -> None:
        super().__init__(episode_length, burn_iterations=BURN_ITERATIONS // 10)
        self._base_burn = BURN_ITERATIONS // 10

    def step(self, action: Any):
        straggles = self.np_random.random() < 1.0 / self.STRAGGLE_EVERY
        self.burn_iterations = self._base_burn * 100 if straggles else self._base_burn
        return super().step(action)


class FrameImageEnv(gym.Env):
    """Atari-sized frame stacks (``84x84x4`` uint8) at almost no simulation cost.

    Isolates the cost of moving large observations. Reset draws a bank of
    ``FRAME_BANK_SIZE`` seeded frames; each step moves through the bank by ``1 + action``
    and returns a fresh copy of the frame it lands on, as an emulator returns a new
    screen. Action: ``Discrete(4)``. Episodes are truncated after ``episode_length`` steps.
    """

    metadata = {"render_modes": []}

    def __init__(self, episode_length: int = 100) -> None:
        if episode_length < 1:
            raise ValueError(f"`episode_length` must be >= 1; got {episode_length!r}.")
        self.episode_length = episode_length
        self.observation_space = spaces.Box(0, 255, shape=FRAME_SHAPE, dtype=np.uint8)
        self.action_space = spaces.Discrete(4)
        self._bank = np.zeros((FRAME_BANK_SIZE,) + FRAME_SHAPE, dtype=np.uint8)
        self._position = 0
        self._steps = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._bank = self.np_random.integers(0, 256, size=self._bank.shape, dtype=np.uint8)
        self._position = 0
        self._steps = 0
        return self._bank[0].copy(), {}

    def step(self, action: Any):
        self._position = (self._position + 1 + int(action)) % FRAME_BANK_SIZE
        self._steps += 1
        reward = 1.0 if self._position == 0 else 0.0
        return self._bank[self._position].copy(), reward, False, self._steps >= self.episode_length, {}


class DictObservationEnv(gym.Env):
    """A cheap env with a ``Dict`` observation of Box and Discrete entries.

    Exercises the nested-space path: ``position`` and ``velocity`` (float32 ``(3,)``), ``mode``
    (``Discrete(3)``, the last action) and ``grid`` (uint8 ``(8, 8)`` occupancy). Velocity
    takes a seeded random kick each step; position integrates it. Episodes terminate when the
    position reaches the edge and are truncated after ``episode_length`` steps.
    """

    metadata = {"render_modes": []}

    def __init__(self, episode_length: int = 100) -> None:
        if episode_length < 1:
            raise ValueError(f"`episode_length` must be >= 1; got {episode_length!r}.")
        self.episode_length = episode_length
        self.observation_space = spaces.Dict(
            {
                "position": spaces.Box(-10.0, 10.0, shape=(3,), dtype=np.float32),
                "velocity": spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32),
                "mode": spaces.Discrete(3),
                "grid": spaces.Box(0, 255, shape=(8, 8), dtype=np.uint8),
            }
        )
        self.action_space = spaces.Discrete(3)
        self._position = np.zeros(3)
        self._velocity = np.zeros(3)
        self._mode = 0
        self._steps = 0

    def _observation(self) -> dict[str, Any]:
        grid = np.zeros((8, 8), dtype=np.uint8)
        cell = ((self._position[:2] + 10.0) * 0.35).astype(np.int64).clip(0, 7)
        grid[cell[0], cell[1]] = 255
        return {
            "position": self._position.astype(np.float32),
            "velocity": self._velocity.astype(np.float32),
            "mode": self._mode,
            "grid": grid,
        }

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._position = self.np_random.uniform(-1.0, 1.0, size=3)
        self._velocity = np.zeros(3)
        self._mode = 0
        self._steps = 0
        return self._observation(), {}

    def step(self, action: Any):
        self._mode = int(action)
        kick = self.np_random.uniform(-0.1, 0.1, size=3)
        kick[self._mode] += 0.05
        self._velocity = np.clip(self._velocity + kick, -1.0, 1.0)
        self._position = np.clip(self._position + 0.1 * self._velocity, -10.0, 10.0)
        self._steps += 1
        terminated = bool(np.abs(self._position).max() >= 10.0)
        truncated = not terminated and self._steps >= self.episode_length
        reward = -float(np.abs(self._position).sum())
        return self._observation(), reward, terminated, truncated, {}


class SlowStep(gym.Wrapper):
    """A simulator slower than its neighbours: ``delay_seconds`` more per step, spent waiting (as on
    a remote simulator or disk), not computing."""

    def __init__(self, env: gym.Env, delay_seconds: float = 0.001) -> None:
        super().__init__(env)
        self.delay_seconds = delay_seconds

    def step(self, action: Any):
        time.sleep(self.delay_seconds)
        return self.env.step(action)


def slow_cartpole(delay_seconds: float = 0.001) -> gym.Env:
    return SlowStep(gym.make("CartPole-v1"), delay_seconds)


def measure_step_cpu_seconds(env: gym.Env, steps: int = 200, seed: int = 0) -> float:
    """Mean CPU seconds (of this process) per ``env.step`` over ``steps`` steps of action zero.

    CPU time rather than wall time, so that other load on the machine inflates it less.
    """
    zero_action = np.zeros(env.action_space.shape, dtype=env.action_space.dtype)
    env.reset(seed=seed)
    start = time.process_time()
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(zero_action)
        if terminated or truncated:
            env.reset()
    return (time.process_time() - start) / steps


def halfcheetah() -> gym.Env:
    """MuJoCo's HalfCheetah-v5 (``gymnasium[mujoco]``)."""
    return gym.make("HalfCheetah-v5")
