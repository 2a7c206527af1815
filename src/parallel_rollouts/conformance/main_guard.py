"""Whether the main script makes a call as it is imported, outside ``if __name__ == "__main__":``.

``check_env`` and ``advise`` start processes with the ``spawn`` method, and a
spawned process imports the main script again (as ``__mp_main__``) before it
runs anything. A script that calls ``check_env`` at its top level, unguarded,
would call it again there: in the spawned process, which then starts its own
and fails with ``multiprocessing``'s "bootstrapping phase" error, reported as
the env's fault. :func:`unguarded_call` finds that case from the call stack and
the script's source, before any process starts; :func:`refuse_in_spawned_import`
stops the call inside a process that is importing the script anyway.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from types import FrameType

from ..errors import ConfigurationError

__all__ = ["UnguardedCall", "refuse_in_spawned_import", "unguarded_call"]

_MAIN_NAMES = ("__main__", "__mp_main__")


@dataclass(frozen=True)
class UnguardedCall:
    """The script that makes the call at import time, and the line of its top level that does."""

    path: str
    line: int

    def explain(self, call: str) -> str:
        return (
            f"`{call}` is called at the top level of {self.path} (line {self.line}), outside "
            "`if __name__ == \"__main__\":`. It starts processes with the 'spawn' method, and each imports "
            f"that script again, which would run `{call}` again inside it."
        )

    @staticmethod
    def fix() -> str:
        return (
            "put the script's code under `if __name__ == \"__main__\":` (definitions such as the env factory "
            "stay at the top level, where the spawned process finds them)"
        )


def _top_level_frame(frame: FrameType | None) -> FrameType | None:
    """The main script's module-level frame nearest the call, if the call came through one.

    The nearest: a spawned process's own ``__main__`` (``python -c``'s bootstrap) lies further out.
    """
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") in _MAIN_NAMES:
            return frame
        frame = frame.f_back
    return None


def _inside_name_test(tree: ast.Module, line: int) -> bool:
    """Whether ``line`` lies in a branch of an ``if`` that tests ``__name__``, the guard's idiom."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        if not any(isinstance(part, ast.Name) and part.id == "__name__" for part in ast.walk(node.test)):
            continue
        for statement in node.body + node.orelse:
            if statement.lineno <= line <= (statement.end_lineno or statement.lineno):
                return True
    return False


def unguarded_call(skip_frames: int = 1) -> UnguardedCall | None:
    """Where the main script's top level makes the current call outside a ``__name__`` test; else ``None``.

    ``None`` also when there is no script a spawned process would import (an
    interactive session, ``python -c``, a notebook) or its source cannot be read.
    """
    frame = _top_level_frame(sys._getframe(skip_frames))
    if frame is None:
        return None
    path = frame.f_globals.get("__file__")
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as file:
            tree = ast.parse(file.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return None
    line = frame.f_lineno
    if line is None or _inside_name_test(tree, line):
        return None
    return UnguardedCall(path, line)


def refuse_in_spawned_import(call: str) -> None:
    """Raise when this process is a spawned child still importing the main script, which makes ``call``."""
    frame = _top_level_frame(sys._getframe(1))
    if frame is None or frame.f_globals.get("__name__") != "__mp_main__":
        return
    path = frame.f_globals.get("__file__", "the main script")
    raise ConfigurationError(
        f"{UnguardedCall(path, frame.f_lineno or 0).explain(call)} This is such a process: "
        f"{UnguardedCall.fix()}."
    )
