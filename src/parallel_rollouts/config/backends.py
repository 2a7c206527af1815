"""The backends, in one table: what each one is, and so which options and modes it takes.

Every check that depends on the backend chosen reads it from :data:`BACKENDS`: the names the
collector, ``ParallelVectorEnv`` and ``ParallelVecEnv`` accept, the worker options that apply,
the policy placements and whether a backend can be pipelined. Which runner runs a backend (and
placement) is decided in :mod:`parallel_rollouts.runners.build`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError

__all__ = ["BACKENDS", "VECTOR_ENV_BACKENDS", "Backend", "backends_taking", "check_backend", "steps_in_this_process"]


@dataclass(frozen=True)
class Backend:
    """One backend: where its envs step and what may be asked of it."""

    #: Its envs step in this process (``"in this process"``), else in workers or actors.
    in_this_process: bool
    #: Where the policy may run (``"main"``: this process; ``"workers"``: next to each slice of
    #: envs), the default first.
    policy_placements: tuple[str, ...]
    #: The worker options (:class:`~parallel_rollouts.config.worker_options.WorkerOptions`) it takes.
    worker_options: tuple[str, ...] = ()
    #: Whether ``pipelined=True`` applies (the policy on one half of the envs while the other steps).
    pipelined: bool = False
    #: Whether ``ParallelVectorEnv`` (and ``ParallelVecEnv``) offer it: one Gymnasium step at a time.
    vector_env: bool = False


_PROCESS_OPTIONS = ("num_workers", "context", "step_timeout", "max_restarts", "main_process_envs")

#: Every backend, in the order messages list them.
BACKENDS: dict[str, Backend] = {
    "serial": Backend(in_this_process=True, policy_placements=("main",)),
    "sync": Backend(in_this_process=True, policy_placements=("main",), vector_env=True),
    "async": Backend(
        in_this_process=False, policy_placements=("main", "workers"), worker_options=_PROCESS_OPTIONS,
        pipelined=True, vector_env=True,
    ),
    "ray": Backend(
        in_this_process=False, policy_placements=("workers",),
        worker_options=("num_workers", "step_timeout", "max_restarts"),
    ),
}

#: The backends ``ParallelVectorEnv`` and ``ParallelVecEnv`` offer.
VECTOR_ENV_BACKENDS = tuple(name for name, backend in BACKENDS.items() if backend.vector_env)


def backends_taking(option: str) -> tuple[str, ...]:
    """The backends a worker option applies to, in table order."""
    return tuple(name for name, backend in BACKENDS.items() if option in backend.worker_options)


def steps_in_this_process(name: str) -> bool:
    """Whether backend ``name`` steps its envs in this process (``False`` for a name not in the table)."""
    backend = BACKENDS.get(name)
    return backend is not None and backend.in_this_process


def check_backend(backend: Any, names: tuple[str, ...]) -> str:
    """``backend`` if it is one of ``names`` (a front door's backends, from the table)."""
    if backend not in names:
        raise ConfigurationError(f"`backend` must be one of {names!r}; got {backend!r}.")
    return backend
