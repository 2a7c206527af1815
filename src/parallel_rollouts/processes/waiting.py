"""Waiting for a connection: a short spin that yields the CPU, then a blocking read.

A blocked process that is woken for every step pays a wake-up (and, on a
virtual machine, an idle vCPU) on the critical path of each step
(``benchmarks/results/handshake_w*.json``: 59 us of overhead per step with two
workers blocking at once, 28 us spinning first). Spinning briefly before
blocking keeps the core warm across the main process's policy call; each turn
of the spin calls ``sched_yield`` so that a process with real work (the main
process, another worker) takes the core whenever it needs it. The budget is
bounded, so a slow env costs at most one budget of polling per step before the
waiter blocks.

``PARALLEL_ROLLOUTS_SPIN_US`` sets the budget in microseconds (default 100;
``0`` blocks at once).
"""

from __future__ import annotations

import os
import select
import time
from multiprocessing.connection import Connection

__all__ = ["SpinThenBlock", "spin_budget_seconds"]

DEFAULT_SPIN_US = 100.0


def spin_budget_seconds() -> float:
    value = os.environ.get("PARALLEL_ROLLOUTS_SPIN_US", "")
    try:
        microseconds = float(value) if value else DEFAULT_SPIN_US
    except ValueError:
        microseconds = DEFAULT_SPIN_US
    return max(microseconds, 0.0) * 1e-6


_yield_cpu = getattr(os, "sched_yield", None) or (lambda: time.sleep(0))


class SpinThenBlock:
    """Spins (yielding) until ``connection`` is readable or the budget is spent."""

    def __init__(self, connection: Connection, budget_seconds: float) -> None:
        self._budget = budget_seconds
        if budget_seconds and hasattr(select, "poll"):
            poller = select.poll()
            # POLLHUP and POLLERR are always reported: a dead peer counts as readable,
            # and the read that follows raises EOFError.
            poller.register(connection.fileno(), select.POLLIN)
            self._readable = lambda: bool(poller.poll(0))
        else:
            self._readable = lambda: connection.poll(0)

    def spin(self) -> bool:
        """True once readable; False when the budget ran out (the caller then blocks)."""
        if not self._budget:
            return False
        readable, clock = self._readable, time.perf_counter
        deadline = clock() + self._budget
        while not readable():
            if clock() >= deadline:
                return False
            _yield_cpu()
        return True
