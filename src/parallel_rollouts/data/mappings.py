"""Shared memory mapped with ``mmap(2)`` directly: arrays that hold no file descriptor.

Python's ``mmap`` keeps a duplicate of the file descriptor until it is closed, and it
cannot be closed while an array views it. A batch the caller keeps would then hold a
descriptor for as long as it lives, and a program keeping many batches would run out of
them. A :class:`Mapping`, made with the C library's ``mmap`` directly, holds none:
:func:`map_shared` gives the one root array every array of the memory views, and the
memory is unmapped when that array, and so every view of it, is gone.

A mapping is writable or read-only. The kernel enforces a read-only one: NumPy will not
turn a read-only root's write flag back on (the root has no writable buffer behind it),
and a write that bypasses NumPy (PyTorch over the same memory) is a segmentation fault.
"""

from __future__ import annotations

import ctypes
import mmap
import os

import numpy as np

__all__ = ["MAPPING_AVAILABLE", "Mapping", "map_shared"]


def _load_libc():
    """``mmap``/``munmap`` from the C library on POSIX systems; ``None`` elsewhere (Windows)."""
    if os.name != "posix":
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        libc.munmap.restype = ctypes.c_int
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    except (OSError, AttributeError):
        return None
    return libc


_libc = _load_libc()
#: Whether :class:`Mapping` works here (POSIX with the C library's ``mmap`` reachable).
MAPPING_AVAILABLE = _libc is not None
# The mmap module's flag values are the C library's (absent on Windows, where _libc is None).
_PROT_READ, _PROT_WRITE = getattr(mmap, "PROT_READ", 0), getattr(mmap, "PROT_WRITE", 0)
_MAP_SHARED = getattr(mmap, "MAP_SHARED", 0)
_MAP_FAILED = ctypes.c_void_p(-1).value


class Mapping:
    """``size`` bytes of the file behind ``descriptor``, mapped shared; unmapped with the last array of it."""

    # Until mapped, __del__ has nothing to unmap; a class attribute, so that this holds even
    # when an interruption lands before the first line of __init__ runs.
    _address: int | None = None

    def __init__(self, descriptor: int, size: int, writable: bool = True) -> None:
        protection = _PROT_READ | _PROT_WRITE if writable else _PROT_READ
        address = _libc.mmap(None, size, protection, _MAP_SHARED, descriptor, 0)
        if address is None or address == _MAP_FAILED:
            error = ctypes.get_errno()
            raise OSError(error, f"mmap of a {size}-byte shared segment failed: {os.strerror(error)}")
        self._address, self._size = address, size
        #: Read-only for NumPy too: the data pair's second item is the read-only flag.
        self.__array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (address, not writable), "version": 3}

    @property
    def writable(self) -> bool:
        return not self.__array_interface__["data"][1]

    # A copy would unmap the same address when it is freed, under every array of the original; in
    # another process the address means nothing. Arrays over a mapping copy their data instead.
    def __copy__(self) -> Mapping:
        return self

    def __deepcopy__(self, memo: dict) -> Mapping:
        return self

    def __reduce__(self):
        raise TypeError("a shared memory mapping cannot be pickled: pickle the arrays over it, which copy their data")

    def __del__(self) -> None:
        if self._address is not None:
            _libc.munmap(ctypes.c_void_p(self._address), ctypes.c_size_t(self._size))


def map_shared(descriptor: int, size: int, writable: bool = True) -> np.ndarray:
    """The root ``uint8`` array of a new :class:`Mapping` (read-only unless ``writable``)."""
    return np.asarray(Mapping(descriptor, size, writable))
