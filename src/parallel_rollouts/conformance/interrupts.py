"""Tell the user's Ctrl-C from a ``KeyboardInterrupt`` that the env raised itself.

Both reach the check as ``KeyboardInterrupt``, usually from inside env code
(where a check spends its time). The rule: a ``KeyboardInterrupt`` is the
user's when ``SIGINT`` arrived during the check, and then it stops the checks;
any other one was raised by the env, and fails the check it was raised in.
While the block runs, ``SIGINT``'s handler is wrapped to note that the signal
came before the original handler runs (which raises ``KeyboardInterrupt`` as
usual). Outside the main thread, or when ``SIGINT`` is ignored or left to the
system, no ``KeyboardInterrupt`` can come from a Ctrl-C here, so every one is
the env's.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["UserInterrupts", "watch_user_interrupts"]


@dataclass
class UserInterrupts:
    """Whether ``SIGINT`` arrived while :func:`watch_user_interrupts` was watching."""

    requested: bool = False


@contextmanager
def watch_user_interrupts() -> Iterator[UserInterrupts]:
    """Note every ``SIGINT`` in the block (in the main thread), then let its handler act as before."""
    interrupts = UserInterrupts()
    if threading.current_thread() is not threading.main_thread():
        yield interrupts
        return
    previous = signal.getsignal(signal.SIGINT)
    if not callable(previous):
        yield interrupts
        return

    def on_interrupt(signum, frame):
        interrupts.requested = True
        previous(signum, frame)

    signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield interrupts
    finally:
        signal.signal(signal.SIGINT, previous)
