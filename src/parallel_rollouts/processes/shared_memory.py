"""Rollout storage laid out in one shared-memory segment.

The main process creates the segment and is its only owner: it unlinks it on
``close()``, and Python's resource tracker unlinks it if the main process dies
first. Workers attach by name *without* registering with the resource tracker
(registering from a worker would make the tracker unlink, or warn about, a
segment the worker does not own).

Both sides lay the storage out with :func:`carve`, the same deterministic
sequence of 64-byte-aligned offsets, so the arrays line up without sending
any layout across.
"""

from __future__ import annotations

import errno
import os
import secrets
from multiprocessing import resource_tracker, shared_memory
from typing import Callable

import numpy as np

from ..data.mappings import MAPPING_AVAILABLE, map_shared
from ..data.read_only_mirror import mirrors_leaf
from ..data.storage import RolloutStorage

__all__ = ["SEGMENT_PREFIX", "SharedStorage", "attach_segment", "create_segment", "release_segment"]

SEGMENT_PREFIX = "prl"
_ALIGNMENT = 64


class _Carver:
    """An allocator handing out aligned arrays from one buffer (or only counting, without one)."""

    def __init__(self, buffer: memoryview | np.ndarray | None) -> None:
        # np.frombuffer keeps the buffer exported for as long as any view of it lives,
        # so the segment cannot be unmapped under an array someone still holds (closing
        # then raises BufferError and the mapping lives on until the last view is freed).
        # A Mapping's array (data.mappings) keeps the mapping itself alive in the same way.
        if buffer is None or isinstance(buffer, np.ndarray):
            self.base = buffer
        else:
            self.base = np.frombuffer(buffer, dtype=np.uint8)
        self.offset = 0

    def __call__(self, shape, dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        shape = tuple(int(n) for n in shape)
        start = -(-self.offset // _ALIGNMENT) * _ALIGNMENT
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        self.offset = start + nbytes
        if self.base is None:
            # Only counting: a right-shaped placeholder that occupies no memory.
            return np.broadcast_to(np.zeros((), dtype=dtype), shape)
        return self.base[start : start + nbytes].view(dtype).reshape(shape)


def carve(
    allocate: Callable[..., RolloutStorage], segment: shared_memory.SharedMemory | np.ndarray | None
) -> tuple[RolloutStorage, int]:
    """Lay out storage with ``allocate(allocator, zeroed)`` over a segment's memory (an array
    of it, or ``None`` only to count); return it and the bytes it spans."""
    buffer = segment.buf if isinstance(segment, shared_memory.SharedMemory) else segment
    carver = _Carver(buffer)
    storage = allocate(carver, carver)
    return storage, carver.offset


class _Segment(shared_memory.SharedMemory):
    """A segment whose ``close`` leaves the mapping to outstanding arrays instead of failing.

    Every storage array is a view of one ``np.frombuffer`` array, which holds a buffer
    export on the mapping. While any of them lives, ``mmap.close`` refuses (BufferError)
    and the mapping stays valid; it is unmapped when the last view is freed. Closing
    never pulls memory out from under an array someone still holds.
    """

    def close(self) -> None:
        try:
            super().close()
        except BufferError:
            self._mmap = None  # the arrays' buffer exports keep the mapping alive


def _drop_descriptor(segment: shared_memory.SharedMemory) -> None:
    """Close the segment's file descriptor now: the mapping does not need it.

    Otherwise a mapping kept alive by a caller's array would keep a descriptor
    open as well. (``_fd`` is where CPython's POSIX implementation keeps it.)
    """
    descriptor = getattr(segment, "_fd", -1)
    if isinstance(descriptor, int) and descriptor >= 0:
        os.close(descriptor)
        segment._fd = -1


class SharedStorage:
    """A :class:`RolloutStorage` whose arrays live in one shared-memory segment."""

    def __init__(
        self, segment: shared_memory.SharedMemory, storage: RolloutStorage, owner: bool, extra: np.ndarray | None = None
    ) -> None:
        self.segment = segment
        self.storage: RolloutStorage | None = storage
        self.owner = owner
        #: The ``extra_bytes`` asked for after the storage (uint8), or ``None``.
        self.extra = extra
        #: The storage's observation leaves through a second, read-only mapping of the segment
        #: (what a policy reads, :mod:`~parallel_rollouts.data.read_only_mirror`); ``None`` unless
        #: asked for and possible.
        self.read_only_observations: list[np.ndarray] | None = None

    @property
    def name(self) -> str:
        return self.segment.name

    @classmethod
    def create(cls, allocate: Callable[..., RolloutStorage], extra_bytes: int = 0) -> SharedStorage:
        """A new segment holding the storage ``allocate`` lays out, and ``extra_bytes`` more
        after it (64-byte aligned; the worker pool keeps its step doorbells there)."""
        _, size = carve(allocate, None)
        segment = create_segment(_extra_offset(size) + extra_bytes if extra_bytes else size)
        storage, _ = carve(allocate, segment)
        return cls(segment, storage, owner=True, extra=_extra_of(segment, size, extra_bytes))

    @classmethod
    def create_unheld(cls, allocate: Callable[..., RolloutStorage], read_only_mirror: bool = False) -> SharedStorage:
        """Like :meth:`create`, but the arrays hold no file descriptor (:mod:`~parallel_rollouts.data.mappings`).

        For storage handed to the caller as a batch, which may keep it indefinitely. Where
        the C library's ``mmap`` is not reachable (Windows), the same as :meth:`create`.
        With ``read_only_mirror``, :attr:`read_only_observations` as well.
        """
        if not MAPPING_AVAILABLE:
            return cls.create(allocate)
        _, size = carve(allocate, None)
        segment = _Segment(name=_new_name(), create=True, size=max(size, 1))
        try:
            _reserve(segment)
            mapping = map_shared(segment._fd, segment.size)
            mirror = _read_only_observations(segment, allocate) if read_only_mirror else None
            segment.close()  # its own mapping and descriptor: nothing views them
            storage, _ = carve(allocate, mapping)
            shared = cls(segment, storage, owner=True)
            shared.read_only_observations = mirror
            return shared
        except BaseException:
            # An interruption as well: the name must not outlive this call unowned.
            release_segment(segment, owner=True)
            raise

    @classmethod
    def attach(
        cls, name: str, allocate: Callable[..., RolloutStorage], extra_bytes: int = 0, read_only_mirror: bool = False
    ) -> SharedStorage:
        """Map segment ``name`` (created by another process); with ``read_only_mirror``,
        :attr:`read_only_observations` as well."""
        segment = _attach_untracked(name)
        try:
            mirror = _read_only_observations(segment, allocate) if read_only_mirror else None
        finally:
            _drop_descriptor(segment)
        storage, size = carve(allocate, segment)
        shared = cls(segment, storage, owner=False, extra=_extra_of(segment, size, extra_bytes))
        shared.read_only_observations = mirror
        return shared

    def release(self) -> None:
        """Drop this process's mapping; the owner also removes the segment's name."""
        self.storage = None
        self.extra = None
        self.read_only_observations = None
        # If a caller still holds a view (a reused batch, an observation row a policy
        # kept, a traceback's frame), the mapping lives until that view is freed (see
        # _Segment); the name goes now either way.
        release_segment(self.segment, self.owner)
        self.owner = False


def _read_only_observations(segment: shared_memory.SharedMemory, allocate: Callable[..., RolloutStorage]) -> list[np.ndarray] | None:
    """The observation leaves of the storage ``allocate`` lays out in ``segment``, through a
    read-only mapping of it made while its descriptor is open; ``None`` where none can be made."""
    descriptor = getattr(segment, "_fd", -1)
    if not MAPPING_AVAILABLE or not isinstance(descriptor, int) or descriptor < 0:
        return None
    try:
        read_only = map_shared(descriptor, segment.size, writable=False)
    except OSError:
        return None
    storage, _ = carve(allocate, read_only)
    mirror = [leaf if mirrors_leaf(leaf) else None for leaf in storage.observations]
    return None if all(leaf is None for leaf in mirror) else mirror


def _extra_offset(storage_bytes: int) -> int:
    return -(-storage_bytes // _ALIGNMENT) * _ALIGNMENT


def _extra_of(segment: shared_memory.SharedMemory, storage_bytes: int, extra_bytes: int) -> np.ndarray | None:
    """The ``extra_bytes`` after the storage's ``storage_bytes`` in ``segment``, as uint8 (``None`` for none)."""
    if not extra_bytes:
        return None
    start = _extra_offset(storage_bytes)
    return np.frombuffer(segment.buf, dtype=np.uint8, count=extra_bytes, offset=start)


def _attach_untracked(name: str) -> shared_memory.SharedMemory:
    # Python < 3.13 registers every attach with the resource tracker, which then
    # unlinks the segment (or warns) when this non-owning process exits.
    original = resource_tracker.register

    def skip_shared_memory(resource_name: str, resource_type: str) -> None:
        if resource_type != "shared_memory":
            original(resource_name, resource_type)

    resource_tracker.register = skip_shared_memory
    try:
        return _Segment(name=name, create=False)
    finally:
        resource_tracker.register = original


def create_segment(size: int) -> shared_memory.SharedMemory:
    """A new segment of ``size`` bytes named with this library's prefix, owned by this process."""
    segment = _Segment(name=_new_name(), create=True, size=max(size, 1))
    try:
        _reserve(segment)
    except BaseException:
        release_segment(segment, owner=True)
        raise
    _drop_descriptor(segment)
    return segment


def _reserve(segment: shared_memory.SharedMemory) -> None:
    """Allocate the segment's memory now, so that a full ``/dev/shm`` refuses it here.

    Creating a segment only sets its size. Without this, a ``/dev/shm`` too full for it
    is found by the first write to a page that cannot be allocated: a SIGBUS that kills
    whichever process writes (a worker, or this one). Reserved, it is an ``OSError``
    (ENOSPC) now: the collector refuses to start, or writes a batch through its working
    segment instead of a segment of its own. Where the call does not exist (macOS,
    Windows) or the file system cannot do it, the segment is left as it was.
    """
    reserve = getattr(os, "posix_fallocate", None)
    descriptor = getattr(segment, "_fd", -1)
    if reserve is None or not isinstance(descriptor, int) or descriptor < 0:
        return
    try:
        reserve(descriptor, 0, segment.size)
    except OSError as error:
        if error.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            return
        raise OSError(
            error.errno,
            f"shared memory (/dev/shm) has no room for a {segment.size / 2**20:.1f} MiB segment of rollout "
            f"storage: {os.strerror(error.errno)}. Free some, give the container a larger /dev/shm "
            "(e.g. `docker run --shm-size=2g`), or collect fewer envs or a shorter horizon per collector.",
        ) from None


def _new_name() -> str:
    return f"{SEGMENT_PREFIX}{os.getpid()}_{secrets.token_hex(4)}"


def attach_segment(name: str) -> shared_memory.SharedMemory:
    """Map an existing segment without taking ownership of it."""
    segment = _attach_untracked(name)
    _drop_descriptor(segment)
    return segment


def release_segment(segment: shared_memory.SharedMemory, owner: bool) -> None:
    """Drop this process's mapping; the owner also removes the name."""
    segment.close()
    if owner:
        try:
            segment.unlink()
        except FileNotFoundError:
            pass
