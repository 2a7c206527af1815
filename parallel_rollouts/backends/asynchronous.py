"""The async backend: envs in spawned worker processes, writing into shared memory.

Each worker owns a contiguous slice of the envs and runs the same
:class:`~parallel_rollouts.backends.stepping.EnvGroup` as the in-process
backends, on a view of a shared-memory copy of the rollout storage. The
policy runs batched in the main process, which writes actions into the shared
``actions`` rows; a step is one 9-byte request and one 1-byte reply per worker
(see ``_worker`` for the protocol). The batch is copied out of shared memory
once, at the end of ``collect()``.

Ownership: the main process owns the workers, their connections and the
segment. :class:`_WorkerPool` holds them and frees them on every exit path:
``close()``, a failure during start-up, garbage collection of the collector,
and interpreter exit (through ``weakref.finalize``).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import signal
import time
import weakref
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, wait


import numpy as np

from ..batch_memory import BatchMemory
from ..errors import CollectorClosedError, ConfigurationError, EnvFailure, StepTimeoutError, WorkerDiedError, WorkerError
from ..spaces import check_env_spaces
from ..storage import CompletedEpisodes, RolloutStorage
from . import _worker
from .base import BackendSpec, StepwiseBackend
from .shared_memory import SharedStorage
from .slicing import pickle_env_fns, resolve_num_workers, split_envs
from .waiting import SpinThenBlock, spin_budget_seconds

__all__ = ["AsyncBackend"]

logger = logging.getLogger("parallel_rollouts")

#: Seconds ``close()`` waits for the workers to close their envs and exit before
#: terminating them, and then for terminated workers to go.
CLOSE_TIMEOUT = 2.0
START_TIMEOUT = 120.0


@dataclass
class _Worker:
    index: int
    start: int
    stop: int
    process: multiprocessing.process.BaseProcess
    connection: Connection
    alive: bool = True
    waiter: SpinThenBlock | None = None

    def describe(self) -> str:
        envs = f"env {self.start}" if self.stop - self.start == 1 else f"envs {self.start}..{self.stop - 1}"
        return f"worker {self.index} (pid {self.process.pid}, {envs})"


@dataclass
class _WorkerPool:
    """Everything the backend owns that must be freed; no reference back to the backend."""

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
                        worker.connection.send_bytes(_worker.REQUEST.pack(_worker.CLOSE, 0))
                    except OSError:
                        worker.alive = False
            for worker in self.workers:
                if not worker.alive:
                    continue
                remaining = deadline - time.monotonic()
                try:
                    if worker.connection.poll(max(remaining, 0)):
                        reply = worker.connection.recv_bytes()
                        if reply[:1] == _worker.FAILED:
                            errors.append(pickle.loads(reply[1:]))
                except (EOFError, OSError):
                    pass
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


def _shutdown_in_owner(pool: _WorkerPool, owner_pid: int) -> None:
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


class AsyncBackend(StepwiseBackend):
    def __init__(self, spec: BackendSpec, pool: _WorkerPool, step_timeout: float | None) -> None:
        self._spec = spec
        self._pool = pool
        self._workers = pool.workers
        self._step_timeout = step_timeout
        self._reuse_storage = False
        self._in_flight = False
        self._memory = BatchMemory(spec.allocate_storage)
        # Without reuse: the caller's batch, filled row by row as the policy reads
        # (so the policy's inputs are the batch's own arrays) and completed at the end.
        self._target: RolloutStorage | None = None
        # Runs on garbage collection or at interpreter exit if close() was never called,
        # but only in the process that created the pool (not in a forked child).
        self._finalizer = weakref.finalize(self, _shutdown_in_owner, pool, os.getpid())

    # -- construction ----------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        spec: BackendSpec,
        num_workers: int | None = None,
        context: str | object | None = None,
        step_timeout: float | None = None,
    ) -> AsyncBackend:
        num_workers = resolve_num_workers(num_workers, spec.num_envs)
        mp_context = _resolve_context(context)
        pickled = pickle_env_fns(spec.env_fns, "a worker process")

        pool = _WorkerPool()
        try:
            for index, (start, stop) in enumerate(split_envs(spec.num_envs, num_workers)):
                parent_end, child_end = mp_context.Pipe(duplex=True)
                process = mp_context.Process(
                    target=_worker.worker_main,
                    args=(child_end, start, pickled[start:stop]),
                    name=f"parallel-rollouts-worker-{index}",
                    daemon=True,
                )
                process.start()
                child_end.close()
                waiter = SpinThenBlock(parent_end, spin_budget_seconds())
                pool.workers.append(_Worker(index, start, stop, process, parent_end, waiter=waiter))
            cls._start(spec, pool)
        except BaseException:
            pool.shutdown(graceful=False)
            raise
        return cls(spec, pool, step_timeout)

    @staticmethod
    def _start(spec: BackendSpec, pool: _WorkerPool) -> None:
        replies = [_startup_reply(worker, "spaces") for worker in pool.workers]
        _raise_startup_errors(replies)
        # A worker's columns are known once its envs exist: a vector env spans its num_envs.
        column = 0
        for worker, reply in zip(pool.workers, replies):
            worker.start, worker.stop = column, column + len(reply)
            column = worker.stop
        env_spaces = [pair for reply in replies for pair in reply]
        observation_space, action_space = env_spaces[0]
        for index, (observation, action) in enumerate(env_spaces):
            check_env_spaces(index, observation, action, observation_space, action_space)
        spec.adopt_spaces(observation_space, action_space, num_envs=len(env_spaces))
        pool.shared = SharedStorage.create(spec.allocate_storage)
        order = _worker.AttachOrder(
            segment_name=pool.shared.name,
            observation_space=observation_space,
            action_space=action_space,
            root_seed=spec.root_seed,
            horizon=spec.horizon,
            num_envs=spec.num_envs,
            info_keys=spec.info_keys,
            core_name=spec.core_name,
            observation_check=spec.observation_check,
            group_builder=spec.group_builder,
        )
        for worker in pool.workers:
            worker.connection.send(("attach", replace(order, column_offset=worker.start)))
        _raise_startup_errors([_startup_reply(worker, "ready") for worker in pool.workers])

    # -- one rollout -----------------------------------------------------------------------

    @property
    def _storage(self) -> RolloutStorage:
        return self._pool.shared.storage

    @property
    def storage(self) -> RolloutStorage:
        """The shared-memory storage the workers write into (views; valid until close)."""
        return self._pool.shared.storage

    def start_rollout(self, reuse_storage: bool) -> RolloutStorage:
        self._reuse_storage = reuse_storage
        if reuse_storage:
            self._memory.reused(self._storage)
            self._target = None
        else:
            self._target = self._memory.fresh()
        self._request_all(_worker.BEGIN, 0)
        return self._storage

    def policy_observations(self, storage: RolloutStorage, t: int) -> list:
        if self._target is None:
            # Reused: views of shared memory, valid until the next collect() as documented.
            return super().policy_observations(storage, t)
        rows = []
        for shared_leaf, target_leaf in zip(storage.observations, self._target.observations):
            np.copyto(target_leaf[t], shared_leaf[t])
            rows.append(target_leaf[t])
        return rows

    def step(self, t: int) -> None:
        self._request_all(_worker.STEP, t)

    def abandon_rollout(self, t: int) -> None:
        self._request_all(_worker.ABANDON, t)

    def finish_rollout(self) -> tuple[RolloutStorage, CompletedEpisodes]:
        payloads = self._request_all(_worker.FINISH, 0)
        episodes = CompletedEpisodes.merge([pickle.loads(payload) for payload in payloads])
        shared = self._storage
        if self._reuse_storage:
            # Zero copies, as asked: the batch's arrays are views of shared memory that the
            # next collect overwrites. They stay valid after close() (the mapping lives
            # until the last view is gone).
            return shared, episodes
        target, self._target = self._target, None
        shared.copy_to(target, observation_rows_copied=shared.horizon)  # the rest of the one copy
        self._memory.record_final_rows(target, target.horizon)
        return target, episodes

    def request(self, command: bytes, argument: int = 0, payload: bytes = b"") -> list[bytes | None]:
        """Send one request to every worker; return each one's reply payload (``None`` for a bare "done")."""
        return self._request_all(command, argument, payload)

    def _request_all(self, command: bytes, argument: int, payload: bytes = b"") -> list[bytes | None]:
        if self._in_flight:
            # An interruption fell between a request and its replies: the replies
            # still queued would answer the wrong request.
            raise CollectorClosedError(
                "an earlier request to the workers was interrupted before all of them replied; "
                "their state is unknown. Close this collector and create a new one."
            )
        self._in_flight = True
        request = _worker.REQUEST.pack(command, argument) + payload
        for worker in self._workers:
            try:
                worker.connection.send_bytes(request)
            except OSError:
                self._raise_died(worker)
        payloads: list[bytes | None] = []
        errors: list[BaseException] = []
        deadline = None if self._step_timeout is None else time.monotonic() + self._step_timeout
        for worker in self._workers:
            reply = self._receive(worker, deadline)
            status = reply[:1]
            if status == _worker.FAILED:
                errors.append(pickle.loads(reply[1:]))
            else:
                payloads.append(reply[1:] if status == _worker.FINISHED else None)
        self._in_flight = False
        if errors:
            worker_errors = [error for error in errors if isinstance(error, WorkerError)]
            if len(worker_errors) == len(errors) and len(errors) > 1:
                raise WorkerError.from_failures([f for error in worker_errors for f in error.failures])
            raise errors[0]
        return payloads

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
                        f"{worker.describe()} did not finish within step_timeout={self._step_timeout} s; "
                        "its envs may hang. The collector is now unusable.",
                        tuple(
                            EnvFailure(index, "step", "StepTimeoutError", "timed out", "")
                            for index in range(worker.start, worker.stop)
                        ),
                    )
            return connection.recv_bytes()
        except (EOFError, ConnectionError):
            self._raise_died(worker)

    def _raise_died(self, worker: _Worker) -> None:
        worker.alive = False
        worker.process.join(1.0)
        raise _died_error(
            worker,
            "while the collector was waiting for it. If an env crashes its process (a segfault in a "
            "simulator, os._exit), run it with backend='serial' to see the error.",
        )

    def close(self) -> None:
        # Arrays kept for reuse are views of the segment: drop them so it can be unmapped.
        self._memory.release()
        self._target = None
        errors = self._pool.shutdown(graceful=True)
        self._finalizer.detach()
        for error in errors:
            logger.warning("an env raised while closing: %s", error)


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
    errors = [reply for reply in replies if isinstance(reply, BaseException)]
    if not errors:
        return
    if all(isinstance(error, WorkerError) for error in errors):
        failures = [failure for error in errors for failure in error.failures]
        if failures:
            raise WorkerError.from_failures(failures)
    raise next((error for error in errors if not isinstance(error, WorkerError)), errors[0])


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
    return _died_error(worker, "while starting up.", phase="make")


def _died_error(worker: _Worker, when: str, phase: str = "worker") -> WorkerDiedError:
    """The error for a worker process that is gone, naming it, its envs and how it ended."""
    how = _exit_description(worker.process)
    failures = tuple(EnvFailure(index, phase, "WorkerDiedError", how, "") for index in range(worker.start, worker.stop))
    return WorkerDiedError(f"{worker.describe()} {how} {when}", failures)
