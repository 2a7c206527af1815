"""How multi-worker backends (async, ray) split envs among workers and ship their factories."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import cloudpickle
import numpy as np

from ..errors import ConfigurationError

__all__ = ["pickle_env_fns", "resolve_num_workers", "split_envs"]


def resolve_num_workers(num_workers: int | None, num_envs: int) -> int:
    """``num_workers``, checked; ``None`` means ``min(cpu_count, num_envs)``."""
    if num_workers is None:
        return max(1, min(os.cpu_count() or 1, num_envs))
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or not 1 <= num_workers <= num_envs:
        raise ConfigurationError(
            f"`num_workers` must be an int between 1 and the number of envs ({num_envs}); got {num_workers!r}."
        )
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
