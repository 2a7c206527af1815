"""Stopping a rollout between two rows: ``close()`` with a batch in flight (``max_policy_lag=1``).

A rollout checks a flag before it hands the policy the rows of each step; once the flag is
set, it raises :class:`RolloutCancelled` there, and the rollout is dropped as when the policy
raises: the envs stand at the row they reached, intact, ready to be closed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["CancelFlag", "RolloutCancelled", "cancellable"]


class RolloutCancelled(Exception):
    """Raised between two rows of a rollout that ``close()`` asked to stop."""


class CancelFlag:
    """A flag set from a signal handler (which must take no lock, as ``threading.Event.set`` does)."""

    def __init__(self) -> None:
        self._set = False

    def set_from_signal(self, *_: object) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set


def cancellable(rows: Callable, cancel: threading.Event | CancelFlag | None) -> Callable:
    """``rows`` (the policy's rows of a step), refusing to give any once ``cancel`` is set."""
    if cancel is None:
        return rows

    def rows_unless_cancelled(*args):
        if cancel.is_set():
            raise RolloutCancelled("the collector was closed while this rollout was in flight")
        return rows(*args)

    return rows_unless_cancelled
