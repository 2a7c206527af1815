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

import os
import secrets
from multiprocessing import resource_tracker, shared_memory
from typing import Callable

import numpy as np

from ..storage import RolloutStorage

__all__ = ["SEGMENT_PREFIX", "SharedStorage"]

SEGMENT_PREFIX = "prl"
_ALIGNMENT = 64


class _Carver:
    """An allocator handing out aligned arrays from one buffer (or only counting, without one)."""

    def __init__(self, buffer: memoryview | None) -> None:
        self.buffer = buffer
        self.offset = 0

    def __call__(self, shape, dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        shape = tuple(int(n) for n in shape)
        start = -(-self.offset // _ALIGNMENT) * _ALIGNMENT
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        self.offset = start + nbytes
        if self.buffer is None:
            return np.empty((0,) * len(shape), dtype=dtype)
        return np.ndarray(shape, dtype=dtype, buffer=self.buffer, offset=start)


def carve(allocate: Callable[..., RolloutStorage], buffer: memoryview | None) -> tuple[RolloutStorage, int]:
    """Lay out storage with ``allocate(allocator, zeroed)``; return it and the bytes it spans."""
    carver = _Carver(buffer)
    storage = allocate(carver, carver)
    return storage, carver.offset


class SharedStorage:
    """A :class:`RolloutStorage` whose arrays live in one shared-memory segment."""

    def __init__(self, segment: shared_memory.SharedMemory, storage: RolloutStorage, owner: bool) -> None:
        self.segment = segment
        self.storage: RolloutStorage | None = storage
        self.owner = owner

    @property
    def name(self) -> str:
        return self.segment.name

    @classmethod
    def create(cls, allocate: Callable[..., RolloutStorage]) -> SharedStorage:
        _, size = carve(allocate, None)
        name = f"{SEGMENT_PREFIX}{os.getpid()}_{secrets.token_hex(4)}"
        segment = shared_memory.SharedMemory(name=name, create=True, size=max(size, 1))
        storage, _ = carve(allocate, segment.buf)
        return cls(segment, storage, owner=True)

    @classmethod
    def attach(cls, name: str, allocate: Callable[..., RolloutStorage]) -> SharedStorage:
        segment = _attach_untracked(name)
        storage, _ = carve(allocate, segment.buf)
        return cls(segment, storage, owner=False)

    def release(self) -> None:
        """Drop this process's mapping; the owner also removes the segment's name."""
        self.storage = None
        try:
            self.segment.close()
        except BufferError:
            # A caller still holds a view (e.g. a policy kept an observation row).
            # The mapping then lives until that view is freed; the name goes now.
            pass
        if self.owner:
            try:
                self.segment.unlink()
            except FileNotFoundError:
                pass
            self.owner = False


def _attach_untracked(name: str) -> shared_memory.SharedMemory:
    # Python < 3.13 registers every attach with the resource tracker, which then
    # unlinks the segment (or warns) when this non-owning process exits.
    original = resource_tracker.register

    def skip_shared_memory(resource_name: str, resource_type: str) -> None:
        if resource_type != "shared_memory":
            original(resource_name, resource_type)

    resource_tracker.register = skip_shared_memory
    try:
        return shared_memory.SharedMemory(name=name, create=False)
    finally:
        resource_tracker.register = original
