"""Warnings raised in a worker process, carried back and raised again in the main process.

A warning an env or the observation check raises in a worker (an async worker, a Ray
actor) would otherwise be printed by that process, out of reach of the filters the user
set in the main process: ``warnings.simplefilter("ignore", ObservationWarning)``,
``pytest.warns``, ``-W error``. The worker records each warning it would show instead of
printing it; the records travel with the worker's next reply, and the main process raises
them again, once every worker of the request has replied, under its own filters.
"""

from __future__ import annotations

import pickle
import warnings
from typing import Any

__all__ = ["WarningRecorder", "raise_again"]

#: ``(message, category, filename, lineno)`` of one warning.
Record = tuple[str, type, str, int]


class WarningRecorder:
    """Installed once in a worker: records what ``warnings`` would show there."""

    def __init__(self) -> None:
        self.pending: list[Record] = []

    def install(self) -> None:
        warnings.showwarning = self._record

    def _record(self, message: Any, category: type, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        self.pending.append((str(message), category, filename, lineno))

    def take(self) -> list[Record]:
        """The records since the last call, each with a category the main process can unpickle."""
        pending, self.pending = self.pending, []
        return [_portable(record) for record in pending]


def _portable(record: Record) -> Record:
    message, category, filename, lineno = record
    try:
        pickle.loads(pickle.dumps(category))
        return record
    except Exception:  # a warning class defined where the main process cannot import it
        return (f"{category.__name__}: {message}", UserWarning, filename, lineno)


def raise_again(records: list[Record], quietly: bool = False) -> None:
    """Raise each recorded warning in this process, under this process's filters.

    ``quietly``: a filter that turns a warning into an error does not raise (used while
    another error is on its way to the caller, or while closing).
    """
    for message, category, filename, lineno in records:
        try:
            warnings.warn_explicit(message, category, filename, lineno)
        except Exception:
            if not quietly:
                raise
