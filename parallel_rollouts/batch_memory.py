"""One owner of the arrays rollouts are written into: allocation, reuse and stale-row clearing.

``final_observations`` is the one field that is not rewritten in full by every
rollout: only rows where an episode ended get a value, and every other row must
read as zero. Fresh storage comes from ``np.zeros``, whose pages the kernel maps
lazily, so rows no episode ends in cost nothing. Storage written again (with
``reuse_buffers=True``) has only the rows the earlier rollout wrote cleared,
so the cost follows the number of episode ends, never the size of the array.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .storage import RolloutStorage

__all__ = ["BatchMemory"]


class BatchMemory:
    """Hands out storage for rollouts and keeps its ``final_observations`` clean.

    ``allocate()`` makes new storage whose ``final_observations`` are zero.
    """

    def __init__(self, allocate: Callable[[], RolloutStorage]) -> None:
        self._allocate = allocate
        self._reused: RolloutStorage | None = None
        # [T, N] rows of the reused storage's final_observations that may hold values;
        # None while a rollout is writing into it and has not yet said which.
        self._written_rows: np.ndarray | None = None

    def fresh(self) -> RolloutStorage:
        """Storage no batch uses, with zero ``final_observations``."""
        return self._allocate()

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
        elif self._written_rows is None:
            for leaf in storage.final_observations:
                leaf.fill(0)
        elif self._written_rows.any():
            for leaf in storage.final_observations:
                leaf[self._written_rows] = 0
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
        if storage is not self._reused:
            return
        rows = min(steps + 1, storage.horizon)
        written = np.zeros_like(storage.terminations)
        np.logical_or(storage.terminations[:rows], storage.truncations[:rows], out=written[:rows])
        self._written_rows = written
