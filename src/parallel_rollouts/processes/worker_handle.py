"""One worker process as the main process sees it: start it, read how it ended, stop it.

:class:`WorkerHandle` holds the process, its request connection and the read end of its
crash-report pipe (the worker's ``faulthandler`` writes there when it crashes, so that a
segfault or an abort reports the Python stack it happened in). The pool
(:mod:`parallel_rollouts.processes.pool`) owns the handles and frees them on every exit path.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from dataclasses import dataclass
from multiprocessing.connection import Connection

from ..checks.failures import worker_died
from ..errors import WorkerDiedError
from .worker_main import worker_main
from .waiting import SpinThenBlock, spin_budget_seconds

__all__ = [
    "WorkerHandle",
    "close_worker",
    "died_error",
    "exit_description",
    "launch_worker",
    "read_crash_report",
    "stop_worker",
]


@dataclass
class WorkerHandle:
    index: int
    start: int
    stop: int
    process: multiprocessing.process.BaseProcess
    connection: Connection
    alive: bool = True
    waiter: SpinThenBlock | None = None
    #: A request was sent and its reply not read yet (an interruption can leave it so).
    awaiting_reply: bool = False
    #: What the last request asked (named in the record of a death).
    phase: str = "worker"
    #: How many times this slice's worker was replaced (its envs' seed stream).
    incarnation: int = 0
    #: Seconds this process waited for this worker's replies since the last ``take_wait_seconds``.
    wait_seconds: float = 0.0
    #: The read end of a pipe the worker's ``faulthandler`` writes to when it crashes.
    crash_report: Connection | None = None
    #: The env factories it calls, ``(first, stop)``: its columns (``start``, ``stop``) are
    #: known only once its envs exist, and differ when a factory makes a vector env.
    factories: tuple[int, int] = (0, 0)
    #: A worker process (the main process's own share is a :class:`~.local_share.LocalShare`).
    is_local = False
    #: Its reply is there only once its process sends it (the share's is served when asked for).
    replies_at_once = False

    # The host interface the pool talks to, which LocalShare implements too.

    def post(self, request: bytes, step_row: int | None, transport) -> None:
        """Send ``request`` (``step_row``: a bare step of that row) through ``transport``."""
        transport.post(self, request, step_row)

    def take_reply(self, transport, deadline: float | None) -> tuple[str, bytes | None]:
        """The reply to the request posted: ``("reply", bytes)``, or the transport's "died" / "late"."""
        return transport.wait_reply(self, deadline)

    def describe(self) -> str:
        envs = f"env {self.start}" if self.stop - self.start == 1 else f"envs {self.start}..{self.stop - 1}"
        return f"worker {self.index} (pid {self.process.pid}, {envs})"


def close_worker(worker: WorkerHandle) -> None:
    """Close a stopped worker's ends and release its process object."""
    worker.connection.close()
    if worker.crash_report is not None:
        worker.crash_report.close()
    worker.alive = False
    if hasattr(worker.process, "close") and not worker.process.is_alive():
        worker.process.close()


def stop_worker(worker: WorkerHandle, timeout: float) -> None:
    """Stop one worker that is dead or hung, at once, and close its ends (not its process
    object: until a replacement takes its place, shutdown still joins it)."""
    if worker.process.is_alive():
        worker.process.kill()
    worker.process.join(timeout)
    worker.connection.close()
    if worker.crash_report is not None:
        worker.crash_report.close()
    worker.alive = False


def launch_worker(mp_context, index: int, start: int, stop: int, pickled: list[bytes]) -> WorkerHandle:
    """Start one worker process for env factories ``start:stop`` (it makes the envs and sends their spaces)."""
    parent_end, child_end = mp_context.Pipe(duplex=True)
    crash_report, crash_writer = mp_context.Pipe(duplex=False)
    try:
        process = mp_context.Process(
            target=worker_main,
            args=(child_end, start, pickled[start:stop], crash_writer),
            name=f"parallel-rollouts-worker-{index}",
            daemon=True,
        )
        process.start()
    except BaseException:
        for end in (parent_end, child_end, crash_report, crash_writer):
            end.close()
        raise
    child_end.close()
    crash_writer.close()
    waiter = SpinThenBlock(parent_end, spin_budget_seconds())
    return WorkerHandle(
        index, start, stop, process, parent_end, waiter=waiter, crash_report=crash_report, factories=(start, stop)
    )


def read_crash_report(worker: WorkerHandle) -> str:
    """What the dead worker's ``faulthandler`` wrote (a Python traceback of a crash), or ``""``."""
    report = worker.crash_report
    if report is None or report.closed:
        return ""
    chunks = []
    try:
        os.set_blocking(report.fileno(), False)
        while True:
            chunk = os.read(report.fileno(), 65536)
            if not chunk:
                break
            chunks.append(chunk)
    except (BlockingIOError, OSError):
        pass
    return b"".join(chunks).decode("utf-8", "replace")


def exit_description(process) -> str:
    code = process.exitcode
    if code is None:
        return "is unresponsive"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            return f"was killed by signal {-code}"
        if name == "SIGSEGV":
            return (
                "was killed by signal SIGSEGV (a segmentation fault: a crash in an env's native code, or a "
                "policy writing its observations in place through PyTorch, which the read-only rows of "
                "policy_inputs='protected' refuse; copy them first or pass policy_inputs='copies')"
            )
        return f"was killed by signal {name}"
    return f"exited with code {code}"


def died_error(worker: WorkerHandle, when: str, phase: str = "worker") -> WorkerDiedError:
    """The error for a worker process that is gone, naming it, its envs and how it ended."""
    return worker_died(worker.describe(), range(worker.start, worker.stop), exit_description(worker.process), when, phase=phase)
