"""Zeroed arrays that are written sparsely: ``final_observations``.

A rollout writes a final-observation row only where an episode ended, so most of
that field's pages are never touched and the kernel maps them lazily. NumPy asks
the kernel for 2 MiB huge pages on large allocations, which suits arrays written
in full; for a sparsely written one, each first write into a 2 MiB region makes
the kernel zero (and the memory cgroup charge) all 2 MiB of it. With 84x84x4
frames and 16 envs, one 28 KB terminal frame cost a 2 MiB clear, and a training
loop's first ~30 collects spent a fifth of their time in the kernel doing that.

:func:`sparse_zeros` maps such arrays with base pages only, so a terminal row costs
the pages it spans. Small arrays, and systems without ``madvise``, get plain
``np.zeros``.
"""

from __future__ import annotations

import mmap

import numpy as np

__all__ = ["sparse_zeros"]

#: NumPy's threshold for asking for huge pages; below it ``np.zeros`` already uses base pages.
HUGE_PAGE_THRESHOLD_BYTES = 1 << 22

_NO_HUGE_PAGES = getattr(mmap, "MADV_NOHUGEPAGE", None)


def sparse_zeros(shape, dtype=float) -> np.ndarray:
    """``np.zeros(shape, dtype)``, backed by base pages when it is large enough for huge ones."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    nbytes = count * dtype.itemsize
    if _NO_HUGE_PAGES is None or nbytes < HUGE_PAGE_THRESHOLD_BYTES:
        return np.zeros(shape, dtype=dtype)
    # An anonymous private mapping reads as zero and is freed with the last array viewing it.
    memory = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        memory.madvise(_NO_HUGE_PAGES)
    except OSError:
        pass  # a kernel without transparent huge pages: base pages are all there is
    return np.frombuffer(memory, dtype=dtype, count=count).reshape(shape)
