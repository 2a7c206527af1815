"""Ready-first stepping for :class:`~parallel_rollouts.ParallelVectorEnv`: ``send`` some envs'
actions, ``recv`` the first ``batch_size`` envs to finish, so a slow env stalls only itself.

Each worker steps the envs it was sent as one request; while it is busy, envs of its
slice sent again wait in its queue and go out the moment it replies. ``recv`` returns
envs in the order their replies were read (within one reply, in the order they were sent). The order is
recorded (:attr:`ReadyFirst.served`): passed back as ``serve_order``, ``recv`` returns
exactly those envs in exactly that order, waiting for them, so a run is replayed step for
step (each env's own trajectory depends only on its seed and its actions; what the
order changes is which envs a policy sees together).

:class:`ReadyFirst` keeps the books; :class:`WorkerQueues` sends the steps to a worker pool
and reads the replies (in this process, :class:`~.in_process.InProcessVectorStepper` steps
the envs sent at once).
"""

from __future__ import annotations

import pickle
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ConfigurationError
from ..processes import protocol
from ..processes.forwarded_warnings import raise_again

if TYPE_CHECKING:
    from ..processes.pool import WorkerPool
    from .base import OnFailure, OnFinished

__all__ = ["ReadyFirst", "WorkerQueues", "check_serve_order"]


def check_serve_order(serve_order: Sequence, num_envs: int, batch_size: int) -> list[np.ndarray]:
    """``serve_order`` as a list of int64 arrays of ``batch_size`` distinct env indices each."""
    batches = []
    for position, batch in enumerate(serve_order):
        ids = np.asarray(batch)
        if ids.ndim != 1 or ids.size != batch_size or ids.dtype.kind not in "iu":
            raise ConfigurationError(
                f"`serve_order[{position}]` must be {batch_size} env indices (batch_size); got {batch!r}."
            )
        if ids.min() < 0 or ids.max() >= num_envs or np.unique(ids).size != ids.size:
            raise ConfigurationError(
                f"`serve_order[{position}]` must hold distinct env indices from 0 to {num_envs - 1}; got {ids.tolist()!r}."
            )
        batches.append(ids.astype(np.int64))
    return batches


class ReadyFirst:
    """Which envs are stepping, which are ready and unreturned, and the order they were served.

    The bookkeeping only: :class:`~parallel_rollouts.ParallelVectorEnv` has its stepper step
    the envs (:class:`WorkerQueues` on worker processes) and tells this object. :meth:`sent` marks envs as stepping,
    :meth:`finished` books those whose step is done with their info events, :meth:`next_batch`
    says which envs the next ``recv`` returns once they are all ready (the first
    ``batch_size`` to finish, or ``serve_order``'s next batch), and :meth:`take_events`
    hands over their events.
    """

    def __init__(self, num_envs: int, batch_size: int, serve_order: list[np.ndarray] | None = None) -> None:
        self.num_envs = num_envs
        self.batch_size = batch_size
        self._replay = deque(serve_order) if serve_order is not None else None
        #: Per env: sent and not yet returned by ``recv``.
        self.outstanding = np.zeros(num_envs, dtype=bool)
        self._ready: list[int] = []
        self._events: dict[int, list] = {}
        #: The env indices each ``recv`` returned since the last reset, in order.
        self.served: list[np.ndarray] = []

    def reset(self) -> None:
        self.outstanding[:] = False
        self._ready.clear()
        self._events.clear()
        self.served = []

    def sent(self, env_ids: np.ndarray) -> None:
        """Refuse envs already sent and not returned; then mark ``env_ids`` as sent."""
        again = env_ids[self.outstanding[env_ids]]
        if again.size:
            raise ConfigurationError(
                f"envs {again.tolist()!r} were sent and not yet returned by `recv()`; send an env again only "
                "after `recv()` returned it."
            )
        if np.unique(env_ids).size != env_ids.size:
            raise ConfigurationError(f"`env_ids` names an env twice: {env_ids.tolist()!r}.")
        self.outstanding[env_ids] = True

    def finished(self, env_ids: Sequence[int], events: list | None) -> None:
        """Those envs stepped; their info events (``(env_index, info)`` pairs)."""
        self._ready.extend(int(env) for env in env_ids)
        for index, info in events or ():
            self._events.setdefault(index, []).append(info)

    def next_batch(self) -> np.ndarray | None:
        """The envs the next ``recv`` returns if they are all ready now, else ``None``."""
        if self._replay is not None:
            if not self._replay:
                raise ConfigurationError(
                    f"`serve_order` is spent: it recorded {len(self.served)} batches and `recv()` was called again."
                )
            wanted = self._replay[0]
            ready = set(self._ready)
            if not all(int(env) in ready for env in wanted):
                self._check_possible(wanted)
                return None
            self._replay.popleft()
            batch = wanted
            chosen = {int(env) for env in batch}
            self._ready = [env for env in self._ready if env not in chosen]
        else:
            if len(self._ready) < self.batch_size:
                self._check_possible(None)
                return None
            batch = np.array(self._ready[: self.batch_size], dtype=np.int64)
            del self._ready[: self.batch_size]
        self.outstanding[batch] = False
        self.served.append(batch)
        return batch

    def take_events(self, batch: np.ndarray) -> list[tuple[int, list]]:
        """``(position in batch, infos)`` for each env of ``batch`` that reported any."""
        return [(position, self._events.pop(int(env))) for position, env in enumerate(batch) if int(env) in self._events]

    def _check_possible(self, wanted: np.ndarray | None) -> None:
        """Refuse a ``recv`` that could never complete: too few envs sent (or the wrong ones)."""
        if wanted is not None:
            missing = wanted[~self.outstanding[wanted]]
            if missing.size:
                raise ConfigurationError(
                    f"`recv()` replays `serve_order`, whose next batch is envs {wanted.tolist()!r}, but envs "
                    f"{missing.tolist()!r} were not sent; send their actions first."
                )
        elif int(self.outstanding.sum()) < self.batch_size:
            raise ConfigurationError(
                f"`recv()` returns {self.batch_size} envs (batch_size) but only {int(self.outstanding.sum())} were sent "
                "and not yet returned; send actions for more envs first."
            )


class WorkerQueues:
    """Ready-first steps on a worker pool: each worker steps the envs it was sent as one request;
    envs of a busy worker's slice sent again wait in its queue and go out the moment it replies.

    Each step done is reported to ``on_finished(env_ids, events)``; an error that leaves the
    workers in an unknown state to ``on_failure(error)`` before it is raised.
    """

    def __init__(self, pool: WorkerPool, on_finished: OnFinished, on_failure: OnFailure) -> None:
        self._pool = pool
        self._on_finished = on_finished
        self._on_failure = on_failure
        # A worker's columns never change, replaced or not.
        self._worker_starts = np.array([worker.start for worker in pool.workers], dtype=np.int64)
        #: The envs each busy worker is stepping, and those queued behind, by worker index.
        self._stepping: dict[int, np.ndarray] = {}
        self._queued: dict[int, list[np.ndarray]] = {}

    def send(self, env_ids: np.ndarray) -> None:
        """Start a step of ``env_ids`` on their workers, or queue them behind a busy one."""
        owners = np.searchsorted(self._worker_starts, env_ids, side="right") - 1
        for position, worker in enumerate(self._pool.workers):
            mine = env_ids[owners == position]
            if not mine.size:
                continue
            if worker.index in self._stepping:
                self._queued.setdefault(worker.index, []).append(mine)
            else:
                self._post(worker, mine)

    def take_finished(self) -> None:
        """Wait for at least one busy worker to reply; report its envs and send it what is queued."""
        pool = self._pool
        busy = [worker for worker in pool.workers if worker.index in self._stepping]
        if not busy:
            raise RuntimeError("ready-first stepping lost track of the envs in flight")
        try:
            for worker in pool.wait_any(busy):
                reply = pool.receive([worker], steps=0)
                pool.raise_failures(reply)
                events = pickle.loads(reply[0][1:]) if reply[0][:1] == protocol.FINISHED else None
                self._on_finished(self._stepping.pop(worker.index), events)
                queued = self._queued.pop(worker.index, None)
                if queued:
                    self._post(worker, np.concatenate(queued))
        except BaseException as error:
            self._on_failure(error)
            raise_again(pool.take_warnings(), quietly=True)
            raise
        raise_again(pool.take_warnings())

    def finish_in_flight(self) -> None:
        """Wait until every env sent (queued ones too) has stepped."""
        while self._stepping:
            self.take_finished()

    def drain(self) -> None:
        """Wait out every step in flight; drop the queued ones unsent."""
        self._queued.clear()
        while self._stepping:
            self.take_finished()
            self._queued.clear()

    def _post(self, worker, env_ids: np.ndarray) -> None:
        self._stepping[worker.index] = env_ids
        try:
            self._pool.send(protocol.STEP_ENVS, env_ids.size, [worker], env_ids.tobytes())
        except BaseException as error:
            self._on_failure(error)
            raise
