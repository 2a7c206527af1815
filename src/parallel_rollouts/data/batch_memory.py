"""The one owner of batch memory: where a rollout is written, and what a batch hands out.

Every runner asks this object, and only this object, for storage:

- ``begin()`` gives the storage the rollout is written into: a fresh allocation, a
  shared segment of its own that worker processes write and that becomes the batch
  as it is, the same arrays again (``reuse_buffers=True``), or, when the system
  refuses a segment, a shared working copy that workers write into;
- ``policy_rows(t, start, stop)`` gives the observation rows the policy is called with
  (:mod:`~parallel_rollouts.data.policy_inputs`): rows of a read-only mapping of the batch's
  observations, which no write reaches (``"protected"``), private read-only copies
  (``"copies"``, and ``"protected"`` where no mapping could be made), or read-only views of
  the batch's rows (``"views"``); rows of a working copy are copied into the batch first;
- ``finish()`` gives the storage the batch is built from: the same arrays, or the
  caller's private copy of the working storage;
- ``abandon(rows_done)`` records a dropped rollout.

``final_observations`` is the one field that is not rewritten in full by every
rollout: only rows where an episode ended get a value, and every other row must
read as zero. Fresh private storage takes it from
:func:`~parallel_rollouts.data.sparse_memory.sparse_zeros`, whose pages the kernel
maps lazily, so rows no episode ends in cost nothing (a shared segment is
reserved, zeroed, when it is created). Storage written again has only the rows the earlier
rollout wrote cleared, so the cost follows the number of episode ends, never
the size of the array.

Storage is written again in two cases: ``reuse_buffers=True`` (the caller asked
for it), and a fresh batch whose arrays nobody references any more. A returned
batch is the caller's for as long as the caller (or a view of any of its
arrays) holds it; a row the policy kept holds it too (a row of its read-only mirror, or a
view), and a copy holds nothing of it. Once
every array is unreferenced, its memory is recycled for a later batch instead
of being returned to the system and faulted in again page by page, which costs
more than the rollout's copies for image observations.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import fields
from typing import Protocol

import numpy as np

from .policy_inputs import mirror_rows_of, policy_rows_of
from .read_only_mirror import mirrored_empty, mirrors_leaf
from .storage import RolloutStorage

__all__ = ["BatchMemory", "SegmentSource"]


class SegmentSource(Protocol):
    """Shared segments a batch can be written into (``processes.batch_segments.BatchSegments``
    implements it; this floor names only what it calls)."""

    def __call__(self) -> RolloutStorage | None:
        """A new segment's storage, or ``None`` when no more may be created."""

    def name_of(self, storage: RolloutStorage) -> str | None:
        """The name of the segment behind ``storage``."""

    def read_only_observations(self, storage: RolloutStorage) -> list[np.ndarray] | None:
        """``storage``'s observations through a read-only mapping of its segment, if it has one."""

    def discard(self, storage: RolloutStorage) -> None:
        """Unlink and unmap the segment behind ``storage``."""

    def release_all(self) -> None:
        """Unlink and unmap every segment."""

#: How many dropped batches are kept for recycling by default. Two cover a training loop
#: holding the previous batch while the next one is collected; ``max_policy_lag=1`` asks for
#: three (the batch held, the one being handed out, the next one in flight).
POOL_SIZE = 2


def _arrays(storage: RolloutStorage) -> list[np.ndarray]:
    """Every array of ``storage``, and every array their memory belongs to.

    A view's ``base`` is the array that owns the memory, or the first one down the chain
    that wraps a foreign buffer (a shared segment's, a mapping's), never the view it was
    taken from: a caller's view of a storage array made from such a buffer references
    that root array, not the storage's. So the roots are watched as well.
    """
    arrays = []
    for field in fields(storage):
        value = getattr(storage, field.name)
        if isinstance(value, list):
            arrays.extend(value)
        elif isinstance(value, dict):
            arrays.extend(value.values())
        else:
            arrays.append(value)
    return arrays + _roots(arrays, exclude=arrays)


def _roots(arrays: list[np.ndarray], exclude: list[np.ndarray] = ()) -> list[np.ndarray]:
    """``arrays`` (unless excluded) and, once each, the arrays their memory belongs to."""
    seen = {id(array) for array in exclude}
    roots = []
    for array in arrays:
        root = array
        while isinstance(root.base, np.ndarray):
            root = root.base
        for candidate in (array, root):
            if id(candidate) not in seen:
                seen.add(id(candidate))
                roots.append(candidate)
    return roots


class _Recycled:
    """A storage handed out as a fresh batch, its read-only mirror (or ``None``), and what its
    final-observation rows hold."""

    def __init__(self, storage: RolloutStorage, mirror: list[np.ndarray] | None = None) -> None:
        self.storage = storage
        self.mirror = mirror
        # A row of the mirror that the policy kept holds the storage as any view of it would.
        self.arrays = _arrays(storage) + _roots([leaf for leaf in mirror or () if leaf is not None])
        # References to each array that are not the caller's: the storage's own field
        # (or list/dict slot), self.arrays, and getrefcount's argument. Counted by index,
        # here and below, so that no loop variable or iterator holds an extra one.
        self.baseline = [sys.getrefcount(self.arrays[index]) for index in range(len(self.arrays))]
        self.written_rows: _WrittenFinalRows | None = None

    def unreferenced(self) -> bool:
        arrays, baseline = self.arrays, self.baseline
        for index in range(len(arrays)):
            if sys.getrefcount(arrays[index]) > baseline[index]:
                return False
        return True


class BatchMemory:
    """Allocation, reuse, copy-out and clearing of one collector's rollout storage.

    Parameters
    ----------
    allocate:
        ``allocate() -> RolloutStorage`` with the collector's layout, whose
        ``final_observations`` are zero.
    reuse_buffers:
        Hand out the same arrays on every collect instead of new ones.
    working:
        Storage that the rollout is written into when it is not written straight into
        the batch's arrays (shared memory that worker processes write); ``None`` when
        it always is.
    segments:
        Shared segments to write each fresh batch into instead of ``working``, so that
        nothing is copied out (rollout workers); ``working`` stays the fallback when
        the system refuses a segment.
    """

    def __init__(
        self,
        allocate: Callable[[], RolloutStorage],
        reuse_buffers: bool,
        working: RolloutStorage | None = None,
        segments: SegmentSource | None = None,
        pool_size: int = POOL_SIZE,
        policy_inputs: str = "protected",
    ) -> None:
        self._allocate = allocate
        #: What :meth:`policy_rows` hands out (:data:`~parallel_rollouts.data.policy_inputs.POLICY_INPUTS`).
        self._policy_inputs = policy_inputs
        #: The read-only mirror of the observations the policy reads this rollout (``"protected"``;
        #: ``None`` where the storage has none, and the rows are copied instead).
        self._policy_mirror: list[np.ndarray] | None = None
        #: The mirror of the storage handed out again and again (``reuse_buffers=True``).
        self._reused_mirror: list[np.ndarray] | None = None
        self._pool_size = pool_size
        self._reuse = bool(reuse_buffers)
        self._working = working
        self._segments = segments
        #: Fresh batches written straight into shared segments, recycled like ``_pool``'s.
        self._segment_pool: list[_Recycled] = []
        #: The storage the current rollout writes into.
        self._written: RolloutStorage | None = None
        #: The caller's batch when the rollout is written into a working copy.
        self._target: RolloutStorage | None = None
        #: Per row of the target: how many env columns the policy feed already copied.
        self._fed_columns: np.ndarray | None = None
        #: Storage handed out again and again (``reuse_buffers=True``).
        self._reused: RolloutStorage | None = None
        #: Fresh batches handed out, recycled once the caller has dropped them.
        self._pool: list[_Recycled] = []
        # Which rows of the reused storage's final_observations may hold values; None
        # while a rollout is writing into it and has not yet said which.
        self._written_rows: _WrittenFinalRows | None = None

    @property
    def reuses_buffers(self) -> bool:
        return self._reuse

    # -- one rollout -------------------------------------------------------------------

    def begin(self) -> RolloutStorage:
        """The storage to write this rollout into, ready (terminal observations of earlier ones cleared)."""
        self._target = self._fed_columns = None
        if self._reuse:
            storage = self._prepare_reused(self._working if self._working is not None else self._reused)
        elif self._working is not None and (storage := self._fresh_segment()) is not None:
            pass  # written in place by the workers: the batch is the segment itself
        elif self._working is not None:
            storage = self._working
            # The working copy's stale terminal rows never reach the caller: finish() copies
            # only the rows where an episode ended in this rollout into fresh zeroed arrays.
            self._target = self._fresh()
            self._fed_columns = np.zeros(storage.horizon + 1, dtype=np.int64)
        else:
            storage = self._fresh()
        # The per-env timings are sums over one rollout: the groups add, this starts them at zero.
        storage.env_step_seconds.fill(0)
        storage.env_reset_seconds.fill(0)
        self._written = storage
        self._policy_mirror = self._mirror_of(self._target if self._target is not None else storage)
        return storage

    def segment_name(self) -> str:
        """The batch segment this rollout is written into; ``""`` for the working storage."""
        if self._segments is None or self._written is None:
            return ""
        return self._segments.name_of(self._written) or ""

    def policy_rows(self, t: int, start: int = 0, stop: int | None = None) -> list[np.ndarray]:
        """Row ``t`` of every observation leaf for env columns ``start:stop``, as the policy gets it.

        With ``policy_inputs="protected"`` the rows of each large leaf are the batch's, through
        its read-only mapping, and the rows of a small one read-only copies: nothing the policy
        does to them (NumPy or PyTorch) reaches the batch. With ``"copies"`` every row is a
        copy, which never changes; with ``"views"`` they are read-only views of the batch's rows.
        """
        if self._target is not None:
            stop = self._written.rewards.shape[1] if stop is None else stop
            for source, destination in zip(self._written.observations, self._target.observations):
                np.copyto(destination[t, start:stop], source[t, start:stop])
            self._fed_columns[t] += stop - start
            observations = self._target.observations
        else:
            observations = self._written.observations
        if self._policy_mirror is not None:
            # Rows of the read-only mapping are read-only all the way down: no copy needed.
            return mirror_rows_of(self._policy_mirror, observations, t, start, stop)
        return policy_rows_of(observations, t, start, stop, copies=self._policy_inputs != "views")

    def finish(self, lost_from_rows: np.ndarray | None = None) -> RolloutStorage:
        """The storage the batch is built from; every row of ``begin()``'s storage is written.

        ``lost_from_rows[env]`` (``[N]``, ``horizon`` where nothing is lost): from that row on,
        the env's rows hold no valid data (its worker was lost); every field of them is
        zeroed, the observation of that row included (``-1``: the whole column is lost).
        """
        storage = self._written
        self.record_final_rows(storage.horizon)
        if self._target is None:
            _clear_lost_rows(storage, lost_from_rows)
            return storage
        target, self._target = self._target, None
        num_envs = storage.rewards.shape[1]
        fed = self._fed_columns[: storage.horizon] == num_envs
        rows_copied = int(np.argmin(fed)) if not fed.all() else storage.horizon
        storage.copy_to(target, observation_rows_copied=rows_copied)  # the rest of the one copy
        self._note_written_rows(target, _ended_rows(target, target.horizon))
        _clear_lost_rows(target, lost_from_rows)
        return target

    def abandon(self, rows_done: int) -> None:
        """The rollout was dropped after ``rows_done`` rows; remember what it left behind."""
        self.record_final_rows(rows_done)
        if self._target is not None:
            # Terminal observations reach the caller's batch only in finish(): none were written.
            self._note_written_rows(self._target, _WrittenFinalRows(False, None))
        self._target = None

    def record_final_rows(self, steps: int) -> None:
        """Note the rows of reused storage the rollout wrote, after ``steps`` steps.

        One row more than ``steps`` is counted when it exists: a step that ran after the
        caller last counted (an interruption) may have written it.
        """
        storage = self._written
        if storage is not None:
            self._note_written_rows(storage, _ended_rows(storage, min(steps + 1, storage.horizon)))

    def release(self) -> None:
        """Forget every array (on close: shared working storage must not outlive its pool)."""
        self._working = self._written = self._target = self._reused = None
        self._fed_columns = self._written_rows = None
        self._pool = []
        self._segment_pool = []
        self._policy_mirror = self._reused_mirror = None
        if self._segments is not None:
            self._segments.release_all()

    # -- helpers ------------------------------------------------------------------------

    def _fresh(self) -> RolloutStorage:
        """Storage no batch uses, with zero ``final_observations``: recycled when one is free."""
        storage = _recycled(self._pool)
        if storage is None:
            storage, mirror = self._allocate_mirrored()
            if len(self._pool) >= self._pool_size:
                self._pool.pop(0)  # still the caller's; the garbage collector frees it after them
            self._pool.append(_Recycled(storage, mirror))
        return storage

    def _allocate_mirrored(self) -> tuple[RolloutStorage, list[np.ndarray | None] | None]:
        """New storage and, with ``policy_inputs="protected"``, the read-only mirror of its
        observations (:mod:`~parallel_rollouts.data.read_only_mirror`): per leaf, ``None`` where
        the leaf's rows are small or the system cannot map memory twice (the policy's rows of it
        are copied instead); ``None`` for the whole when no leaf has one."""
        storage = self._allocate()
        if self._policy_inputs != "protected":
            return storage, None
        pairs = [mirrored_empty(leaf.shape, leaf.dtype) if mirrors_leaf(leaf) else None for leaf in storage.observations]
        if all(pair is None for pair in pairs):
            return storage, None
        for index, pair in enumerate(pairs):
            if pair is not None:
                # The same shape and dtype the storage was checked with, in memory mapped twice.
                storage.observations[index] = pair[0]
        return storage, [None if pair is None else pair[1] for pair in pairs]

    def _mirror_of(self, storage: RolloutStorage) -> list[np.ndarray] | None:
        """The read-only mirror of ``storage``'s observations, if it has one."""
        if storage is self._reused:
            return self._reused_mirror
        for entry in self._pool:
            if entry.storage is storage:
                return entry.mirror
        if self._segments is not None and self._policy_inputs == "protected":
            return self._segments.read_only_observations(storage)
        return None

    def _fresh_segment(self) -> RolloutStorage | None:
        """A batch segment no batch uses, recycled or new; ``None`` without segments or when refused."""
        if self._segments is None:
            return None
        storage = _recycled(self._segment_pool)
        if storage is None:
            storage = self._segments()
            if storage is None:
                return None
            if len(self._segment_pool) >= self._pool_size:
                # Still the caller's: its name goes now, its memory with their last view.
                self._segments.discard(self._segment_pool.pop(0).storage)
            mirror = self._segments.read_only_observations(storage) if self._policy_inputs == "protected" else None
            self._segment_pool.append(_Recycled(storage, mirror))
        return storage

    def _note_written_rows(self, storage: RolloutStorage, written: _WrittenFinalRows) -> None:
        if storage is self._reused:
            self._written_rows = written
        for entry in self._pool + self._segment_pool:
            if entry.storage is storage:
                entry.written_rows = written

    def _prepare_reused(self, storage: RolloutStorage | None) -> RolloutStorage:
        """The storage every rollout writes into (``storage``, else a new one), made ready.

        Rows of ``final_observations`` an earlier rollout wrote are zeroed; if that rollout
        was cut off before recording them, the whole field is.
        """
        if storage is None:
            storage, self._reused_mirror = self._allocate_mirrored()
        if storage is not self._reused:
            # Never written by a rollout: zero from its allocator.
            self._reused = storage
        else:
            _clear_final_rows(storage, self._written_rows)
        self._written_rows = None
        return storage


def _recycled(pool: list[_Recycled]) -> RolloutStorage | None:
    """The first storage of ``pool`` nobody references, made ready (terminal rows cleared)."""
    for entry in pool:
        if entry.unreferenced():
            _clear_final_rows(entry.storage, entry.written_rows)
            entry.written_rows = None
            return entry.storage
    return None


#: Fields that are sums over the rollout, not rows: a lost env keeps what was measured.
_TOTALS = ("env_step_seconds", "env_reset_seconds")


def _clear_lost_rows(storage: RolloutStorage, lost_from_rows: np.ndarray | None) -> None:
    """Zero every field of each env's rows from ``lost_from_rows[env]`` on, the bootstrap row
    included: the batch contract promises zeros, not what a lost worker left half-written."""
    if lost_from_rows is None:
        return
    for column in np.flatnonzero(lost_from_rows < storage.horizon).tolist():
        first = max(int(lost_from_rows[column]), 0)
        for field in fields(storage):
            if field.name in _TOTALS:
                continue
            for array in _field_arrays(getattr(storage, field.name)):
                array[first:, column] = 0


def _field_arrays(value) -> list[np.ndarray]:
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        return list(value.values())
    return [value]


class _WrittenFinalRows:
    """Which ``final_observations`` rows a rollout may have written: whether any, and where
    (a ``[T, N]`` mask) only when a leaf's rows are big enough to be cleared one by one."""

    def __init__(self, any_written: bool, mask: np.ndarray | None) -> None:
        self.any = any_written
        self.mask = mask


def _ended_rows(storage: RolloutStorage, rows: int) -> _WrittenFinalRows:
    """Where an episode ended in the first ``rows`` rows."""
    terminations, truncations = storage.terminations[:rows], storage.truncations[:rows]
    if not (terminations.any() or truncations.any()):
        return _WrittenFinalRows(False, None)
    if all(_clears_whole(leaf) for leaf in storage.final_observations):
        return _WrittenFinalRows(True, None)  # no [T, N] mask to build: every leaf is zeroed whole
    written = np.zeros_like(storage.terminations)
    np.logical_or(terminations, truncations, out=written[:rows])
    return _WrittenFinalRows(True, written)


def _clears_whole(leaf: np.ndarray) -> bool:
    # Small rows (CartPole's 16 bytes): zeroing the whole leaf costs less than selecting rows
    # by a [T, N] mask (60 against 370 µs at T=128, N=1024).
    rows = leaf.shape[0] * leaf.shape[1]
    return leaf.nbytes <= _FILL_BYTES_PER_ROW * rows


def _clear_final_rows(storage: RolloutStorage, written: _WrittenFinalRows | None) -> None:
    """Zero the final-observation rows a rollout wrote (all of them when it is not known which)."""
    if written is None:
        for leaf in storage.final_observations:
            leaf.fill(0)
    elif written.any:
        for leaf in storage.final_observations:
            if _clears_whole(leaf):
                leaf.fill(0)
            else:
                leaf[written.mask] = 0


#: Below this many bytes per ``[t, env]`` row, :func:`_clear_final_rows` zeroes a whole leaf.
_FILL_BYTES_PER_ROW = 64
