"""One seeded run of an env, recorded as a digest per step: what the determinism checks compare.

Actions come from the env's own action space, seeded from the run's seed, so two
runs with the same seed send the same actions. Each episode is reset with its
own seed (``seed + episode``), as the collector reseeds every episode. A run
stops after ``episodes`` episodes have ended or ``max_steps`` steps. A vector
env resets its sub-envs itself (with a declared ``DISABLED`` mode the run resets
the ended ones, as the collector does).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from ..groups.vector_source import autoreset_mode_of

__all__ = ["ResetCall", "Trajectory", "first_difference", "leaves_of", "raised_in_reset", "reset_env", "run_trajectory"]


@dataclass
class Trajectory:
    """What a run saw: one digest per observation (reset and steps), and the time each call took."""

    digests: list[str] = field(default_factory=list)
    steps: int = 0
    episodes_ended: int = 0
    step_seconds: list[float] = field(default_factory=list)
    reset_seconds: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class ResetCall:
    """The ``reset`` call an error was raised in: its seed (``None`` when none was passed)."""

    seed: int | None

    def describe(self) -> str:
        return "reset()" if self.seed is None else f"reset(seed={self.seed})"


def reset_env(env: Any, seed: int | None = None, options: Any = None) -> Any:
    """``env.reset(seed=seed, options=options)``: every check resets the env through here.

    So that what the env's reset raised is told apart from what its step or the check raised
    (:func:`raised_in_reset`).
    """
    return env.reset(seed=seed, options=options)


def raised_in_reset(error: BaseException) -> ResetCall | None:
    """The :func:`reset_env` call ``error`` was raised in (by the env's reset, or calling it), or None."""
    traceback = error.__traceback__
    while traceback is not None:
        frame = traceback.tb_frame
        if frame.f_code is reset_env.__code__:
            seed = frame.f_locals.get("seed")
            return ResetCall(seed if isinstance(seed, int) else None)
        traceback = traceback.tb_next
    return None


def leaves_of(value: Any) -> list[Any]:
    """The array-like leaves of a nested observation (dicts in key order, tuples in order)."""
    if isinstance(value, dict):
        return [leaf for key in sorted(value, key=str) for leaf in leaves_of(value[key])]
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in leaves_of(item)]
    return [value]


def _digest(*values: Any) -> str:
    hasher = hashlib.blake2b(digest_size=12)
    for value in values:
        for leaf in leaves_of(value):
            array = np.ascontiguousarray(np.asarray(leaf))
            hasher.update(f"{array.dtype.str}{array.shape}".encode())
            hasher.update(array.tobytes() if array.dtype != object else repr(array.tolist()).encode())
    return hasher.hexdigest()


def first_difference(first: Trajectory, second: Trajectory) -> int | None:
    """Index of the first observation where the runs differ (0 is the first reset), or None."""
    for index, (a, b) in enumerate(zip(first.digests, second.digests)):
        if a != b:
            return index
    if len(first.digests) != len(second.digests):
        return min(len(first.digests), len(second.digests))
    return None


def run_trajectory(
    env: Any,
    seed: int,
    max_steps: int,
    episodes: int,
    vector: bool,
    before_call: Callable[[int], None] | None = None,
    observe: Callable[[str, Any, tuple], None] | None = None,
) -> Trajectory:
    """Run ``env`` from ``reset(seed=seed)``; ``before_call(step)`` runs before every reset and step.

    ``observe(kind, observation, (reward, terminated, truncated))`` sees every
    call's result as returned (``kind`` is ``"reset"`` or ``"step"``), before the
    run goes on.
    """
    record = Trajectory()
    action_space = env.action_space
    action_space.seed(seed)
    disabled = vector and autoreset_mode_of(env) is AutoresetMode.DISABLED

    def reset(episode_seed: int, options: Any = None) -> Any:
        if before_call is not None:
            before_call(record.steps)
        start = time.perf_counter()
        observation, _info = reset_env(env, episode_seed, options)
        record.reset_seconds.append(time.perf_counter() - start)
        if observe is not None:
            observe("reset", observation, ())
        record.digests.append(_digest(observation))
        return observation

    reset(seed)
    episode = 0
    while record.steps < max_steps and record.episodes_ended < episodes:
        if before_call is not None:
            before_call(record.steps)
        action = action_space.sample()
        start = time.perf_counter()
        observation, reward, terminated, truncated, _info = env.step(action)
        record.step_seconds.append(time.perf_counter() - start)
        record.steps += 1
        if observe is not None:
            observe("step", observation, (reward, terminated, truncated))
        record.digests.append(_digest(observation, reward, terminated, truncated))
        ended = np.logical_or(np.asarray(terminated, dtype=bool), np.asarray(truncated, dtype=bool))
        if not ended.any():
            continue
        record.episodes_ended += int(ended.sum())
        episode += 1
        if record.episodes_ended >= episodes:
            break
        if not vector:
            reset(seed + episode)
        elif disabled:
            reset(seed + episode, {"reset_mask": ended})
    return record
