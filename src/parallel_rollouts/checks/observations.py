"""The observation value check, run on each row as it is written, before the policy sees it.

Three modes (the collector's ``observation_check``):

``"warn"`` (default)
    A finite value outside the bounds of a float ``Box`` gives one
    :class:`~parallel_rollouts.errors.ObservationWarning` per env and leaf, and
    the rollout goes on: real envs overshoot declared float bounds (LunarLander's
    legs, MuJoCo velocities) and Gymnasium itself only warns. NaN, and any value
    outside a ``Discrete``/``MultiDiscrete``/``MultiBinary`` or integer ``Box``,
    still raise :class:`~parallel_rollouts.errors.ObservationError`: those break
    a policy, not just a bound.
``"raise"``
    Every value outside the space raises.
``"off"``
    No value check (shape, dtype and conversion errors still raise).
"""

from __future__ import annotations

import warnings
from types import ModuleType
from typing import Any

import numpy as np
from gymnasium import spaces

from ..errors import ConfigurationError, ObservationError, ObservationWarning
from ..data.spaces import SpaceLayout

__all__ = ["OBSERVATION_CHECKS", "ObservationChecker", "check_observation_check"]

OBSERVATION_CHECKS = ("warn", "raise", "off")


def check_observation_check(mode: Any) -> str:
    if mode not in OBSERVATION_CHECKS:
        raise ConfigurationError(f"`observation_check` must be one of {OBSERVATION_CHECKS!r}; got {mode!r}.")
    return mode


class ObservationChecker:
    """Checks ``[rows, *leaf]`` blocks of one group's observations against the space."""

    def __init__(self, layout: SpaceLayout, core: ModuleType, mode: str, env_offset: int) -> None:
        self._layout = layout
        self._core = core
        self._mode = check_observation_check(mode)
        self._env_offset = env_offset
        # Leaves whose every value of the dtype is inside (uint8 images in [0, 255]) need no check.
        self._checked_leaves = [
            (index, layout.bounds(index))
            for index in range(len(layout.leaves))
            if not layout.covers_whole_dtype(index)
        ] if mode != "off" else []
        self._may_warn = [
            mode == "warn" and isinstance(leaf.space, spaces.Box) and leaf.dtype.kind == "f"
            for leaf in layout.leaves
        ]
        self._warned: set[tuple[int, int]] = set()

    def checked_leaves(self) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """``(leaf_index, low, high)`` of every leaf whose values are checked (none when off)."""
        return [(index, low, high) for index, (low, high) in self._checked_leaves]

    def check(self, leaves: list[np.ndarray], columns: np.ndarray | None, describe) -> None:
        """Check rows ``leaves[i][k]`` (``[rows, *leaf]`` per leaf) of the envs ``columns[k]``.

        ``columns`` maps row ``k`` to the group column it belongs to (``None``:
        row ``k`` is column ``k``). ``describe(column)`` names what the row is,
        for the message.
        """
        find = self._core.find_out_of_bounds
        for leaf_index, (low, high) in self._checked_leaves:
            values = leaves[leaf_index]
            bad = find(values, low, high)
            if bad >= 0:
                self._handle(leaf_index, values, bad, low, high, columns, describe)

    def _handle(self, leaf_index, values, first_bad, low, high, columns, describe) -> None:
        column_of = (lambda row: row) if columns is None else (lambda row: int(columns[row]))
        if not self._may_warn[leaf_index]:
            self._raise(leaf_index, column_of(first_bad), values[first_bad], describe)
        flat = values.reshape(values.shape[0], -1).astype(np.float64)
        outside = ~((flat >= low) & (flat <= high))
        for row in np.flatnonzero(outside.any(axis=1)).tolist():
            if np.isnan(flat[row]).any():
                self._raise(leaf_index, column_of(row), values[row], describe)
        for row in np.flatnonzero(outside.any(axis=1)).tolist():
            column = column_of(row)
            key = (column, leaf_index)
            if key not in self._warned:
                self._warned.add(key)
                warnings.warn(
                    self._message(leaf_index, column, values[row], describe)
                    + " observation_check='warn': stored as returned; this warning is shown once "
                    "per env and leaf. Pass observation_check='raise' to stop instead, or 'off'.",
                    ObservationWarning,
                    stacklevel=2,
                )

    def _message(self, leaf_index: int, column: int, value: Any, describe) -> str:
        leaf = self._layout.leaves[leaf_index]
        where = f" at {leaf.name}" if self._layout.is_nested else ""
        return (
            f"env {self._env_offset + column} returned {describe(column)}{where} outside its "
            f"observation space {leaf.space!r}: got {np.asarray(value).tolist()!r}."
        )

    def _raise(self, leaf_index: int, column: int, value: Any, describe) -> None:
        raise ObservationError(self._message(leaf_index, column, value, describe))
