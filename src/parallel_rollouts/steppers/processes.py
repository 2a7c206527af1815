"""The ``async`` stepper: envs in worker processes, stepped one row at a time on request.

The policy runs batched in the main process, which writes actions into the shared
``actions`` rows; a step is one 9-byte request and one 1-byte reply per worker (see
:mod:`parallel_rollouts.processes.protocol`). The workers write a fresh batch straight
into a segment of its own (:mod:`~parallel_rollouts.processes.batch_segments`), or with
``reuse_buffers=True`` the pool's working segment, handed out again on every collect.

With ``max_restarts``, a worker that dies or overruns ``step_timeout`` at step ``t`` is
replaced at once; its envs sit out the rest of the rollout (their rows from ``t`` on are
lost, see :meth:`ProcessStepper.lost_from_rows`) and join the next one with fresh episodes.

:class:`ProcessVectorStepper` steps a ``ParallelVectorEnv(backend="async")``'s envs on the same
workers: row 0 of the working segment, one request per call, no worker ever replaced (a lost
one breaks the vector env).
"""

from __future__ import annotations

import pickle

import numpy as np

from ..errors import ConfigurationError
from ..processes import protocol
from ..processes.batch_segments import BatchSegments
from ..processes.forwarded_warnings import raise_again
from ..processes.pool import WorkerPool
from ..processes.startup import unguarded_main_error
from ..config.spec import RolloutSpec
from ..config.worker_options import WorkerOptions
from ..data.storage import CompletedEpisodes, RolloutStorage
from .base import OnFailure, OnFinished, RolloutStepper, VectorStepper
from .ready_first import WorkerQueues

__all__ = ["ProcessStepper", "ProcessVectorStepper"]


class ProcessStepper(RolloutStepper):
    """Per-step stepping of a :class:`WorkerPool`; parts of it can step while the main process works."""

    def __init__(self, pool: WorkerPool) -> None:
        self.pool = pool
        self.layout = pool.layout
        self.working_storage = pool.shared.storage
        #: Segments a fresh batch is written into in place (``BatchMemory`` takes them).
        self.batch_segments = BatchSegments(pool.layout.allocate_storage, read_only_mirrors=pool.layout.policy_inputs == "protected")
        # Per rollout: the row each env's worker was lost at (horizon: not lost), and the
        # row each worker's step in flight is for.
        self._lost_from: np.ndarray | None = None
        self._replaced: list[int] = []
        self._replaced_between: list[int] = []
        self._rows_in_flight: dict[int, int] = {}

    @classmethod
    def build(cls, spec: RolloutSpec, *, options: WorkerOptions) -> ProcessStepper:
        return cls(WorkerPool.start(spec, options=options))

    def take_warnings(self) -> list:
        return self.pool.take_warnings()

    @property
    def num_envs(self) -> int:
        return self.layout.num_envs

    def begin(self, storage: RolloutStorage) -> None:
        segment = b"" if storage is self.working_storage else self.batch_segments.name_of(storage)
        if segment is None:
            raise RuntimeError("worker processes write only into shared storage: the working copy or a batch segment.")
        segment = segment.encode() if segment else segment
        self._lost_from = None
        # Envs whose worker was replaced since the last rollout (lost while one was dropped):
        # they start this one at fresh episodes, which the batch lists.
        self._replaced, self._replaced_between = self._replaced_between, []
        self.pool.take_wait_seconds()
        # A worker found dead here (killed between rollouts) loses no row of this one: its
        # replacement begins with the others, its envs at the start of fresh episodes.
        pending = self.pool.workers
        while pending:
            self.pool.send(protocol.BEGIN, len(segment), pending, segment)
            replies, losses = self.pool.receive_all(pending)
            self.pool.raise_failures([reply for reply in replies if reply is not None])
            self.pool.raise_losses(losses)
            for worker, _ in losses:
                self.pool.replace(worker)
                self._replaced.extend(range(worker.start, worker.stop))
            pending = [worker for worker, _ in losses]

    def step(self, t: int) -> None:
        self.step_begin(t, self.pool.workers)
        self.step_end(self.pool.workers)

    def abandon(self, t: int) -> None:
        self._replaced_between.extend(self._request_replacing_losses(protocol.ABANDON, t, self.pool.workers))

    def finish(self) -> CompletedEpisodes:
        """The episodes the rollout's workers booked.

        A worker lost after its last step (before or while it answers) wrote every row of
        its envs, but the books of the episodes they ended in this rollout went with it:
        its envs are listed as replaced, their rows kept, those episodes not booked.
        """
        replies = []
        self._replaced.extend(self._request_replacing_losses(protocol.FINISH, 0, self.pool.workers, replies))
        return CompletedEpisodes.merge([pickle.loads(reply[1:]) for reply in replies])

    def lost_from_rows(self) -> np.ndarray | None:
        """``[N]``: the first row of each env lost in this rollout (horizon: none); ``None``: none lost."""
        return self._lost_from

    def replaced_env_indices(self) -> np.ndarray:
        """The envs whose worker was replaced during this rollout (sorted)."""
        lost = [] if self._lost_from is None else np.flatnonzero(self._lost_from < self.layout.horizon).tolist()
        return np.array(sorted(set(self._replaced) | set(lost)), dtype=np.int64)

    def take_wait_seconds(self) -> np.ndarray:
        return self.pool.take_wait_seconds()

    # -- stepping part of the workers while the main process works --------------------------

    def step_begin(self, t: int, workers: list) -> None:
        """Start step ``t`` of ``workers``' envs; :meth:`step_end` waits for it."""
        active = self._active(workers)
        self.pool.send(protocol.STEP, t, active)
        for worker in active:
            self._rows_in_flight[worker.index] = t

    def step_end(self, workers: list) -> None:
        active = self._active(workers)
        replies, losses = self.pool.receive_all(active)
        self._take_replies(replies, losses)

    def abandon_part(self, t: int, workers: list) -> None:
        self._replaced_between.extend(self._request_replacing_losses(protocol.ABANDON, t, workers))

    def close(self) -> None:
        self.working_storage = None
        self.batch_segments.release_all()
        self.pool.close()

    # -- losses -----------------------------------------------------------------------------

    def _active(self, workers: list) -> list:
        """Those of ``workers`` still in this rollout (a replacement joins the next one)."""
        lost = self._lost_from
        if lost is None:
            return workers
        horizon = self.layout.horizon
        return [worker for worker in workers if lost[worker.start] == horizon]

    def _request_replacing_losses(self, command: bytes, argument: int, workers: list, replies: list | None = None) -> list[int]:
        """Send ``command`` to those of ``workers`` still in the rollout; replace the ones lost
        before or while answering (or raise when that is not allowed). The envs of the replaced
        workers; their replies, if ``replies`` is given, are appended to it."""
        active = self._active(workers)
        self.pool.send(command, argument, active)
        answers, losses = self.pool.receive_all(active)
        answers = [answer for answer in answers if answer is not None]
        self.pool.raise_failures(answers)
        self.pool.raise_losses(losses)
        replaced = []
        for worker, _ in losses:
            self.pool.replace(worker)
            replaced.extend(range(worker.start, worker.stop))
        if replies is not None:
            replies.extend(answers)
        return replaced

    def _take_replies(self, replies: list, losses: list) -> None:
        """Raise what the envs raised; replace lost workers (or raise when that is not allowed)."""
        self.pool.raise_failures([reply for reply in replies if reply is not None])
        self.pool.raise_losses(losses)
        for worker, _ in losses:
            if self._lost_from is None:
                self._lost_from = np.full(self.num_envs, self.layout.horizon, dtype=np.int64)
            self._lost_from[worker.start : worker.stop] = self._rows_in_flight.get(worker.index, 0)
            self.pool.replace(worker)


class ProcessVectorStepper(VectorStepper):
    """A ``ParallelVectorEnv``'s envs on a :class:`WorkerPool`, each worker hosting one group of its slice."""

    def __init__(self, pool: WorkerPool, on_failure: OnFailure, on_finished: OnFinished) -> None:
        self.pool = pool
        self.layout = pool.layout
        self.storage = pool.shared.storage
        self._on_failure = on_failure
        self._ready_first = WorkerQueues(pool, on_finished, on_failure)

    @classmethod
    def start(cls, spec: RolloutSpec, options: WorkerOptions, on_failure: OnFailure, on_finished: OnFinished) -> ProcessVectorStepper:
        """Start the workers and have each begin its group on the working segment."""
        try:
            pool = WorkerPool.start(spec, options=options)
        except ConfigurationError as error:
            if str(error) == str(unguarded_main_error()):
                # The pool speaks of collectors; here the user created a ParallelVectorEnv.
                raise unguarded_main_error("the ParallelVectorEnv") from None
            raise
        try:
            stepper = cls(pool, on_failure, on_finished)
        except BaseException:
            pool.close()
            raise
        try:
            stepper._request(protocol.BEGIN)
        except BaseException:
            stepper.close()
            raise
        return stepper

    def handle(self, request: tuple) -> list:
        # Envs sent and not yet received: their steps finish first (reported as done), as in this
        # process, where `send_envs` steps at once; the request then sees the envs as they would.
        self._ready_first.finish_in_flight()
        return self._request(protocol.HANDLE, pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL))

    def send_envs(self, env_ids: np.ndarray) -> None:
        self._ready_first.send(env_ids)

    def wait_envs(self) -> None:
        self._ready_first.take_finished()

    def drain_envs(self) -> None:
        self._ready_first.drain()

    def close(self) -> None:
        # This object's views of the shared segment go first, so that closing the pool unmaps
        # it now rather than when this object is dropped.
        self.storage = None
        self.pool.close()

    def _request(self, command: bytes, payload: bytes = b"") -> list:
        self._send(command, payload)
        return self._receive()

    def _send(self, command: bytes = protocol.STEP, payload: bytes = b"") -> None:
        """Send one request to every worker (by default a step); :meth:`_receive` takes the replies."""
        try:
            self.pool.send(command, 0, payload=payload)
        except BaseException as error:
            self._on_failure(error)
            raise

    def _receive(self) -> list:
        """Every worker's reply to the request sent, unpickled, in worker order (``None`` where empty)."""
        pool = self.pool
        try:
            replies = pool.receive()
            pool.raise_failures(replies)
        except BaseException as error:
            self._on_failure(error)
            raise_again(pool.take_warnings(), quietly=True)
            raise
        # The request is complete on every worker: a warning made an error loses only its result.
        raise_again(pool.take_warnings())
        replies = [reply[1:] if reply[:1] == protocol.FINISHED else None for reply in replies]
        return [None if reply is None else pickle.loads(reply) for reply in replies]

    # A step is a request like any other (the pool sends a bare STEP by the doorbell where it has
    # one); these names save the step path a call each.
    start_step = _send
    finish_step = _receive
