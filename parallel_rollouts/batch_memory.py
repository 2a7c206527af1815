"""The one owner of batch memory: where a rollout is written, and what a batch hands out.

Every runner asks this object, and only this object, for storage:

- ``begin()`` gives the storage the rollout is written into: a fresh allocation, the
  same arrays again (``reuse_buffers=True``), or a shared-memory working copy that
  worker processes write into;
- ``finish()`` gives the storage the batch is built from: the same arrays, or a private
  copy of the working storage;
- ``abandon(rows_done)`` records a dropped rollout.

Reused arrays keep terminal observations of earlier rollouts (finished or dropped);
this object remembers where they were written and clears exactly those entries before
the arrays are handed out again, so a batch never shows a stale terminal observation.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .storage import RolloutStorage

__all__ = ["BatchMemory"]


class BatchMemory:
    """Allocation, reuse, copy-out and clearing of one collector's rollout storage.

    Parameters
    ----------
    allocate:
        ``allocate(allocator=np.empty, zeroed=np.zeros) -> RolloutStorage`` with the
        collector's layout (``final_observations`` come from ``zeroed``).
    reuse_buffers:
        Hand out the same arrays on every collect instead of new ones.
    working:
        Storage that the rollout is always written into (shared memory that worker
        processes write); ``None`` when the rollout is written straight into the
        batch's arrays.
    """

    def __init__(
        self,
        allocate: Callable[..., RolloutStorage],
        reuse_buffers: bool,
        working: RolloutStorage | None = None,
    ) -> None:
        self._allocate = allocate
        self._reuse = bool(reuse_buffers)
        self._working = working
        self._current: RolloutStorage | None = None
        # [T, N] entries of the reused arrays where a terminal observation was written.
        self._stale_final_rows: np.ndarray | None = None

    @property
    def _hands_out_written_arrays(self) -> bool:
        """Whether the batch's arrays are the arrays the rollout was written into."""
        return self._working is None or self._reuse

    def begin(self) -> RolloutStorage:
        """The storage to write this rollout into (terminal observations of earlier ones cleared)."""
        if self._working is not None:
            storage = self._working
        elif self._reuse and self._current is not None:
            storage = self._current
        else:
            storage = self._allocate()
        if self._hands_out_written_arrays and self._stale_final_rows is not None:
            for leaf in storage.final_observations:
                leaf[self._stale_final_rows] = 0
            self._stale_final_rows = None
        self._current = storage
        return storage

    def finish(self) -> RolloutStorage:
        """The storage the batch is built from; every row of ``begin()``'s storage is written."""
        storage = self._current
        if self._hands_out_written_arrays:
            if self._reuse:
                self._remember_final_rows(storage, storage.horizon)
            return storage
        target = self._allocate()
        storage.copy_to(target)  # the one copy per rollout
        return target

    def abandon(self, rows_done: int) -> None:
        """The rollout was dropped after ``rows_done`` rows; remember what it left behind."""
        if self._hands_out_written_arrays and self._reuse and self._current is not None:
            self._remember_final_rows(self._current, rows_done)

    def lose_columns(self, start: int, stop: int) -> None:
        """Columns ``start:stop`` of this rollout hold no valid data: zero them."""
        for array in _arrays(self._current.columns(start, stop)):
            array.fill(0)

    def release(self) -> None:
        """Forget every array (on close: shared working storage must not outlive its pool)."""
        self._working = self._current = self._stale_final_rows = None

    def _remember_final_rows(self, storage: RolloutStorage, rows: int) -> None:
        ended = storage.terminations[:rows] | storage.truncations[:rows]
        if self._stale_final_rows is None:
            self._stale_final_rows = np.zeros_like(storage.terminations)
        self._stale_final_rows[:rows] |= ended


def _arrays(storage: RolloutStorage) -> list[np.ndarray]:
    found: list[np.ndarray] = []
    storage.map(lambda array: found.append(array) or array)
    return found
