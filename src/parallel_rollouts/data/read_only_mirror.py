"""Observation storage mapped twice: writable for the rollout, read-only for the policy.

The policy must never write the batch. A private copy of every row guarantees that, and on
84x84x4 frames it is as much work as the rest of a step. Mapping the same memory a second
time, read-only, guarantees it for nothing: the policy gets rows of the second mapping, so

- NumPy refuses a write (the array's write flag is off and cannot be turned back on: the
  buffer under it is read-only);
- nothing down the row's ``base`` chain exports a writable buffer;
- a write that bypasses both (an in-place operation on ``torch.from_numpy(row)``, which
  PyTorch only warns about) hits a page the kernel maps read-only: the process stops with
  a segmentation fault and the batch is untouched.

The memory is an anonymous file (``memfd_create``) mapped shared twice, so each write the
rollout makes is what the policy reads, with no copy and no lag. (A process forked while
it holds such storage shares it with the child, where private memory would be copied on
write: this library starts its worker processes with ``spawn``.) Where the system has no
``memfd_create`` (macOS, Windows) or refuses one, :func:`mirrored_empty` answers ``None`` and
the caller copies rows instead.
"""

from __future__ import annotations

import os

import numpy as np

from .mappings import MAPPING_AVAILABLE, map_shared

__all__ = ["MIRROR_MIN_ROW_BYTES", "mirrored_empty", "mirrors_leaf"]

#: A leaf is mapped twice when one row of it (every env's observation at one step) is at least
#: this large; a smaller row is copied for the policy, which costs no more than handing out a
#: view of a mapping, and lets a policy write it in place as before. (84x84x4 frames: 28 KB
#: per env; CartPole: 16 bytes.)
MIRROR_MIN_ROW_BYTES = 16 * 1024


def mirrors_leaf(leaf: np.ndarray) -> bool:
    """Whether observation storage ``leaf`` (``[rows, envs, ...]``) gets a read-only mirror."""
    return leaf.ndim >= 2 and leaf[0].nbytes >= MIRROR_MIN_ROW_BYTES

_MEMFD_FLAGS = getattr(os, "MFD_CLOEXEC", 0)


def mirrored_empty(shape: tuple[int, ...], dtype) -> tuple[np.ndarray, np.ndarray] | None:
    """``(writable, read_only)``: two uninitialised arrays of ``shape`` over the same memory.

    ``None`` when the memory cannot be mapped twice here (no ``memfd_create``, a refused
    file or mapping, an empty array): the caller falls back to copies. Neither array holds
    a file descriptor (:mod:`~parallel_rollouts.data.mappings`): a caller may keep many.
    """
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    nbytes = count * dtype.itemsize
    if nbytes == 0 or not MAPPING_AVAILABLE or not hasattr(os, "memfd_create"):
        return None
    descriptor = -1
    try:
        descriptor = os.memfd_create("parallel-rollouts-observations", _MEMFD_FLAGS)
        os.ftruncate(descriptor, nbytes)
        writable = map_shared(descriptor, nbytes, writable=True)
        read_only = map_shared(descriptor, nbytes, writable=False)
    except OSError:
        return None
    finally:
        # The mappings hold the memory; the descriptor is needed only to make them.
        if descriptor >= 0:
            os.close(descriptor)
    return writable.view(dtype).reshape(shape), read_only.view(dtype).reshape(shape)
