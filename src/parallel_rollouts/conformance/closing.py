"""Closes cleanly: ``close()`` returns, and leaves none of the env's child processes running.

Every worker and actor builds the env and closes it when the collector closes;
a ``close()`` that raises or hangs breaks that shutdown, and processes the env
started and did not stop outlive it (one set per worker, per run). Which
processes are seen, and where, is said in :mod:`.children`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from .children import running_children
from .guard import Guarded
from .report import CheckResult, CheckStatus, counted

__all__ = ["CLOSES", "check_closes"]

CLOSES = "closes cleanly"

# A process told to stop in close() may take a moment to exit; one still running after this is left over.
_GRACE_S = 2.0
_POLL_S = 0.05


def check_closes(close: Guarded, children_before: Mapping[int, str]) -> CheckResult:
    """``close`` is the guarded ``close()`` of the first env; the children are compared with those from before."""
    leftover = _leftover_children(children_before)
    if close.instead is not None:
        if not leftover:
            return close.instead
        return CheckResult(close.instead.name, close.instead.status,
                           f"{close.instead.reason}; {_describe(leftover)}", close.instead.fix)
    if leftover:
        return CheckResult(
            CLOSES,
            CheckStatus.WARN,
            _describe(leftover),
            "stop the processes the env starts in its close() (terminate them, then wait for them): every "
            "worker that builds the env would leave its own behind",
        )
    return CheckResult(CLOSES, CheckStatus.PASS, "close() returned, and no child process of the env is left running")


def _leftover_children(before: Mapping[int, str]) -> dict[int, str]:
    deadline = time.monotonic() + _GRACE_S
    while True:
        leftover = {pid: command for pid, command in running_children().items() if pid not in before}
        if not leftover or time.monotonic() >= deadline:
            return leftover
        time.sleep(_POLL_S)


def _describe(leftover: Mapping[int, str]) -> str:
    processes = ", ".join(f"pid {pid} ({command[:60] or '?'})" for pid, command in sorted(leftover.items()))
    return f"{counted(len(leftover), 'child process', 'child processes')} still running after every env was closed: {processes}"
