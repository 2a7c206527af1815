"""Starting the async backend's workers: the start-up exchanges and their failures.

A worker makes its envs and reports their spaces; the main process checks them, creates the
shared segment and sends each worker its :class:`~parallel_rollouts.processes.protocol.AttachOrder`;
the worker replies when ready (the protocol is in :mod:`~parallel_rollouts.processes.protocol`).
Every wait here is bounded by :data:`START_TIMEOUT`.
"""

from __future__ import annotations

import multiprocessing
import sys
from dataclasses import replace
from multiprocessing.connection import wait

from ..errors import ConfigurationError, WorkerError
from ..checks.failures import merged_failure
from ..groups import resolve_layout
from ..config.spec import RolloutSpec
from . import protocol
from .transport import transport_for
from .shared_memory import SharedStorage
from .worker_handle import WorkerHandle, died_error

__all__ = [
    "START_TIMEOUT",
    "UNGUARDED_MAIN_EXIT_CODE",
    "attach",
    "exit_if_importing_the_main_script",
    "raise_startup_errors",
    "startup_reply",
    "unguarded_main_error",
]

START_TIMEOUT = 120.0

#: Exit status of a worker that found itself running the main script's top level again,
#: because the script lacks an ``if __name__ == "__main__":`` guard.
UNGUARDED_MAIN_EXIT_CODE = 86


def attach(spec: RolloutSpec, resources, policy) -> protocol.AttachOrder:
    """Check every env's spaces, create the segment and attach every worker; the order sent.

    ``resources`` is the pool's record of what to free: its ``workers``, its ``shared``
    segment and the main side of its ``transport`` (the one :func:`~.transport.transport_for`
    picks, whose part of the segment follows the storage), each stored there as soon as it
    exists so that a failure after it frees it too.
    """
    replies = [worker.spaces if worker.is_local else startup_reply(worker, "spaces") for worker in resources.workers]
    raise_startup_errors(replies)
    # A worker's columns are known once its envs exist: a vector env spans its num_envs.
    column = 0
    for worker, reply in zip(resources.workers, replies):
        worker.start, worker.stop = column, column + len(reply)
        column = worker.stop
    layout = resolve_layout(spec, [column for reply in replies for column in reply])
    slots = resources.workers[-1].index + 1
    transport = transport_for(spec.core_name)
    resources.shared = SharedStorage.create(layout.allocate_storage, transport.segment_bytes(slots))
    resources.transport, transport_order = transport.open(resources.shared.extra, slots)
    order = protocol.AttachOrder(
        segment_name=resources.shared.name,
        layout=layout,
        transport=transport_order,
        group_builder=spec.group_builder,
        policy=policy,
    )
    remote = [worker for worker in resources.workers if not worker.is_local]
    for worker in remote:
        worker.connection.send(("attach", replace(order, column_offset=worker.start, slot=worker.index)))
    # The main process's own share is hosted while the workers attach.
    for worker in resources.workers:
        if worker.is_local:
            worker.attach(replace(order, column_offset=worker.start), resources.shared.storage)
    raise_startup_errors([startup_reply(worker, "ready") for worker in remote])
    return order


def raise_startup_errors(replies: list) -> None:
    """Raise what the workers reported: every env failure together, else the first other error."""
    error = merged_failure([reply for reply in replies if isinstance(reply, BaseException)])
    if error is not None:
        raise error


def exit_if_importing_the_main_script() -> None:
    """In a worker still importing the user's main script: leave quietly, with a status the parent reads.

    A spawned worker imports the main script before it runs anything else
    (multiprocessing marks that phase as ``_inheriting``). Reaching a collector's
    construction then means the script creates it at top level, unguarded;
    starting workers from here would fail with a long traceback in every
    worker. The parent turns this exit status into one error instead.
    """
    if getattr(multiprocessing.process.current_process(), "_inheriting", False):
        raise SystemExit(UNGUARDED_MAIN_EXIT_CODE)


def unguarded_main_error(created: str = "the collector") -> ConfigurationError:
    """The error for a main script that starts workers at top level; ``created`` names what it creates."""
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    script = f"your script ({main_file})" if main_file else "your main module"
    return ConfigurationError(
        f"backend='async' starts each worker as a new Python process, which imports {script} before anything "
        f"else; the script creates {created} at top level, so every worker tried to create one too. Put the "
        f'code that creates and uses {created} under `if __name__ == "__main__":` (and call '
        "`multiprocessing.freeze_support()` first there if you freeze the program into an executable)."
    )


def startup_reply(worker: WorkerHandle, expected: str):
    """One start-up message from a worker, or the exception it reports (bounded in time)."""
    connection = worker.connection
    ready = wait([connection, worker.process.sentinel], START_TIMEOUT)
    try:
        if connection in ready:
            kind, payload = connection.recv()
            if kind == expected:
                return payload
            if kind == "error":
                return payload
            return WorkerError(f"{worker.describe()} sent an unexpected start-up message {kind!r}.")
    except (EOFError, OSError):
        pass
    worker.process.join(1.0)
    if not ready:
        return WorkerError(f"{worker.describe()} did not start within {START_TIMEOUT} s.")
    if worker.process.exitcode == UNGUARDED_MAIN_EXIT_CODE:
        return unguarded_main_error()
    return died_error(worker, "while starting up.", phase="make")
