"""Run one function in a freshly spawned Python process, bounded in time, leaving nothing behind.

The async backend and Ray build envs in processes that start from nothing and
receive the factory by ``cloudpickle``; this does the same for one call, so a
check sees what a worker would. The child's result, or the error it raised (as
text, with its traceback), comes back through a pipe; a child that does not
answer within ``timeout`` seconds is killed.
"""

from __future__ import annotations

import multiprocessing
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any

import cloudpickle

__all__ = ["SpawnedFailure", "run_spawned"]


@dataclass(frozen=True)
class SpawnedFailure:
    """Why the spawned call gave no result: the error it raised, a timeout, or the process dying."""

    kind: str  # "error", "timeout" or "died"
    message: str
    traceback: str = ""


def _child(connection, payload: bytes) -> None:
    try:
        function, arguments = cloudpickle.loads(payload)
        result = ("ok", function(*arguments))
    except BaseException as error:  # everything goes back to the parent, which reports it
        message = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        result = ("error", message, traceback.format_exc())
    try:
        connection.send(result)
    except Exception as error:  # the result itself does not pickle
        connection.send(("error", f"the result could not be sent back: {type(error).__name__}: {error}", ""))
    finally:
        connection.close()


def run_spawned(function: Callable, arguments: tuple, timeout: float) -> Any:
    """``function(*arguments)`` in a new spawned process; its result, or a :class:`SpawnedFailure`.

    ``function`` and ``arguments`` travel by ``cloudpickle``; a pickling error
    here propagates to the caller. The child is joined (killed first if needed)
    and the pipe closed on every path.
    """
    payload = cloudpickle.dumps((function, arguments))
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(sender, payload), name="parallel-rollouts-check", daemon=True)
    try:
        process.start()
        sender.close()
        ready = wait([receiver, process.sentinel], timeout)
        if receiver in ready:
            try:
                reply = receiver.recv()
            except (EOFError, OSError):
                reply = None
            if reply is not None:
                if reply[0] == "ok":
                    return reply[1]
                return SpawnedFailure("error", reply[1], reply[2])
        if not ready:
            return SpawnedFailure("timeout", f"the spawned process gave no answer within {timeout:g} s")
        process.join(5.0)
        return SpawnedFailure("died", f"the spawned process exited with code {process.exitcode} before answering")
    finally:
        if process.is_alive():
            process.kill()
        if process.pid is not None:
            process.join(10.0)
            process.close()
        receiver.close()
        if not sender.closed:
            sender.close()
