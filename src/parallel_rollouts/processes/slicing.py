"""How multi-worker backends (async, ray) split envs among workers and ship their factories."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import cloudpickle
import numpy as np

from ..errors import ConfigurationError

__all__ = ["pickle_env_fns", "resolve_num_workers", "split_envs", "usable_cores"]

CGROUP_ROOT = Path("/sys/fs/cgroup")


def usable_cores(cgroup_root: Path = CGROUP_ROOT) -> int:
    """How many cores this process can keep busy at once.

    ``os.cpu_count()`` counts the machine's cores, not the ones this process may
    use: a job pinned to some cores (``taskset``, a batch scheduler) or a container
    with a CPU quota (``docker --cpus=2``) gets fewer, and one worker per machine
    core then only adds processes that share them. This is the affinity mask,
    capped by a cgroup CPU quota (rounded up).
    """
    process_cpu_count = getattr(os, "process_cpu_count", None)  # Python 3.13+
    if process_cpu_count is not None:
        count = process_cpu_count()
    else:
        try:
            count = len(os.sched_getaffinity(0))
        except AttributeError:  # macOS, Windows
            count = os.cpu_count()
    count = count or 1
    quota = cgroup_cpu_quota(cgroup_root)
    if quota is not None:
        count = min(count, quota)
    return max(1, count)


def cgroup_cpu_quota(root: Path = CGROUP_ROOT) -> int | None:
    """Cores a cgroup CPU quota allows (cgroup v2 ``cpu.max``, else v1 CFS files), or None."""
    try:
        fields = (root / "cpu.max").read_text().split()
        quota, period = (fields[0], fields[1]) if len(fields) == 2 else ("max", "0")
    except OSError:
        try:
            quota = (root / "cpu" / "cpu.cfs_quota_us").read_text().strip()
            period = (root / "cpu" / "cpu.cfs_period_us").read_text().strip()
        except OSError:
            return None
    try:
        quota_us, period_us = int(quota), int(period)
    except ValueError:  # "max": no quota
        return None
    if quota_us <= 0 or period_us <= 0:  # v1 writes -1 for no quota
        return None
    return max(1, math.ceil(quota_us / period_us))


def resolve_num_workers(num_workers: int | None, num_envs: int) -> int:
    """``num_workers`` as given (checked by :class:`~parallel_rollouts.config.worker_options.WorkerOptions`);
    ``None`` means ``min(usable_cores(), num_envs)``."""
    if num_workers is None:
        return max(1, min(usable_cores(), num_envs))
    return num_workers


def split_envs(num_envs: int, num_workers: int) -> list[tuple[int, int]]:
    """Contiguous ``(start, stop)`` slices, one per worker, sizes differing by at most one."""
    bounds = np.linspace(0, num_envs, num_workers + 1).round().astype(int)
    return [(int(start), int(stop)) for start, stop in zip(bounds[:-1], bounds[1:])]


def pickle_env_fns(env_fns: Sequence[Callable], destination: str) -> list[bytes]:
    """Serialise every factory with cloudpickle, naming the first one that cannot be."""
    pickled = []
    for index, env_fn in enumerate(env_fns):
        try:
            pickled.append(cloudpickle.dumps(env_fn))
        except Exception as error:
            raise ConfigurationError(
                f"env_fns[{index}] cannot be serialised for {destination} ({type(error).__name__}: {error}). "
                "Use a top-level function or functools.partial, and keep unpicklable state (open files, "
                "locks, sockets) out of the factory."
            ) from error
    return pickled
