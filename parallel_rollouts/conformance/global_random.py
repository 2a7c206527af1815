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

from .report import CheckResult, CheckStatus
from .target import build_env
from .trajectory import Trajectory, first_difference, run_trajectory

__all__ = ["NO_GLOBAL_RANDOM", "check_no_global_random"]

NO_GLOBAL_RANDOM = "no global random state"

_NUMPY, _PYTHON = "numpy", "python"


def _pinned(base: int, sources: tuple[str, ...]) -> Callable[[int], None]:
    def pin(step: int) -> None:
        if _NUMPY in sources:
            np.random.seed((base + 7919 * step) % 2**32)
        if _PYTHON in sources:
            random.seed(base + 7919 * step)

    return pin


def _run(factory: Callable, vector: bool, seed: int, max_steps: int, episodes: int, base: int,
         sources: tuple[str, ...] = (_NUMPY, _PYTHON)) -> Trajectory:
    env, _ = build_env(factory)
    try:
        return run_trajectory(env, seed, max_steps, episodes, vector, before_call=_pinned(base, sources))
    finally:
        env.close()


def check_no_global_random(factory: Callable, vector: bool, seed: int, max_steps: int, episodes: int) -> CheckResult:
    numpy_state, python_state = np.random.get_state(), random.getstate()
    try:
        reference = _run(factory, vector, seed, max_steps, episodes, base=12345)
        if first_difference(reference, _run(factory, vector, seed, max_steps, episodes, base=12345)) is not None:
            return CheckResult(
                NO_GLOBAL_RANDOM,
                CheckStatus.WARN,
                "not judged: two envs reset with the same seed differ even under the same global random state",
                "see 'same seed, same trajectory'",
            )
        disturbed = _run(factory, vector, seed, max_steps, episodes, base=98765)
        difference = first_difference(reference, disturbed)
        if difference is None:
            return CheckResult(
                NO_GLOBAL_RANDOM,
                CheckStatus.PASS,
                f"same trajectory under different np.random and random states ({reference.steps} steps)",
            )
        used = [
            name
            for name, source in (("NumPy's legacy np.random", _NUMPY), ("Python's random", _PYTHON))
            if first_difference(reference, _run(factory, vector, seed, max_steps, episodes, 98765, (source,)))
            is not None
        ]
        named = " and ".join(used) if used else "the global random state (only when both are disturbed)"
        return CheckResult(
            NO_GLOBAL_RANDOM,
            CheckStatus.FAIL,
            f"the env draws from {named}: two envs reset with the same seed diverge after {difference} calls "
            "when the global state differs, as it does between worker processes",
            "draw from self.np_random (seeded by super().reset(seed=seed)) instead of np.random.* and random.*",
        )
    finally:
        np.random.set_state(numpy_state)
        random.setstate(python_state)
