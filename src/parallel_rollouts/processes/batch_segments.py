"""Shared segments that rollout workers write a batch into, handed to the caller as it is.

Without them, workers write one working segment and the main process copies it into
the caller's batch: with 84x84x4 frames that copy was 15 ms of a 40 ms collect, done
while both workers idled. With them, each collect is written into a segment of its own
and the batch's arrays are that segment's memory. :class:`~parallel_rollouts.data.batch_memory.BatchMemory`
recycles a segment once the caller holds nothing of its batch, as it recycles private
batches, so a training loop cycles through two segments.

The main process owns every segment; a worker attaches one by name the first time it is
asked to write it and keeps a few (:class:`AttachedSegments`), so one discarded by the
main process is unmapped from the worker later, never written again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from ..data.storage import RolloutStorage
from .shared_memory import SharedStorage

__all__ = ["AttachedSegments", "BatchSegments"]


class BatchSegments:
    """The main process's batch segments: created on demand, named, released.

    ``allocate(allocator, zeroed)`` lays out one rollout's storage (the layout's
    ``allocate_storage``). Calling the object creates a segment, its memory reserved, and
    returns its storage, or ``None`` when the system refuses one (``/dev/shm`` without
    room for it): the collector then falls back to copying out of the working segment.
    """

    def __init__(self, allocate: Callable[..., RolloutStorage], read_only_mirrors: bool = False) -> None:
        self._allocate = allocate
        #: Whether each segment is also mapped read-only, for the policy in this process to read.
        self._read_only_mirrors = read_only_mirrors
        self._segments: dict[int, SharedStorage] = {}

    def __call__(self) -> RolloutStorage | None:
        shared = None
        try:
            # Held by the caller as a batch, perhaps for long: no descriptor may go with it.
            shared = SharedStorage.create_unheld(self._allocate, self._read_only_mirrors)
            self._segments[id(shared.storage)] = shared
        except OSError:
            return None
        except BaseException:
            # Interrupted after the segment was made: release it rather than lose track of it.
            if shared is not None and id(shared.storage) not in self._segments:
                shared.release()
            raise
        return shared.storage

    def name_of(self, storage: RolloutStorage) -> str | None:
        """The segment ``storage`` lives in, or ``None`` if it is not one of these."""
        shared = self._segments.get(id(storage))
        return None if shared is None else shared.name

    def read_only_observations(self, storage: RolloutStorage) -> list[np.ndarray] | None:
        """``storage``'s observations through the segment's read-only mapping, if it has one."""
        shared = self._segments.get(id(storage))
        return None if shared is None else shared.read_only_observations

    def discard(self, storage: RolloutStorage) -> None:
        """Release ``storage``'s segment: its name goes now, its memory with the caller's last view."""
        shared = self._segments.pop(id(storage), None)
        if shared is not None:
            shared.release()

    def release_all(self) -> None:
        for shared in self._segments.values():
            shared.release()
        self._segments.clear()

    def __len__(self) -> int:
        return len(self._segments)


class AttachedSegments:
    """A worker's mappings of batch segments, by name; the least recently written go first.

    ``capacity`` bounds what a worker keeps mapped of segments the main process may have
    discarded since; one evicted and asked for again is attached again.
    """

    def __init__(
        self, allocate: Callable[..., RolloutStorage], columns: tuple[int, int], capacity: int, read_only_mirrors: bool = False
    ) -> None:
        self._allocate = allocate
        self._columns = columns
        self._capacity = capacity
        #: Whether each segment is also mapped read-only, for this worker's policy to read.
        self._read_only_mirrors = read_only_mirrors
        self._attached: OrderedDict[str, tuple[SharedStorage, RolloutStorage, list[np.ndarray] | None]] = OrderedDict()

    def columns(self, name: str) -> RolloutStorage:
        """This worker's columns of segment ``name``."""
        return self._entry(name)[1]

    def read_only_observations(self, name: str) -> list[np.ndarray] | None:
        """This worker's columns of segment ``name``'s observations, through its read-only
        mapping (``None`` without one)."""
        return self._entry(name)[2]

    def _entry(self, name: str) -> tuple[SharedStorage, RolloutStorage, list[np.ndarray] | None]:
        entry = self._attached.get(name)
        if entry is None:
            shared = SharedStorage.attach(name, self._allocate, read_only_mirror=self._read_only_mirrors)
            start, stop = self._columns
            mirror = shared.read_only_observations
            mirror = None if mirror is None else [None if leaf is None else leaf[:, start:stop] for leaf in mirror]
            entry = (shared, shared.storage.columns(start, stop), mirror)
            self._attached[name] = entry
            while len(self._attached) > self._capacity:
                _, (evicted, _, _) = self._attached.popitem(last=False)
                evicted.release()
        else:
            self._attached.move_to_end(name)
        return entry

    def release_all(self) -> None:
        for shared, _, _ in self._attached.values():
            shared.release()
        self._attached.clear()
