"""The ``async`` stepper: envs in worker processes, stepped one row at a time on request.

The policy runs batched in the main process, which writes actions into the shared
``actions`` rows; a step is one 9-byte request and one 1-byte reply per worker (see
:mod:`parallel_rollouts.processes.worker_main`). The storage the workers write is the
pool's shared segment; :class:`~parallel_rollouts.batch_memory.BatchMemory` copies it out
(or hands it out, with ``reuse_buffers=True``).
"""

from __future__ import annotations

import pickle

from ..processes import worker_main as protocol
from ..processes.pool import WorkerPool
from ..spec import RolloutSpec
from ..storage import CompletedEpisodes, RolloutStorage
from .base import EnvStepper

__all__ = ["ProcessStepper"]


class ProcessStepper(EnvStepper):
    """Per-step stepping of a :class:`WorkerPool`; parts of it can step while the main process works."""

    def __init__(self, pool: WorkerPool) -> None:
        self.pool = pool
        self.working_storage = pool.shared.storage

    @classmethod
    def build(cls, spec: RolloutSpec, num_workers=None, context=None, step_timeout=None) -> ProcessStepper:
        return cls(WorkerPool.start(spec, num_workers, context, step_timeout))

    def take_warnings(self) -> list:
        return self.pool.take_warnings()

    @property
    def num_envs(self) -> int:
        return self.pool.spec.num_envs

    def begin(self, storage: RolloutStorage) -> None:
        if storage is not self.working_storage:
            raise RuntimeError("worker processes write only into their shared working storage.")
        self.pool.request(protocol.BEGIN, 0)

    def step(self, t: int) -> None:
        self.pool.request(protocol.STEP, t)

    def abandon(self, t: int) -> None:
        self.pool.request(protocol.ABANDON, t)

    def finish(self) -> CompletedEpisodes:
        payloads = self.pool.request(protocol.FINISH, 0)
        return CompletedEpisodes.merge([pickle.loads(payload) for payload in payloads])

    # -- stepping part of the workers while the main process works --------------------------

    def step_begin(self, t: int, workers: list) -> None:
        """Start step ``t`` of ``workers``' envs; :meth:`step_end` waits for it."""
        self.pool.send(protocol.STEP, t, workers)

    def step_end(self, workers: list) -> None:
        self.pool.raise_failures(self.pool.receive(workers))

    def abandon_part(self, t: int, workers: list) -> None:
        self.pool.request(protocol.ABANDON, t, workers)

    def close(self) -> None:
        self.working_storage = None
        self.pool.close()
