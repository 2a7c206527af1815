"""How the main process's requests reach a worker and its replies come back: the transports.

A worker has one pipe (its duplex ``multiprocessing`` connection) and, when the pool's working
segment has them, a step doorbell (:mod:`~parallel_rollouts.processes.doorbell`). The pool
talks to every worker through one transport object, chosen once when the segment is made:

- :class:`PipeTransport`: every request and reply over the pipe;
- :class:`DoorbellTransport`: a bare step is rung on the doorbell and its reply read from
  the segment; anything else is written to the pipe and rung as "read your pipe".

Both send the same messages (:mod:`~parallel_rollouts.processes.protocol`) and answer the
same calls, so the pool has no branch on which one runs; a new way to reach a worker is one
new class here. The worker's side is ``worker_main._Channel``.
"""

from __future__ import annotations

import time
from multiprocessing.connection import wait

from . import protocol
from .doorbell import MainDoorbells

__all__ = ["DoorbellTransport", "PipeTransport"]

#: The outcomes of waiting for a reply besides the reply itself.
DIED, LATE = "died", "late"


class PipeTransport:
    """Every request and every reply over the worker's pipe."""

    def __init__(self) -> None:
        #: The workers (by index) whose request in flight is a bare step: only its reply is waited
        #: for with a spin first. Any other request (a whole rollout, begin and finish, a reset, a
        #: call) is waited for asleep: it takes long, or is rare, and a spinning main process takes
        #: a core the workers step on. (Ready-first batches, waited for with ``wait_any``, spin.)
        self._stepping: set[int] = set()

    def _note(self, worker, step_row: int | None) -> None:
        if step_row is None:
            self._stepping.discard(worker.index)
        else:
            self._stepping.add(worker.index)

    def _send(self, worker, request: bytes) -> bool:
        try:
            worker.connection.send_bytes(request)
        except OSError:
            return False
        return True

    def post(self, worker, request: bytes, step_row: int | None) -> bool:
        """Send ``request`` (``step_row``: a bare step of that row); False when the pipe is gone
        (the worker died: reading its reply then says how)."""
        self._note(worker, step_row)
        return self._send(worker, request)

    def wait_reply(self, worker, deadline: float | None) -> tuple[str, bytes | None]:
        """``("reply", bytes)``, ``(DIED, None)`` or ``(LATE, None)`` (past ``deadline``); EOFError or
        ConnectionError when the pipe ends."""
        connection = worker.connection
        spun = worker.index in self._stepping and worker.waiter.spin()
        if not spun and deadline is not None:
            remaining = deadline - time.monotonic()
            ready = wait([connection, worker.process.sentinel], max(remaining, 0))
            if connection not in ready:
                return (DIED, None) if worker.process.sentinel in ready else (LATE, None)
        return "reply", connection.recv_bytes()

    def read_in_flight(self, worker, deadline: float) -> bool:
        """Read (and drop) the reply to the request in flight by ``deadline``; False if not there."""
        if worker.connection.poll(max(deadline - time.monotonic(), 0)):
            worker.connection.recv_bytes()
            return True
        return False

    def wait_any(self, workers: list, timeout: float) -> list:
        """Those of ``workers`` whose reply can be read now or whose process ended, waiting up to
        ``timeout`` seconds for the first."""
        ends = {worker.connection: worker for worker in workers}
        ends.update({worker.process.sentinel: worker for worker in workers})
        return list({id(ends[end]): ends[end] for end in wait(list(ends), timeout)}.values())

    def forget(self, worker) -> None:
        """``worker`` is being replaced: nothing of it is kept here."""
        self._stepping.discard(worker.index)

    def release(self) -> None:
        """Drop what views the pool's segment (before the pool releases it)."""


class DoorbellTransport(PipeTransport):
    """Bare steps on the step doorbell, every other request over the pipe (rung first)."""

    def __init__(self, doorbells: MainDoorbells) -> None:
        super().__init__()
        self.doorbells = doorbells

    def post(self, worker, request: bytes, step_row: int | None) -> bool:
        self._note(worker, step_row)
        # Rung first: the worker then reads the pipe while this writes to it, so a request
        # larger than the pipe's buffer (a policy snapshot, a large `call`) flows.
        worker.request_number = self.doorbells.ring(worker.index, step_row)
        return True if step_row is not None else self._send(worker, request)

    def wait_reply(self, worker, deadline: float | None) -> tuple[str, bytes | None]:
        outcome, reply = self.doorbells.wait_reply(
            worker.index, worker.request_number, worker.process.sentinel, deadline, worker.index in self._stepping
        )
        if outcome == "pipe":
            return "reply", worker.connection.recv_bytes()
        if outcome == "reply":
            return "reply", reply or protocol.DONE
        return (DIED, None) if outcome == "died" else (LATE, None)

    def read_in_flight(self, worker, deadline: float) -> bool:
        outcome, _ = self.doorbells.wait_reply(
            worker.index, worker.request_number, worker.process.sentinel, deadline, worker.index in self._stepping
        )
        if outcome == "pipe":
            return super().read_in_flight(worker, deadline)
        return outcome == "reply"

    def wait_any(self, workers: list, timeout: float) -> list:
        pending = [(worker.index, worker.request_number, worker.process.sentinel) for worker in workers]
        return [workers[position] for position in self.doorbells.wait_any(pending, timeout)]

    def forget(self, worker) -> None:
        super().forget(worker)
        self.doorbells.clear(worker.index)
        worker.request_number = 0

    def release(self) -> None:
        self.doorbells.release()
