"""One owner of the arrays rollouts are written into: allocation, reuse and stale-row clearing.

``final_observations`` is the one field that is not rewritten in full by every
rollout: only rows where an episode ended get a value, and every other row must
read as zero. Fresh storage comes from ``np.zeros``, whose pages the kernel maps
lazily, so rows no episode ends in cost nothing. Storage written again has
only the rows the earlier rollout wrote cleared, so the cost follows the
number of episode ends, never the size of the array.

Storage is written again in two cases: ``reuse_buffers=True`` (the caller asked
for it), and a fresh batch whose arrays nobody references any more. A returned
batch is the caller's for as long as the caller (or a policy that kept one of
its rows, or a view of any of its arrays) holds it; once every array is
unreferenced, its memory is recycled for a later batch instead of being
returned to the system and faulted in again page by page, which costs more than
the rollout's copies for image observations.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import fields

import numpy as np

from .storage import RolloutStorage

__all__ = ["BatchMemory"]


#: How many dropped batches are kept for recycling. Two cover a training loop
#: holding the previous batch while the next one is collected.
POOL_SIZE = 2


def _arrays(storage: RolloutStorage) -> list[np.ndarray]:
    arrays = []
    for field in fields(storage):
        value = getattr(storage, field.name)
        if isinstance(value, list):
            arrays.extend(value)
        elif isinstance(value, dict):
            arrays.extend(value.values())
        else:
            arrays.append(value)
    return arrays


class _Recycled:
    """A storage handed out as a fresh batch, and what its final-observation rows hold."""

    def __init__(self, storage: RolloutStorage) -> None:
        self.storage = storage
        self.arrays = _arrays(storage)
        # References to each array that are not the caller's: the storage's own field
        # (or list/dict slot), self.arrays, and getrefcount's argument. Counted by index,
        # here and below, so that no loop variable or iterator holds an extra one.
        self.baseline = [sys.getrefcount(self.arrays[index]) for index in range(len(self.arrays))]
        self.written_rows: np.ndarray | None = None

    def unreferenced(self) -> bool:
        arrays, baseline = self.arrays, self.baseline
        for index in range(len(arrays)):
            if sys.getrefcount(arrays[index]) > baseline[index]:
                return False
        return True


class BatchMemory:
    """Hands out storage for rollouts and keeps its ``final_observations`` clean.

    ``allocate()`` makes new storage whose ``final_observations`` are zero.
    """

    def __init__(self, allocate: Callable[[], RolloutStorage]) -> None:
        self._allocate = allocate
        self._pool: list[_Recycled] = []
        self._reused: RolloutStorage | None = None
        # [T, N] rows of the reused storage's final_observations that may hold values;
        # None while a rollout is writing into it and has not yet said which.
        self._written_rows: np.ndarray | None = None

    def fresh(self) -> RolloutStorage:
        """Storage no batch uses, with zero ``final_observations``: recycled when one is free."""
        for entry in self._pool:
            if entry.unreferenced():
                _clear_final_rows(entry.storage, entry.written_rows)
                entry.written_rows = None
                return entry.storage
        storage = self._allocate()
        entry = _Recycled(storage)
        if len(self._pool) >= POOL_SIZE:
            self._pool.pop(0)  # still the caller's; the garbage collector frees it after them
        self._pool.append(entry)
        return storage

    def reused(self, storage: RolloutStorage | None = None) -> RolloutStorage:
        """The storage every rollout writes into (``storage``, else one kept here), made ready.

        Rows of ``final_observations`` an earlier rollout wrote are zeroed; if that
        rollout was cut off before recording them, the whole field is.
        """
        if storage is None:
            storage = self._reused if self._reused is not None else self._allocate()
        if storage is not self._reused:
            # Never written by a rollout: zero from its allocator.
            self._reused = storage
        else:
            _clear_final_rows(storage, self._written_rows)
        self._written_rows = None
        return storage

    def release(self) -> None:
        """Forget every storage kept here (on close), so that nothing here pins its memory."""
        self.__init__(self._allocate)

    def record_final_rows(self, storage: RolloutStorage, steps: int) -> None:
        """Note the rows of ``storage`` its rollout wrote, after ``steps`` steps.

        One row more than ``steps`` is counted when it exists: a step that ran
        after the caller last counted (an interruption) may have written it.
        """
        rows = min(steps + 1, storage.horizon)
        written = np.zeros_like(storage.terminations)
        np.logical_or(storage.terminations[:rows], storage.truncations[:rows], out=written[:rows])
        if storage is self._reused:
            self._written_rows = written
        for entry in self._pool:
            if entry.storage is storage:
                entry.written_rows = written


def _clear_final_rows(storage: RolloutStorage, written_rows: np.ndarray | None) -> None:
    """Zero the final-observation rows a rollout wrote (all of them when it is not known which)."""
    if written_rows is None:
        for leaf in storage.final_observations:
            leaf.fill(0)
    elif written_rows.any():
        for leaf in storage.final_observations:
            leaf[written_rows] = 0
