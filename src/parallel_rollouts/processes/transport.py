"""How the main process's requests reach a worker and its replies come back: the transports.

A worker has one pipe (its duplex ``multiprocessing`` connection) and, when the pool's working
segment has them, a step doorbell (:mod:`~parallel_rollouts.processes.doorbell`). A transport is
a pair of classes, both here:

- its main side, one object through which the pool talks to every worker (:meth:`post` a
  request, :meth:`wait_reply` for its reply, ...), chosen once before the segment is made;
- its worker side, the *channel* each worker's loop takes requests from and answers through
  (``receive()``, ``send(reply)``, ``done()``), built in the worker from the
  :class:`TransportOrder` its attach order carries.

The transports:

- :class:`PipeTransport` / :class:`PipeChannel`: every request and reply over the pipe;
- :class:`DoorbellTransport` / :class:`DoorbellChannel`: a bare step is rung on the doorbell and
  its reply read from the segment; anything else is written to the pipe and rung as "read your
  pipe".

Both send the same messages (:mod:`~parallel_rollouts.processes.protocol`) and answer the same
calls, so neither the pool, nor start-up, nor the worker's loop has a branch on which one runs.
A request other than a bare step, and its reply, travel over the pipe whatever the transport
(the pool reads a worker's reply to ``close`` there).

Adding a transport is one new pair of classes here, its main side listed in :data:`TRANSPORTS`
(the pool takes the first one :meth:`~PipeTransport.available`), plus its mechanism in a module of
its own (as the doorbell's is :mod:`.doorbell` and ``_doorbell.pyx``); nothing else changes.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections import defaultdict
from dataclasses import dataclass
from multiprocessing.connection import wait

from . import doorbell
from .doorbell import MainDoorbells, WorkerDoorbell
from .protocol import DONE, REQUEST, STEP
from .waiting import SpinThenBlock, spin_budget_seconds

__all__ = [
    "DIED", "LATE", "TRANSPORTS", "DoorbellChannel", "DoorbellTransport", "PipeChannel", "PipeTransport",
    "TransportOrder", "pipe_receiver", "transport_for",
]

#: The outcomes of waiting for a reply besides the reply itself.
DIED, LATE = "died", "late"


@dataclass(frozen=True)
class TransportOrder:
    """What a worker's attach order says of the transport, from which the worker builds its
    channel: which transport (its main side's class, pickled by reference), and how many
    workers' slots it keeps in the segment."""

    transport: type
    slots: int

    @property
    def segment_bytes(self) -> int:
        """Bytes the transport takes in the segment after the pool's working storage."""
        return self.transport.segment_bytes(self.slots)

    def channel(self, connection, extra, slot: int):
        """The worker's side, for the worker in ``slot`` (``extra``: the segment's bytes after the storage)."""
        return self.transport.channel(connection, extra, self.slots, slot)


def _parent_sentinel():
    parent = multiprocessing.parent_process()
    return parent.sentinel if parent is not None else None


def pipe_receiver(connection):
    """``receive()`` for the next message on a worker's pipe; raises EOFError once the main
    process is gone.

    With ``spawn`` the connection alone shows the main process's death as
    end-of-file. A ``fork``-ed worker also holds copies of the main process's
    ends, so it watches the parent's sentinel as well.
    """
    spin = SpinThenBlock(connection, spin_budget_seconds()).spin
    sentinel = _parent_sentinel()

    def receive() -> bytes:
        if not spin() and sentinel is not None and connection not in wait([connection, sentinel]):
            raise EOFError("the main process is gone")
        return connection.recv_bytes()

    return receive


# -- over the pipe ------------------------------------------------------------------------------


class PipeChannel:
    """A worker's side of :class:`PipeTransport`. Every request gets exactly one reply."""

    def __init__(self, connection) -> None:
        self.connection = connection
        self._read = pipe_receiver(connection)

    def receive(self) -> tuple[bytes, int, bytes]:
        """The next request: its command, its argument and the whole message."""
        message = self._read()
        command, argument = REQUEST.unpack_from(message)
        return command, argument, message

    def send(self, reply: bytes) -> None:
        self.connection.send_bytes(reply)

    def done(self) -> None:
        """Reply a bare "done" to a step (the loop sends anything more through :meth:`send`)."""
        self.connection.send_bytes(DONE)

    def release(self) -> None:
        """Drop what views the pool's segment (before the worker releases it)."""


class PipeTransport:
    """Every request and every reply over the worker's pipe."""

    @staticmethod
    def available(core_name: str) -> bool:
        """Whether a pool of workers running ``core_name`` can use this transport here."""
        return True

    @staticmethod
    def segment_bytes(slots: int) -> int:
        """Bytes this transport takes in the segment for ``slots`` workers."""
        return 0

    @classmethod
    def open(cls, extra, slots: int) -> tuple[PipeTransport, TransportOrder]:
        """Both ends, on a segment whose ``extra`` bytes follow the storage: the main side, and
        the order each worker builds its side from."""
        return cls(), TransportOrder(cls, slots)

    @staticmethod
    def channel(connection, extra, slots: int, slot: int) -> PipeChannel:
        """The worker's side (in the worker process)."""
        return PipeChannel(connection)

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
        """Send ``request`` (``step_row``: a bare step of that row) through the transport; False
        when the pipe is gone (the worker died: reading its reply then says how)."""
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


# -- the step doorbell, with the pipe for the rest ----------------------------------------------


class DoorbellChannel:
    """A worker's side of :class:`DoorbellTransport`: steps rung on its doorbell, with the pipe
    for everything else. Every request gets exactly one reply."""

    def __init__(self, connection, bell: WorkerDoorbell) -> None:
        self.connection = connection
        self.bell = bell
        #: The request being served came on the doorbell as a step: its reply may be posted in
        #: the segment. A pipe request's reply goes back on the pipe.
        self.step_request = False
        sentinel = _parent_sentinel()
        parent_pid = os.getppid()

        def parent_alive() -> bool:
            # The parent's sentinel says when it is gone. (A readable pipe does not: a request is
            # rung before it is written, but a large one is still being written when read.)
            if sentinel is not None:
                return not wait([sentinel], 0)
            return os.getppid() == parent_pid

        self._parent_alive = parent_alive

    def receive(self) -> tuple[bytes, int, bytes]:
        code, argument = self.bell.wait(self._parent_alive)
        self.step_request = code == doorbell.STEP
        if self.step_request:
            return STEP, argument, b""
        message = self.connection.recv_bytes()
        command, argument = REQUEST.unpack_from(message)
        return command, argument, message

    def send(self, reply: bytes) -> None:
        if self.step_request and self.bell.reply_inline(reply):
            return
        # Rung first: the main process then reads the pipe while this writes to it, so a
        # reply larger than the pipe's buffer (a frame in a final observation) flows.
        self.bell.reply(doorbell.REPLIED_ON_PIPE)
        self.connection.send_bytes(reply)

    def done(self) -> None:
        """Reply a bare "done" to a step: on the doorbell alone."""
        self.bell.reply(doorbell.REPLIED_DONE)

    def release(self) -> None:
        self.bell.release()


class DoorbellTransport(PipeTransport):
    """Bare steps on the step doorbell, every other request over the pipe (rung first)."""

    available = staticmethod(doorbell.doorbells_available)
    segment_bytes = staticmethod(doorbell.doorbell_bytes)

    @classmethod
    def open(cls, extra, slots: int) -> tuple[DoorbellTransport, TransportOrder]:
        return cls(MainDoorbells(extra, slots)), TransportOrder(cls, slots)

    @staticmethod
    def channel(connection, extra, slots: int, slot: int) -> DoorbellChannel:
        return DoorbellChannel(connection, WorkerDoorbell(extra, slots, slot))

    def __init__(self, doorbells: MainDoorbells) -> None:
        super().__init__()
        self.doorbells = doorbells
        #: The number of the last request rung on each worker's doorbell (by index): its reply is
        #: awaited; 0 for a worker not rung since it started.
        self._numbers: defaultdict[int, int] = defaultdict(int)

    def post(self, worker, request: bytes, step_row: int | None) -> bool:
        self._note(worker, step_row)
        # Rung first: the worker then reads the pipe while this writes to it, so a request
        # larger than the pipe's buffer (a policy snapshot, a large `call`) flows.
        self._numbers[worker.index] = self.doorbells.ring(worker.index, step_row)
        return True if step_row is not None else self._send(worker, request)

    def wait_reply(self, worker, deadline: float | None) -> tuple[str, bytes | None]:
        index = worker.index
        outcome, reply = self.doorbells.wait_reply(
            index, self._numbers[index], worker.process.sentinel, deadline, index in self._stepping
        )
        if outcome == "pipe":
            return "reply", worker.connection.recv_bytes()
        if outcome == "reply":
            return "reply", reply or DONE
        return (DIED, None) if outcome == "died" else (LATE, None)

    def read_in_flight(self, worker, deadline: float) -> bool:
        index = worker.index
        outcome, _ = self.doorbells.wait_reply(
            index, self._numbers[index], worker.process.sentinel, deadline, index in self._stepping
        )
        if outcome == "pipe":
            return super().read_in_flight(worker, deadline)
        return outcome == "reply"

    def wait_any(self, workers: list, timeout: float) -> list:
        numbers = self._numbers
        pending = [(worker.index, numbers[worker.index], worker.process.sentinel) for worker in workers]
        return [workers[position] for position in self.doorbells.wait_any(pending, timeout)]

    def forget(self, worker) -> None:
        super().forget(worker)
        self.doorbells.clear(worker.index)
        self._numbers.pop(worker.index, None)

    def release(self) -> None:
        self.doorbells.release()


#: The transports, by preference: a pool takes the first one available for its core here.
TRANSPORTS: tuple[type[PipeTransport], ...] = (DoorbellTransport, PipeTransport)


def transport_for(core_name: str) -> type[PipeTransport]:
    """The transport a pool of workers running ``core_name`` uses here (the pipes at worst)."""
    return next(transport for transport in TRANSPORTS if transport.available(core_name))
