"""What an env's ``reset`` and ``step`` must return, checked one value at a time.

The step loop takes the common types (a ``float`` reward, ``bool`` flags) as
they are; anything else goes through these functions, which accept what
Gymnasium accepts and otherwise raise ``TypeError`` naming the field and the
fix. The caller adds the env index.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

__all__ = ["check_reset_result", "check_step_result", "end_flag", "info_number", "reward_value"]

_OLD_API_HINT = (
    "This is the pre-0.26 Gym API; port the env to Gymnasium's API or wrap it with shimmy's "
    "`GymV21CompatibilityV0` / `GymV26CompatibilityV0`."
)


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"an array of shape {value.shape!r} and dtype {value.dtype} ({value.tolist()!r})"
    return f"{type(value).__name__} {value!r}"


def check_reset_result(result: Any) -> tuple[Any, Any]:
    """``(observation, info)`` from what ``reset`` returned."""
    if type(result) is tuple and len(result) == 2:
        return result
    raise TypeError(
        f"`reset` returned {_describe(result)}; Gymnasium envs return a pair (observation, info). "
        + _OLD_API_HINT
    )


def check_step_result(result: Any) -> tuple[Any, Any, Any, Any, Any]:
    """The 5-tuple ``(observation, reward, terminated, truncated, info)`` from what ``step`` returned."""
    if type(result) is tuple and len(result) == 5:
        return result
    length = f"{len(result)} values" if isinstance(result, tuple) else _describe(result)
    raise TypeError(
        f"`step` returned {length}; Gymnasium envs return 5: (observation, reward, terminated, "
        "truncated, info). " + _OLD_API_HINT
    )


def reward_value(reward: Any) -> float:
    """The reward as a float: a Python or NumPy real number, or a 0-d numeric array."""
    if isinstance(reward, np.ndarray) and reward.ndim == 0 and reward.dtype.kind in "biuf":
        return float(reward)
    if isinstance(reward, (numbers.Real, np.bool_)) and not isinstance(reward, np.ndarray):
        return float(reward)
    raise TypeError(
        f"the reward returned by `step` is {_describe(reward)}, not a number; `step` must return "
        "one scalar reward per call (e.g. `float(reward)`)."
    )


def end_flag(value: Any, field: str) -> bool:
    """``terminated`` / ``truncated`` as a bool: a bool, a NumPy bool, or an integer 0 or 1."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (numbers.Integral, np.integer)) and value in (0, 1):
        return bool(value)
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype == np.bool_:
        return bool(value)
    raise TypeError(
        f"`{field}` returned by `step` is {_describe(value)}, not a bool; `step` must return "
        f"one bool `{field}` per call."
    )


def info_number(value: Any, key: str) -> float:
    """An ``info_keys`` entry as a float: a bool, an int, a float, a NumPy scalar or 0-d array of those.

    Nothing else is converted (a string such as ``'1.5'`` is refused, not parsed),
    and an integer too large for float64 is refused rather than overflowing.
    """
    if isinstance(value, np.ndarray):
        numeric = value.ndim == 0 and value.dtype.kind in "biuf"
    else:
        numeric = isinstance(value, (numbers.Real, np.bool_))
    if not numeric:
        raise TypeError(
            f"info[{key!r}] is {_describe(value)}, not a number; info_keys must name entries that are "
            "one bool, int, float or NumPy scalar per env and step."
        )
    try:
        return float(value)
    except OverflowError:
        raise ValueError(
            f"info[{key!r}] is {_describe(value)}, which does not fit a float64; info_keys entries "
            "are stored as float64."
        ) from None
