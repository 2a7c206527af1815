"""What one batch will cost in memory, against what the machine has available, said before it is allocated.

A batch is ``num_envs x horizon`` rows of the observation, the action and the
fixed per-row fields (reward, flags, episode seed, value, log-probability, info
keys), plus the bootstrap row of observations: counted by
:func:`~parallel_rollouts.data.storage.storage_bytes` from the allocation
recipe itself. NumPy reserves such arrays lazily, so a batch past the free
memory is not refused when allocated: the collect that fills it is what the
system kills. A :class:`~parallel_rollouts.errors.BatchMemoryWarning` says so
first.

Available memory is Linux's ``MemAvailable`` (``/proc/meminfo``), lowered to
what a cgroup memory limit leaves (a container's ``--memory``); elsewhere the
free physical pages (``os.sysconf``); unknown, nothing is said.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from ..data.spaces import SpaceLayout
from ..data.storage import storage_bytes
from ..errors import BatchMemoryWarning

__all__ = ["available_memory", "warn_if_batch_too_large"]

_MEMINFO = Path("/proc/meminfo")
_CGROUP = Path("/sys/fs/cgroup")


def available_memory(meminfo: Path = _MEMINFO, cgroup_root: Path = _CGROUP) -> int | None:
    """Bytes this process could still fill without swapping or being killed; ``None`` when unknown."""
    available = _meminfo_available(meminfo)
    if available is None:
        available = _sysconf_available()
    limit = _cgroup_headroom(cgroup_root)
    if limit is not None:
        available = limit if available is None else min(available, limit)
    return available


def _meminfo_available(meminfo: Path) -> int | None:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def _sysconf_available() -> int | None:
    try:
        pages, page_size = os.sysconf("SC_AVPHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    return pages * page_size if pages > 0 and page_size > 0 else None


def _cgroup_headroom(cgroup_root: Path) -> int | None:
    """cgroup v2 ``memory.max - memory.current`` of this process's group, when a limit is set."""
    try:
        text = (cgroup_root / "memory.max").read_text().strip()
        if text == "max":
            return None
        return max(int(text) - int((cgroup_root / "memory.current").read_text()), 0)
    except (OSError, ValueError):
        return None


def warn_if_batch_too_large(
    observation_layout: SpaceLayout,
    action_layout: SpaceLayout,
    horizon: int,
    num_envs: int,
    info_keys: tuple[str, ...] = (),
    available: int | None = None,
    stacklevel: int = 2,
) -> bool:
    """Warn (:class:`BatchMemoryWarning`) when one batch exceeds the available memory; return whether it did."""
    batch_bytes, _ = storage_bytes(observation_layout, action_layout, horizon, num_envs, info_keys)
    available = available_memory() if available is None else available
    if available is None or batch_bytes <= available:
        return False
    row_bytes = batch_bytes / (num_envs * horizon)
    observation_bytes = sum(leaf.dtype.itemsize * _size(leaf.shape) for leaf in observation_layout.leaves)
    action_bytes = sum(leaf.dtype.itemsize * _size(leaf.shape) for leaf in action_layout.leaves)
    warnings.warn(
        f"one batch of {num_envs:,} envs x horizon {horizon} needs {_gigabytes(batch_bytes)} (about "
        f"{row_bytes:,.0f} bytes a row: observation {observation_bytes:,}, action {action_bytes:,}, and the "
        f"rewards, end flags, episode seeds, values and log-probabilities), more than the "
        f"{_gigabytes(available)} this machine has available; the first collect() would be killed for "
        "memory. Lower num_envs or horizon (or split the envs across machines).",
        BatchMemoryWarning,
        stacklevel=stacklevel + 1,
    )
    return True


def _size(shape: tuple[int, ...]) -> int:
    size = 1
    for extent in shape:
        size *= extent
    return size


def _gigabytes(count: int) -> str:
    if count < 2**30:
        return f"{count / 2**20:,.1f} MiB"
    return f"{count / 2**30:,.1f} GiB"
