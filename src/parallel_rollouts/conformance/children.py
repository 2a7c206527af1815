"""The child processes of this process that are still running, by pid, with their command lines.

An env that starts processes (a simulator server, a vector env's workers) must
stop them in ``close()``; otherwise every worker that builds the env leaves them
behind. On Linux the children are read from ``/proc``, every kind of child
included (``subprocess``, ``multiprocessing``, ``os.fork``); elsewhere only
``multiprocessing`` children are seen (``multiprocessing.active_children``).
Only direct children count: a grandchild whose parent has exited belongs to
``init`` by then. Zombies (exited, not yet reaped) are not running and do not
count, nor do the helpers ``multiprocessing`` keeps for the whole life of the
process (its resource tracker and forkserver).
"""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

__all__ = ["running_children"]

_PROC = Path("/proc")
_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def running_children() -> dict[int, str]:
    """This process's running children: pid -> command line (empty when it cannot be read)."""
    if not (_PROC / str(os.getpid()) / "stat").exists():
        return {child.pid: child.name for child in multiprocessing.active_children() if child.pid is not None}
    parent = os.getpid()
    children = {}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # "pid (command) state ppid ...": the command may hold spaces and parentheses.
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
            if int(fields[1]) != parent or fields[0] == "Z":
                continue
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError, ValueError):
            continue  # it exited while being read
        if not any(helper in command for helper in _HELPERS):
            children[int(entry.name)] = command
    return children
