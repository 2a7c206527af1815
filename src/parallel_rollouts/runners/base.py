"""What the collector asks of a runner and what one rollout hands back (its state: :mod:`.lifecycle`)."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field

import numpy as np

from ..config.layout import RolloutLayout
from ..data.recurrent_record import RecurrentRecord
from ..data.storage import CompletedEpisodes, RolloutStorage
from .lifecycle import Lifecycle, RunnerState

__all__ = ["ReplacedWorkers", "RolloutResult", "RolloutRunner", "RunnerState", "stepped_result"]


@dataclass
class RolloutResult:
    """One rollout, as a runner hands it to the collector."""

    storage: RolloutStorage
    episodes: CompletedEpisodes
    has_values: bool
    has_log_probs: bool
    #: Envs whose rows in this rollout are not all valid (their worker died and was
    #: replaced); empty unless a runner restarts workers.
    lost_env_indices: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: ``[N]`` int64: the first row of each env that is lost (``horizon`` where none is;
    #: ``-1``: its first observation too). ``None``: no row is lost.
    lost_from_rows: np.ndarray | None = None
    #: ``[N]`` float64: seconds this process waited for the worker hosting each env
    #: (``None`` for runners whose envs run in this process).
    env_wait_seconds: np.ndarray | None = None
    #: A recurrent policy's state record of every env (``None``: the policy is not recurrent).
    recurrent: RecurrentRecord | None = None


class RolloutRunner(Lifecycle, abc.ABC):
    """Runs one whole rollout per ``collect()``, and owns its own :class:`RunnerState`.

    A failure that leaves the envs in an unknown state moves the runner to ``BROKEN``
    (:meth:`_break`); it then refuses to collect again. A failure that does not keeps the
    runner ``READY``: the rollout is dropped and every env continues from where it stands.
    Which failures break is the runner's to say: the policy raising, or its output being
    rejected, keeps the in-process, pipelined and rollout-worker runners ``READY``, and
    breaks the Ray runner (its actors step on independently), except an ``ActionError``
    found when merging the slices. Callers ask
    (:attr:`state`, :attr:`failure`, :meth:`check_usable`, which raises
    :class:`CollectorClosedError`); they never write.

    ``layout`` is the rollout layout resolved when the runner's envs were made.
    """

    layout: RolloutLayout

    def collect(self) -> RolloutResult:
        """One rollout (``READY`` -> ``COLLECTING`` -> ``READY``, or ``BROKEN``)."""
        self.check_usable()
        self._state = RunnerState.COLLECTING
        try:
            return self._collect()
        finally:
            if self._state is RunnerState.COLLECTING:
                self._state = RunnerState.READY

    def close(self) -> None:
        """Release everything; idempotent."""
        if self._mark_closed():
            self._close()

    @abc.abstractmethod
    def _collect(self) -> RolloutResult: ...

    @abc.abstractmethod
    def _close(self) -> None: ...

    def take_warnings(self) -> list:
        """Warnings raised in worker processes or actors since the last call
        (:mod:`parallel_rollouts.processes.forwarded_warnings` records)."""
        return []


def stepped_result(stepper, memory, episodes: CompletedEpisodes, has_values: bool, has_log_probs: bool) -> RolloutResult:
    """The result of a rollout a per-step stepper ran: the batch memory's storage (lost rows
    cleared) with what the stepper knows of losses and waiting."""
    lost_from_rows = stepper.lost_from_rows()
    replaced = stepper.replaced_env_indices()
    result = RolloutResult(
        memory.finish(lost_from_rows), episodes, has_values, has_log_probs,
        lost_from_rows=lost_from_rows, env_wait_seconds=stepper.take_wait_seconds(),
    )
    if replaced is not None:
        result.lost_env_indices = replaced
    return result


class ReplacedWorkers:
    """Which envs had their worker replaced since the last look: they start fresh episodes, so a
    recurrent policy's state must restart with them.

    Read from each worker's incarnation (how many times its slot was refilled) in the stepper's
    pool, so every replacement counts once whenever it happened (found dead at the start of a
    rollout, lost at a step, at the finish, or while a dropped rollout was abandoned; twice in one
    rollout included). A stepper without worker processes replaces nothing.
    """

    def __init__(self, stepper) -> None:
        self._pool = getattr(stepper, "pool", None)
        self._seen = self._incarnations()

    def _incarnations(self) -> dict[int, tuple[int, int, int]]:
        if self._pool is None:
            return {}
        return {worker.index: (worker.incarnation, worker.start, worker.stop) for worker in self._pool.workers}

    def take(self) -> np.ndarray:
        """``np.int64`` indices of the envs whose worker was replaced since the last call."""
        now = self._incarnations()
        envs = [
            env
            for index, (incarnation, start, stop) in now.items()
            if self._seen.get(index, (incarnation,))[0] != incarnation
            for env in range(start, stop)
        ]
        self._seen = now
        return np.array(envs, dtype=np.int64)
