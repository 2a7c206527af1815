"""No aliasing: an observation, once returned, is not changed by the env's later steps or resets.

An env that returns the same array every time and writes into it corrupts every
observation kept across calls: the terminal observation a loop holds while it
resets, a replay buffer that stores references, a Gymnasium vector env with
``copy=False``. A check that copies the observation before comparing (as
Gymnasium's ``check_env`` does) cannot see it; this one keeps the objects the
env returned and compares them, at the end, with copies taken when they came.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np

from .report import CheckResult, CheckStatus, counted
from .target import build_env
from .trajectory import leaves_of, reset_env, run_trajectory

__all__ = ["NO_ALIASING", "check_no_aliasing"]

NO_ALIASING = "no observation aliasing"


def check_no_aliasing(factory: Callable, vector: bool, seed: int, max_steps: int, episodes: int) -> CheckResult:
    kept: list[tuple[str, int, Any, list]] = []

    def observe(kind: str, observation: Any, _rest: tuple) -> None:
        snapshot = [copy.deepcopy(np.asarray(leaf)) for leaf in leaves_of(observation)]
        kept.append((kind, len(kept), observation, snapshot))

    env, _ = build_env(factory)
    try:
        run_trajectory(env, seed, max_steps, episodes, vector, observe=observe)
        reset_env(env, seed + 10_000)  # one more reset after the last step
    finally:
        env.close()
    for kind, index, observation, snapshot in kept:
        now = [np.asarray(leaf) for leaf in leaves_of(observation)]
        if any(not np.array_equal(a, b, equal_nan=a.dtype.kind in "fc") for a, b in zip(now, snapshot)):
            what = "the first reset" if index == 0 else f"call {index} ({kind})"
            if vector:
                return CheckResult(
                    NO_ALIASING,
                    CheckStatus.WARN,
                    f"the batched observation returned by {what} was changed by later calls: the vector env "
                    "reuses its output buffer (e.g. copy=False); the collector copies each row at once, but "
                    "code that keeps a returned batch must copy it",
                    "build the vector env with copy=True if you keep its observations yourself",
                )
            return CheckResult(
                NO_ALIASING,
                CheckStatus.FAIL,
                f"the observation returned by {what} was changed by later steps or resets: the env returns "
                "the same array each time and writes into it",
                "return a new array from every step and reset (e.g. `return self._state.copy(), ...`)",
            )
    return CheckResult(NO_ALIASING, CheckStatus.PASS, f"{counted(len(kept), 'returned observation')} unchanged by later calls")
