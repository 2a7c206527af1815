"""The step doorbell: per-step requests and replies without a pipe round trip.

A per-step rollout asks every worker to step once per row. Over a pipe, each request and
each reply is a system call on each side and a wake-up of a sleeping process: about
200 us per vector step on a 2-core machine, more than a cheap env's whole step. With the
doorbell, a step request is a counter bumped in the pool's shared segment (the doorbell lines
sit after the rollout storage, one per worker, with a small reply area each), and the reply
another; each side spins for a short budget and then sleeps in the kernel on the counter
(a futex on Linux, see ``_doorbell.pyx``), so a step whose peer is awake costs no system
call at all.

The pipes stay for the other requests (begin, finish, calls, close): the main process writes
such a request to the pipe and rings the doorbell with "read your pipe", and the worker answers
it over the pipe. A step whose reply carries something (the vector env's infos, an error, a
warning) posts it in the worker's reply area in the segment when it fits (64 KiB), else on the
pipe; its doorbell reply says which.

The doorbell needs the compiled extension and Linux. Elsewhere (macOS, Windows, the
pure-Python core, ``PARALLEL_ROLLOUTS_DOORBELL=0``) every request goes over the pipes,
as the same protocol, with the same results.
"""

from __future__ import annotations

import os
import time
from multiprocessing.connection import wait

from .waiting import spin_budget_seconds

__all__ = [
    "INLINE_REPLY_BYTES", "PIPE", "STEP", "REPLIED_DONE", "REPLIED_INLINE", "REPLIED_ON_PIPE", "MainDoorbells", "WorkerDoorbell", "doorbell_bytes",
    "doorbells_available",
]

#: Request codes: "read your pipe" and "step row `argument`".
PIPE, STEP = 0, 1
#: Reply kinds: a bare "done", or "the reply is on the pipe"; a kind of ``REPLIED_INLINE + n``
#: says the reply is the first ``n`` bytes of the worker's reply area in the segment.
REPLIED_DONE, REPLIED_ON_PIPE, REPLIED_INLINE = 0, 1, 2
#: Bytes of each worker's reply area: a reply up to this size (a step's infos, a final
#: observation or a few) skips the pipe's system calls; a larger one takes the pipe.
INLINE_REPLY_BYTES = 65536
#: The main process checks a waited-for worker's sentinel after this long (seconds), then after
#: twice as long each time, up to ``DEATH_CHECK_MAX_SECONDS``: a worker that dies is noticed
#: within about as long as the wait had lasted (2 ms early in a wait, 64 ms at most). Each check
#: wakes this process (a system call or two and a few tens of microseconds of Python): at a flat
#: 2 ms, a 15 ms rollout of CartPoles woke it about 7 times a collect, taking cores the workers
#: were stepping on.
DEATH_CHECK_SECONDS = 0.002
DEATH_CHECK_MAX_SECONDS = 0.064
#: A worker with nothing to do checks that the main process still exists this often.
PARENT_CHECK_SECONDS = 0.1
DOORBELL_ENV_VAR = "PARALLEL_ROLLOUTS_DOORBELL"


def _extension():
    try:
        from . import _doorbell
    except ImportError:
        return None
    return _doorbell if _doorbell.AVAILABLE else None


def doorbells_available(core_name: str) -> bool:
    """Whether a pool of workers running ``core_name`` steps through doorbells here."""
    if os.environ.get(DOORBELL_ENV_VAR, "") in ("0", "false", "no"):
        return False
    return core_name == "compiled" and _extension() is not None


def doorbell_bytes(slots: int) -> int:
    """Bytes the doorbells of ``slots`` workers take (after the pool's working storage): their
    lines, then one reply area per worker."""
    return _extension().segment_bytes(slots) + slots * INLINE_REPLY_BYTES


def _reply_area(buffer, slots: int, slot: int):
    start = _extension().segment_bytes(slots) + slot * INLINE_REPLY_BYTES
    return buffer[start : start + INLINE_REPLY_BYTES]


class MainDoorbells:
    """The main process's side, on the pool's working segment (``buffer``: its doorbell bytes)."""

    def __init__(self, buffer, slots: int) -> None:
        self._bells = _extension().Doorbells(buffer, slots)
        self._areas = [_reply_area(buffer, slots, slot) for slot in range(slots)]
        self._spin = spin_budget_seconds()

    def _reply(self, slot: int) -> bytes | None:
        """The reply posted in ``slot``'s area, the bare "done" as ``b""``; ``None``: it is on the pipe."""
        kind = self._bells.reply_kind(slot)
        if kind == REPLIED_DONE:
            return b""
        if kind == REPLIED_ON_PIPE:
            return None
        return self._areas[slot][: kind - REPLIED_INLINE].tobytes()

    def clear(self, slot: int) -> None:
        self._bells.clear(slot)

    def ring(self, slot: int, step_row: int | None) -> int:
        """Ask ``slot`` to step row ``step_row`` (``None``: to read its pipe); the request's number."""
        if step_row is None:
            return self._bells.ring(slot, PIPE, 0)
        return self._bells.ring(slot, STEP, step_row)

    def wait_reply(
        self, slot: int, number: int, sentinel: int, deadline: float | None, spin_first: bool = True
    ) -> tuple[str, bytes | None]:
        """Wait for the reply to request ``number``: ``("reply", bytes)`` (``b""``: a bare "done"),
        ``("pipe", None)`` (read the reply there), ``("died", None)`` (the worker's process
        ended) or ``("late", None)`` (past ``deadline``). ``spin_first=False`` sleeps at once (a
        reply that takes long, such as a whole rollout's, is not worth a core spent spinning)."""
        bells, spin = self._bells, self._spin if spin_first else 0.0
        check = DEATH_CHECK_SECONDS
        while True:
            timeout = check
            if deadline is not None:
                timeout = min(timeout, max(deadline - time.monotonic(), 0.0))
            if bells.wait_reply(slot, number, spin, timeout) == 1:
                break
            spin, check = 0.0, min(check * 2, DEATH_CHECK_MAX_SECONDS)
            if wait([sentinel], 0):
                if not bells.replied(slot, number):
                    return "died", None
                break
            if deadline is not None and time.monotonic() >= deadline:
                return "late", None
        reply = self._reply(slot)
        return ("pipe", None) if reply is None else ("reply", reply)

    def wait_any(self, pending: list[tuple[int, int, int]], timeout: float) -> list[int]:
        """The positions in ``pending`` (``(slot, number, sentinel)`` each) whose reply is there
        or whose worker died, waiting up to ``timeout`` seconds for the first."""
        bells, spin = self._bells, self._spin
        deadline = time.monotonic() + timeout
        check = DEATH_CHECK_SECONDS
        while True:
            seen = bells.completions()
            done = [position for position, (slot, number, _) in enumerate(pending) if bells.replied(slot, number)]
            if done:
                # A worker that died is named now, not after the others have served every batch.
                waiting = [sentinel for position, (_, _, sentinel) in enumerate(pending) if position not in done]
                dead = wait(waiting, 0) if waiting else []
                return sorted(done + [position for position, (_, _, sentinel) in enumerate(pending) if sentinel in dead])
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            if bells.wait_completion(seen, spin, min(check, remaining)) != 1:
                spin, check = 0.0, min(check * 2, DEATH_CHECK_MAX_SECONDS)
                dead = wait([sentinel for _, _, sentinel in pending], 0)
                if dead:
                    return [position for position, (_, _, sentinel) in enumerate(pending) if sentinel in dead]

    def release(self) -> None:
        """Drop the views of the segment (which the pool then releases)."""
        self._bells = None
        self._areas = []


class WorkerDoorbell:
    """A worker's side: its own slot of the doorbells in the pool's working segment."""

    def __init__(self, buffer, slots: int, slot: int) -> None:
        self._bells = _extension().Doorbells(buffer, slots)
        self._area = _reply_area(buffer, slots, slot)
        self._slot = slot
        self._served = self._bells.request(slot)[0]
        self._spin = spin_budget_seconds()

    def wait(self, parent_alive) -> tuple[int, int]:
        """The next request, ``(code, argument)``. ``parent_alive()`` is asked whenever the
        main process has been silent for a while; EOFError once it says no."""
        bells, slot, served = self._bells, self._slot, self._served
        spin = self._spin
        while bells.wait_request(slot, served, spin, PARENT_CHECK_SECONDS) != 1:
            spin = 0.0
            if not parent_alive():
                raise EOFError("the main process is gone")
        number, code, argument = bells.request(slot)
        self._served = number
        return code, argument

    def reply(self, kind: int) -> None:
        self._bells.reply(self._slot, self._served, kind)

    def reply_inline(self, payload: bytes) -> bool:
        """Post ``payload`` in this worker's reply area and answer; False if it does not fit."""
        size = len(payload)
        if size > INLINE_REPLY_BYTES:
            return False
        self._area[:size] = memoryview(payload)
        self._bells.reply(self._slot, self._served, REPLIED_INLINE + size)
        return True

    def release(self) -> None:
        self._bells = None
        self._area = None
