"""A rollout run on a thread of this process while the caller goes on (``max_policy_lag=1``).

The per-step runners (``serial``, ``sync``, per-step ``async``, pipelined) and the Ray runner
run their usual ``_collect`` on one background thread, with a copy of the policy taken when
the rollout was launched; rollout workers need no thread (their rollout runs in the worker
processes between a request and its reply). The thread is the only one touching the runner
until :meth:`BackgroundRollout.result` has returned; ``close()`` asks it to stop between two
rows (:class:`~parallel_rollouts.policy.cancel.RolloutCancelled`) and waits a bounded time for it.
"""

from __future__ import annotations

import atexit
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["BackgroundRollout"]


#: Seconds the interpreter's exit waits for each rollout still in flight to stop.
EXIT_WAIT_SECONDS = 5.0

_in_flight: weakref.WeakSet = weakref.WeakSet()
_exit_hook_registered = False


def _stop_all_at_exit() -> None:
    """At interpreter exit, before the pools' own exit hooks free the processes and the shared
    memory a rollout may be using (registered after them, so run before them): stop every
    rollout still in flight at its next row."""
    for background in list(_in_flight):
        background.cancel.set()
    for background in list(_in_flight):
        background.wait(EXIT_WAIT_SECONDS)


class BackgroundRollout:
    """``run()`` on a daemon thread; :meth:`result` waits for it and returns or raises what it did.

    ``cancel`` is the event the rollout checks between rows (set by ``close()``, or at exit)."""

    def __init__(self, run: Callable[[], Any], cancel: threading.Event) -> None:
        global _exit_hook_registered
        self.cancel = cancel
        self._result: Any = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        if not _exit_hook_registered:
            atexit.register(_stop_all_at_exit)
            _exit_hook_registered = True
        _in_flight.add(self)
        self._thread = threading.Thread(target=self._main, args=(run,), name="parallel-rollouts-collect", daemon=True)
        self._thread.start()

    def _main(self, run: Callable[[], Any]) -> None:
        try:
            self._result = run()
        except BaseException as error:  # handed to the caller by result()
            self._error = error
        finally:
            self._done.set()
            _in_flight.discard(self)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Whether the rollout ended within ``timeout`` seconds (``None``: wait for it)."""
        return self._done.wait(timeout)

    def result(self) -> Any:
        """Wait for the rollout; its result, or what it raised (with the thread's traceback).

        A Ctrl-C in this wait interrupts the wait only: the rollout goes on, and the next call
        waits for it again."""
        self._done.wait()
        self._thread.join()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        result, self._result = self._result, None
        return result
