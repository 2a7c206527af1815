"""A time limit on code running in this process: ``SIGALRM`` raises :class:`CheckTimeout` in it.

A check runs the env in this process, and an env can hang there (a blocking read,
a lock, a pure-Python loop). Another thread cannot stop the main thread portably,
but a signal handler can: it runs in the main thread between two bytecodes, or
when a blocking call such as ``time.sleep`` or a read is interrupted, and the
exception it raises unwinds the env's stack, running its ``finally`` blocks.

Limits, said where the limit is offered (``check_env(timeout=...)``): the limit
works only in the main thread of a POSIX process (``SIGALRM`` and
``setitimer``), and not while a ``SIGALRM`` handler set outside Python is in
place; elsewhere the code runs unbounded. Code that neither runs
bytecode nor returns from a system call (a C extension spinning without
checking for signals) is not interrupted until it does.

A timer that the caller armed before (pytest-timeout's, for instance) is kept:
its handler still runs when it falls due, and it is re-armed for its remaining
time on the way out.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["CheckTimeout", "Deadline", "can_time_out", "deadline"]

# After the first alarm, it fires again at this interval until the block has been left: an env
# that swallows the exception (a bare `except:`) or hangs again in its `finally` is stopped again.
_REPEAT_S = 1.0
# An alarm this much before any timer was due was not ours (``kill -ALRM``).
_EARLY_S = 0.05


class CheckTimeout(BaseException):
    """Raised in the main thread when a :func:`deadline` passes.

    A ``BaseException``, as ``KeyboardInterrupt`` is, so that an env's ``except Exception``
    does not swallow it.
    """


@dataclass
class Deadline:
    """What a :func:`deadline` block learns: whether its time ran out, and whether a limit applied at all."""

    seconds: float
    enforced: bool
    expired: bool = False
    #: What the caller's own earlier timer raised in the block, to be passed on as it is.
    foreign_error: BaseException | None = None


def can_time_out() -> bool:
    """Whether :func:`deadline` can interrupt code here: the main thread of a process with ``SIGALRM``."""
    return (
        hasattr(signal, "SIGALRM")
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
    )


@contextmanager
def deadline(seconds: float) -> Iterator[Deadline]:
    """Raise :class:`CheckTimeout` in the block once ``seconds`` have passed; yield its :class:`Deadline`.

    Where :func:`can_time_out` is false the block runs unbounded and ``enforced`` is false.
    """
    previous_handler = signal.getsignal(signal.SIGALRM) if can_time_out() else None
    if previous_handler is None:  # no SIGALRM here, or a handler set outside Python that could not be put back
        yield Deadline(seconds, enforced=False)
        return
    state = Deadline(seconds, enforced=True)
    now = time.monotonic()
    own_due = now + seconds
    previous_delay, previous_interval = signal.setitimer(signal.ITIMER_REAL, 0)
    previous_due = now + previous_delay if previous_delay > 0 else None
    active = True

    def on_alarm(signum, frame):
        nonlocal previous_due
        if not active:
            return  # an alarm that was already on its way when the block was left
        current = time.monotonic()
        if current < min(own_due, previous_due or own_due) - _EARLY_S:
            return  # a SIGALRM sent by someone else: the repeating timer still comes
        if previous_due is not None and current >= previous_due - _EARLY_S:
            # The caller's own timer fell due first: what it asked for happens now.
            previous_due = None
            signal.setitimer(signal.ITIMER_REAL, max(own_due - current, 1e-3), _REPEAT_S)
            if previous_handler == signal.SIG_DFL:  # it would have ended the process
                signal.signal(signal.SIGALRM, signal.SIG_DFL)
                signal.raise_signal(signal.SIGALRM)
            if callable(previous_handler):
                try:
                    previous_handler(signum, frame)
                except BaseException as error:
                    state.foreign_error = error
                    raise
            return
        state.expired = True
        raise CheckTimeout(f"did not finish within {seconds:g} s")

    signal.signal(signal.SIGALRM, on_alarm)
    first = own_due if previous_due is None else min(own_due, previous_due)
    signal.setitimer(signal.ITIMER_REAL, max(first - now, 1e-3), _REPEAT_S)
    try:
        yield state
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        active = False
        signal.signal(signal.SIGALRM, previous_handler)
        if previous_due is not None:
            remaining = max(previous_due - time.monotonic(), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, remaining, previous_interval)
        elif previous_delay > 0 and previous_interval > 0:  # a repeating timer that fell due in the block
            signal.setitimer(signal.ITIMER_REAL, previous_interval, previous_interval)
