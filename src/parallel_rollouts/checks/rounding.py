"""The warning that an env's observations were stored by a conversion that may round them.

The conversion rule (:mod:`.conversion`) stores a float64 observation into a float32 leaf,
rounded, as Gymnasium does; a user reading the batch should know that values changed. Each
group owns one :class:`RoundingNotices`: the places that convert (the core's observation
writers, a vector env's general path, the multi-agent rows) tell it the first time an env's
leaf is converted, and the group says what it learned once the rollout (or the reset) is
complete, so that a warning never interrupts a row half written. Nothing is decided per step:
a writer tells it once per env, and the group asks ``pending`` once per rollout. In a worker
process the warning is recorded and raised again in the main process under the user's filters
(:mod:`~parallel_rollouts.processes.forwarded_warnings`).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ..data.spaces import SpaceLayout
from ..errors import ObservationRoundingWarning
from .conversion import may_round

__all__ = ["RoundingNotices", "rounding_message"]


def rounding_message(envs: range, leaf_name: str | None, actual: np.dtype, declared: np.dtype) -> str:
    """The warning's text: which envs (one, or a vector env's) and leaf, the dtype returned, the dtype
    stored, and the fix."""
    who = f"env {envs[0]}" if len(envs) == 1 else f"the vector env of envs {envs[0]}..{envs[-1]}"
    where = "" if leaf_name is None else f" at {leaf_name}"
    return (
        f"{who} returned observations{where} of dtype {actual}, but the observation space declares "
        f"{declared}: they are stored as {declared}, rounded to its precision, so values may change. Said once per "
        f"env and leaf. Return {declared} observations (e.g. `observation.astype(np.{declared})`), or declare the "
        f"space as {actual} to keep every value."
    )


class RoundingNotices:
    """One group's record of the env leaves it stored by a conversion that may round.

    ``converted(leaf_index, column, dtype)`` is told each conversion to another dtype (the
    callers tell it once per column and writer; a vector env's whole block at once, with
    ``columns``); :meth:`say` warns, once per env, leaf and dtype, about those that may round.
    """

    def __init__(self, layout: SpaceLayout, env_offset: int) -> None:
        self._layout = layout
        self._env_offset = env_offset
        self._seen: set[tuple[int, int, np.dtype]] = set()
        #: ``(envs, leaf_index, dtype)`` of conversions that may round, not yet warned about.
        self.pending: list[tuple[range, int, np.dtype]] = []

    def converted(self, leaf_index: int, column: int, dtype: Any, columns: int = 1) -> None:
        """The value of group columns ``column .. column + columns - 1`` for leaf ``leaf_index`` was stored
        converted from ``dtype``."""
        dtype = np.dtype(dtype)
        key = (column, leaf_index, dtype)
        if key in self._seen:
            return
        self._seen.add(key)
        if may_round(dtype, self._layout.leaves[leaf_index].dtype):
            first = self._env_offset + column
            self.pending.append((range(first, first + columns), leaf_index, dtype))

    def writer_hook(self, leaf_index: int):
        """The ``on_conversion(column, dtype)`` callback of the core's writer of leaf ``leaf_index``."""
        return lambda column, dtype: self.converted(leaf_index, column, dtype)

    def say(self) -> None:
        """Warn about every pending conversion (:class:`~parallel_rollouts.ObservationRoundingWarning`)."""
        pending, self.pending = self.pending, []
        for envs, leaf_index, dtype in pending:
            leaf = self._layout.leaves[leaf_index]
            name = leaf.name if self._layout.is_nested else None
            warnings.warn(rounding_message(envs, name, dtype, leaf.dtype), ObservationRoundingWarning, stacklevel=2)
