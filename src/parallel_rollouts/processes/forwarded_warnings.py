"""Warnings raised in a worker process, carried back and raised again in the main process.

A warning an env or the observation check raises in a worker (an async worker, a Ray
actor) would otherwise be printed by that process, out of reach of the filters the user
set in the main process: ``warnings.simplefilter("ignore", ObservationWarning)``,
``pytest.warns``, ``-W error``. The worker drops the filters it inherited (a ``-W error``
passed on to it would make the warning an env failure there) and records the first
occurrence of each warning at each place instead of printing it; the records travel with
the worker's next reply, and the main process raises them again under its own filters
when the request (for the collector: the whole rollout) is complete.
"""

from __future__ import annotations

import pickle
import sys
import warnings
from typing import Any

__all__ = ["WarningRecorder", "raise_again"]

#: ``(message, category, filename, lineno, module)`` of one warning.
Record = tuple[str, type, str, int, "str | None"]


def _module_of(filename: str) -> str | None:
    """The name of the loaded module defined in ``filename``, so that filters by module match."""
    for name, module in list(sys.modules.items()):
        if getattr(module, "__file__", None) == filename:
            return name
    return None


class WarningRecorder:
    """Installed once in a worker: records what ``warnings`` would show there."""

    def __init__(self) -> None:
        self.pending: list[Record] = []

    def install(self) -> None:
        warnings.resetwarnings()
        warnings.simplefilter("default")
        warnings.showwarning = self._record

    def _record(self, message: Any, category: type, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        self.pending.append((str(message), category, filename, lineno, _module_of(filename)))

    def take(self) -> list[Record]:
        """The records since the last call, each with a category the main process can unpickle."""
        pending, self.pending = self.pending, []
        return [_portable(record) for record in pending]


def _portable(record: Record) -> Record:
    message, category, filename, lineno, module = record
    try:
        pickle.loads(pickle.dumps(category))
        return record
    except Exception:  # a warning class defined where the main process cannot import it
        return (f"{category.__name__}: {message}", UserWarning, filename, lineno, module)


def raise_again(records: list[Record], quietly: bool = False) -> None:
    """Raise each recorded warning in this process, under this process's filters.

    ``quietly``: a filter that turns a warning into an error does not raise (used while
    another error is on its way to the caller, or while closing).
    """
    for message, category, filename, lineno, module in records:
        try:
            warnings.warn_explicit(message, category, filename, lineno, module=module)
        except Exception:
            if not quietly:
                raise
