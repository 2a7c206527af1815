"""The pool of worker processes behind ``backend="async"``.

Each worker owns a contiguous slice of the envs and runs the same
:class:`~parallel_rollouts.env_group.EnvGroup` as the in-process backends, on a view
of a shared-memory copy of the rollout storage; with rollout workers it also holds a
copy of the policy (see ``worker_main`` for the protocol).

Ownership: the main process owns the workers, their connections and the segments.
:class:`WorkerPool` holds them and frees them on every exit path: ``close()``, a
failure during start-up, garbage collection of the collector, and interpreter exit
(through ``weakref.finalize``).
"""

from __future__ import annotations

import logging
import multiprocessing
import sys
import os
import pickle
import signal
import time
import weakref
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, wait


from ..errors import CollectorClosedError, ConfigurationError, EnvFailure, StepTimeoutError, WorkerDiedError, WorkerError
from ..spaces import check_env_spaces
from ..spec import RolloutSpec
from ..failures import merged_failure
from . import worker_main as protocol
from .forwarded_warnings import raise_again
from .shared_memory import SharedStorage
from .slicing import pickle_env_fns, resolve_num_workers, split_envs
from .waiting import SpinThenBlock, spin_budget_seconds

__all__ = ["WorkerPool"]

logger = logging.getLogger("parallel_rollouts")

#: Seconds ``close()`` waits for the workers to close their envs and exit before
#: terminating them, and then for terminated workers to go.
CLOSE_TIMEOUT = 2.0
START_TIMEOUT = 120.0

#: Exit status of a worker that found itself running the main script's top level again,
#: because the script lacks an ``if __name__ == "__main__":`` guard.
UNGUARDED_MAIN_EXIT_CODE = 86



@dataclass
class _Worker:
    index: int
    start: int
    stop: int
    process: multiprocessing.process.BaseProcess
    connection: Connection
    alive: bool = True
    waiter: SpinThenBlock | None = None
    #: A request was sent and its reply not read yet (an interruption can leave it so).
    awaiting_reply: bool = False

    def describe(self) -> str:
        envs = f"env {self.start}" if self.stop - self.start == 1 else f"envs {self.start}..{self.stop - 1}"
        return f"worker {self.index} (pid {self.process.pid}, {envs})"


@dataclass
class _Resources:
    """Everything the pool owns that must be freed; no reference back to the pool."""

    workers: list[_Worker] = field(default_factory=list)
    shared: SharedStorage | None = None
    closed: bool = False

    def shutdown(self, graceful: bool = True) -> list[WorkerError]:
        """Stop every worker (bounded in time) and release the segment. Idempotent."""
        if self.closed:
            return []
        self.closed = True
        errors: list[WorkerError] = []
        deadline = time.monotonic() + CLOSE_TIMEOUT
        if graceful:
            for worker in self.workers:
                if worker.alive:
                    try:
                        worker.connection.send_bytes(protocol.REQUEST.pack(protocol.CLOSE, 0))
                    except OSError:
                        worker.alive = False
            for worker in self.workers:
                if not worker.alive:
                    continue
                remaining = deadline - time.monotonic()
                try:
                    if worker.connection.poll(max(remaining, 0)):
                        reply = worker.connection.recv_bytes()
                        if reply[:1] == protocol.WARNED:
                            records, reply = pickle.loads(reply[1:])
                            raise_again(records, quietly=True)
                        if reply[:1] == protocol.FAILED:
                            errors.append(pickle.loads(reply[1:]))
                except (EOFError, OSError):
                    pass
                except Exception:  # a reply this process cannot unpickle: closing goes on
                    logger.debug("unreadable close reply from a worker", exc_info=True)
        for worker in self.workers:
            worker.process.join(max(deadline - time.monotonic(), 0) if graceful else 0)
        for worker in self.workers:
            if worker.process.is_alive():
                worker.process.terminate()
        for worker in self.workers:
            worker.process.join(CLOSE_TIMEOUT)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(CLOSE_TIMEOUT)
            worker.connection.close()
            worker.alive = False
            if hasattr(worker.process, "close") and not worker.process.is_alive():
                worker.process.close()
        if self.shared is not None:
            self.shared.release()
            self.shared = None
        return errors


def _shutdown_in_owner(pool: _Resources, owner_pid: int) -> None:
    if os.getpid() == owner_pid:
        pool.shutdown(graceful=True)


def _exit_description(process) -> str:
    code = process.exitcode
    if code is None:
        return "is unresponsive"
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class WorkerPool:
    """Worker processes, each hosting a contiguous slice of the envs, and the shared storage.

    ``exchange(command, argument, workers)`` sends one request to each of ``workers`` and
    returns their replies in order; a dead worker raises :class:`WorkerDiedError`, a
    worker silent past ``step_timeout`` raises :class:`StepTimeoutError`. Failure replies
    are returned as they are, for the caller to interpret (see :meth:`raise_failures`).
    """

    def __init__(self, spec: RolloutSpec, resources: _Resources, step_timeout: float | None) -> None:
        self.spec = spec
        self._resources = resources
        self.workers = resources.workers
        self.step_timeout = step_timeout
        # Warnings the workers raised, sent with their replies; the runner raises them in
        # this process once its rollout is complete (take_warnings).
        self._forwarded: list = []
        # Runs on garbage collection or at interpreter exit if close() was never called,
        # but only in the process that created the pool (not in a forked child).
        self._finalizer = weakref.finalize(self, _shutdown_in_owner, resources, os.getpid())

    # -- construction ----------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        spec: RolloutSpec,
        num_workers: int | None = None,
        context: str | object | None = None,
        step_timeout: float | None = None,
        policy: protocol.ShippedPolicy | None = None,
    ) -> WorkerPool:
        """Start the workers, check every env's spaces, create the segment, attach the workers.

        With ``policy`` (rollout workers), each worker builds its own copy of the policy.
        """
        resources = _Resources()
        try:
            _exit_if_importing_the_main_script()
            num_workers = resolve_num_workers(num_workers, spec.num_envs)
            mp_context = _resolve_context(context)
            pickled = pickle_env_fns(spec.env_fns, "a worker process")
            for index, (start, stop) in enumerate(split_envs(spec.num_envs, num_workers)):
                parent_end, child_end = mp_context.Pipe(duplex=True)
                process = mp_context.Process(
                    target=protocol.worker_main,
                    args=(child_end, start, pickled[start:stop]),
                    name=f"parallel-rollouts-worker-{index}",
                    daemon=True,
                )
                process.start()
                child_end.close()
                waiter = SpinThenBlock(parent_end, spin_budget_seconds())
                resources.workers.append(_Worker(index, start, stop, process, parent_end, waiter=waiter))
            _attach(spec, resources, policy)
        except BaseException:
            resources.shutdown(graceful=False)
            raise
        return cls(spec, resources, step_timeout)

    @property
    def shared(self) -> SharedStorage:
        return self._resources.shared

    # -- requests --------------------------------------------------------------------------

    def send(self, command: bytes, argument: int, workers: list[_Worker] | None = None, payload: bytes = b"") -> None:
        """Send one request (a payload may follow the 9-byte header) to each of ``workers``."""
        request = protocol.REQUEST.pack(command, argument) + payload
        workers = self.workers if workers is None else workers
        if any(worker.awaiting_reply for worker in workers):
            # An interruption fell between a request and its reply: the reply still
            # queued would answer the wrong request.
            raise CollectorClosedError(
                "an earlier request to the workers was interrupted before all of them replied; "
                "their state is unknown. Close this collector and create a new one."
            )
        for worker in workers:
            try:
                worker.connection.send_bytes(request)
            except OSError:
                self._raise_died(worker)
            worker.awaiting_reply = True

    def receive(self, workers: list[_Worker] | None = None, steps: int = 1) -> list[bytes]:
        """One reply from each of ``workers`` (all by default), in order, within ``steps`` step timeouts."""
        deadline = None if self.step_timeout is None else time.monotonic() + self.step_timeout * steps
        return [self._receive(worker, deadline) for worker in (self.workers if workers is None else workers)]

    def take_warnings(self) -> list:
        """The warnings the workers sent since the last call (``forwarded_warnings`` records)."""
        forwarded, self._forwarded = self._forwarded, []
        return forwarded

    def exchange(
        self, command: bytes, argument: int, workers: list[_Worker] | None = None, steps: int = 1, payload: bytes = b""
    ) -> list[bytes]:
        self.send(command, argument, workers, payload)
        return self.receive(workers, steps)

    def request(
        self, command: bytes, argument: int = 0, workers: list[_Worker] | None = None, payload: bytes = b""
    ) -> list[bytes | None]:
        """``exchange``, raising what the workers reported; each worker's reply payload in
        order (``None`` for a bare "done")."""
        replies = self.exchange(command, argument, workers, payload=payload)
        self.raise_failures(replies)
        return [reply[1:] if reply[:1] == protocol.FINISHED else None for reply in replies]

    @staticmethod
    def raise_failures(replies: list[bytes]) -> None:
        """Raise every env failure reported, together; else the first other error."""
        error = merged_failure([pickle.loads(reply[1:]) for reply in replies if reply[:1] == protocol.FAILED])
        if error is not None:
            raise error

    def _receive(self, worker: _Worker, deadline: float | None) -> bytes:
        connection = worker.connection
        try:
            if not worker.waiter.spin() and deadline is not None:
                remaining = deadline - time.monotonic()
                ready = wait([connection, worker.process.sentinel], max(remaining, 0))
                if connection not in ready:
                    if worker.process.sentinel in ready:
                        self._raise_died(worker)
                    raise StepTimeoutError(
                        f"{worker.describe()} did not finish within step_timeout={self.step_timeout} s "
                        "per step; "
                        "its envs may hang. The collector is now unusable.",
                        tuple(
                            EnvFailure(index, "step", "StepTimeoutError", "timed out", "")
                            for index in range(worker.start, worker.stop)
                        ),
                    )
            reply = connection.recv_bytes()
        except (EOFError, ConnectionError):
            self._raise_died(worker)
        worker.awaiting_reply = False
        if reply[:1] == protocol.WARNED:
            records, reply = pickle.loads(reply[1:])
            self._forwarded.extend(records)
        return reply

    def _raise_died(self, worker: _Worker) -> None:
        worker.alive = False
        worker.process.join(1.0)
        raise _died_error(
            worker,
            "while the collector was waiting for it. If an env crashes its process (a segfault in a "
            "simulator, os._exit), run it with backend='serial' to see the error.",
        )

    def close(self) -> None:
        errors = self._resources.shutdown(graceful=True)
        self._finalizer.detach()
        for error in errors:
            logger.warning("an env raised while closing: %s", error)


def _attach(spec: RolloutSpec, resources: _Resources, policy) -> None:
    replies = [_startup_reply(worker, "spaces") for worker in resources.workers]
    _raise_startup_errors(replies)
    # A worker's columns are known once its envs exist: a vector env spans its num_envs.
    column = 0
    for worker, reply in zip(resources.workers, replies):
        worker.start, worker.stop = column, column + len(reply)
        column = worker.stop
    env_spaces = [pair for reply in replies for pair in reply]
    observation_space, action_space = env_spaces[0]
    for index, (observation, action) in enumerate(env_spaces):
        check_env_spaces(index, observation, action, observation_space, action_space)
    spec.adopt_spaces(observation_space, action_space, num_envs=len(env_spaces))
    resources.shared = SharedStorage.create(spec.allocate_storage)
    order = protocol.AttachOrder(
        segment_name=resources.shared.name,
        observation_space=observation_space,
        action_space=action_space,
        root_seed=spec.root_seed,
        horizon=spec.horizon,
        num_envs=spec.num_envs,
        info_keys=spec.info_keys,
        core_name=spec.core_name,
        observation_check=spec.observation_check,
        group_builder=spec.group_builder,
        typed_actions=spec.typed_actions,
        policy=policy,
    )
    for worker in resources.workers:
        worker.connection.send(("attach", replace(order, column_offset=worker.start)))
    _raise_startup_errors([_startup_reply(worker, "ready") for worker in resources.workers])


def _resolve_context(context):
    if context is None:
        return multiprocessing.get_context("spawn")
    if isinstance(context, str):
        try:
            return multiprocessing.get_context(context)
        except ValueError as error:
            raise ConfigurationError(
                f"`context` must be a multiprocessing start method {multiprocessing.get_all_start_methods()!r} "
                f"or a context; got {context!r}."
            ) from error
    if hasattr(context, "Process") and hasattr(context, "Pipe"):
        return context
    raise ConfigurationError(f"`context` must be a start method name or a multiprocessing context; got {context!r}.")


def _raise_startup_errors(replies: list) -> None:
    """Raise what the workers reported: every env failure together, else the first other error."""
    error = merged_failure([reply for reply in replies if isinstance(reply, BaseException)])
    if error is not None:
        raise error


def _exit_if_importing_the_main_script() -> None:
    """In a worker still importing the user's main script: leave quietly, with a status the parent reads.

    A spawned worker imports the main script before it runs anything else
    (multiprocessing marks that phase as ``_inheriting``). Reaching a collector's
    construction then means the script creates it at top level, unguarded;
    starting workers from here would fail with a long traceback in every
    worker. The parent turns this exit status into one error instead.
    """
    if getattr(multiprocessing.process.current_process(), "_inheriting", False):
        raise SystemExit(UNGUARDED_MAIN_EXIT_CODE)


def unguarded_main_error(created: str = "the collector") -> ConfigurationError:
    """The error for a main script that starts workers at top level; ``created`` names what it creates."""
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    script = f"your script ({main_file})" if main_file else "your main module"
    return ConfigurationError(
        f"backend='async' starts each worker as a new Python process, which imports {script} before anything "
        f"else; the script creates {created} at top level, so every worker tried to create one too. Put the "
        f'code that creates and uses {created} under `if __name__ == "__main__":` (and call '
        "`multiprocessing.freeze_support()` first there if you freeze the program into an executable)."
    )


def _startup_reply(worker: _Worker, expected: str):
    """One start-up message from a worker, or the exception it reports (bounded in time)."""
    connection = worker.connection
    ready = wait([connection, worker.process.sentinel], START_TIMEOUT)
    try:
        if connection in ready:
            kind, payload = connection.recv()
            if kind == expected:
                return payload
            if kind == "error":
                return payload
            return WorkerError(f"{worker.describe()} sent an unexpected start-up message {kind!r}.")
    except (EOFError, OSError):
        pass
    worker.process.join(1.0)
    if not ready:
        return WorkerError(f"{worker.describe()} did not start within {START_TIMEOUT} s.")
    if worker.process.exitcode == UNGUARDED_MAIN_EXIT_CODE:
        return unguarded_main_error()
    return _died_error(worker, "while starting up.", phase="make")


def _died_error(worker: _Worker, when: str, phase: str = "worker") -> WorkerDiedError:
    """The error for a worker process that is gone, naming it, its envs and how it ended."""
    how = _exit_description(worker.process)
    failures = tuple(EnvFailure(index, phase, "WorkerDiedError", how, "") for index in range(worker.start, worker.stop))
    return WorkerDiedError(f"{worker.describe()} {how} {when}", failures)
