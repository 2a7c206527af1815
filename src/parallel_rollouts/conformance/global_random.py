"""No global random state: an env seeded through ``reset`` must not draw from ``np.random`` or ``random``.

The global generators are per process and shared by everything in it, so an env
that draws from them gives a different trajectory in each worker and each run,
whatever seed it was reset with. Two envs reset with the same seed run under two
different global states, pinned before each of their calls; if they differ, the
env reads global state. A third run, under the first run's states, tells this
apart from an env that is not deterministic at all.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np

from .report import CheckResult, CheckStatus, counted
from .target import build_env
from .trajectory import Trajectory, first_difference, run_trajectory

__all__ = ["NO_GLOBAL_RANDOM", "check_no_global_random"]

NO_GLOBAL_RANDOM = "no global random state"


_REFERENCE, _DISTURBED = 12345, 98765


def _pinned(numpy_base: int, python_base: int) -> Callable[[int], None]:
    """Set both global generators, before each call, to states that depend on the call's index only."""

    def pin(step: int) -> None:
        np.random.seed((numpy_base + 7919 * step) % 2**32)
        random.seed(python_base + 7919 * step)

    return pin


def _run(factory: Callable, vector: bool, limits: tuple[int, int, int], numpy_base: int, python_base: int) -> Trajectory:
    seed, max_steps, episodes = limits
    env, _ = build_env(factory)
    try:
        return run_trajectory(env, seed, max_steps, episodes, vector, before_call=_pinned(numpy_base, python_base))
    finally:
        env.close()


def check_no_global_random(factory: Callable, vector: bool, seed: int, max_steps: int, episodes: int) -> CheckResult:
    """Pins the global generators; :func:`~parallel_rollouts.conformance.check.check_env` restores them after."""
    limits = (seed, max_steps, episodes)
    reference = _run(factory, vector, limits, _REFERENCE, _REFERENCE)
    if first_difference(reference, _run(factory, vector, limits, _REFERENCE, _REFERENCE)) is not None:
        return CheckResult(
            NO_GLOBAL_RANDOM,
            CheckStatus.WARN,
            "not judged: two envs reset with the same seed differ even under the same global random state",
            "see 'same seed, same trajectory'",
        )
    disturbed = _run(factory, vector, limits, _DISTURBED, _DISTURBED)
    difference = first_difference(reference, disturbed)
    if difference is None:
        return CheckResult(
            NO_GLOBAL_RANDOM,
            CheckStatus.PASS,
            f"same trajectory under different np.random and random states ({counted(reference.steps, 'step')})",
        )
    # Which generator: disturb one at a time.
    used = [
        name
        for name, bases in (("NumPy's legacy np.random", (_DISTURBED, _REFERENCE)), ("Python's random", (_REFERENCE, _DISTURBED)))
        if first_difference(reference, _run(factory, vector, limits, *bases)) is not None
    ]
    named = " and ".join(used) if used else "the global random state (only when both are disturbed)"
    where = "at the first reset" if difference == 0 else f"after {difference} calls (reset included)"
    return CheckResult(
        NO_GLOBAL_RANDOM,
        CheckStatus.FAIL,
        f"the env draws from {named}: two envs reset with the same seed differ {where} when the global "
        "state differs, as it does between worker processes",
        "draw from self.np_random (seeded by super().reset(seed=seed)) instead of np.random.* and random.*",
    )
