"""What a runner asks of a per-step env stepper (:class:`RolloutStepper`), and what
:class:`~parallel_rollouts.ParallelVectorEnv` asks of its envs (:class:`VectorStepper`)."""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ..config.layout import RolloutLayout
from ..data.storage import CompletedEpisodes, RolloutStorage

if TYPE_CHECKING:
    from ..processes.batch_segments import BatchSegments

__all__ = ["OnFailure", "OnFinished", "RolloutStepper", "VectorStepper"]

#: What a :class:`VectorStepper` calls with an error that leaves its envs in an unknown state.
OnFailure = Callable[[BaseException], None]
#: What a :class:`VectorStepper` calls with envs whose ready-first step is done, and their events.
OnFinished = Callable[[np.ndarray, "list | None"], None]


class RolloutStepper(abc.ABC):
    """Steps every env one row at a time; the actions for row ``t`` are already in storage.

    Per rollout: ``begin(storage)``; for each ``t`` the runner writes ``actions[t]`` and
    calls ``step(t)`` (rows ``t`` and ``t + 1`` are then written); ``finish()`` returns the
    completed episodes, or ``abandon(t)`` drops the rollout after ``t`` steps (the envs
    stay where row ``t`` says, and the next rollout starts from there).

    ``working_storage`` is the storage the stepper must be handed: the shared memory its
    worker processes write (``None`` for a stepper that writes wherever it is told), unless
    it is handed one of its ``batch_segments`` (shared segments a fresh batch is written
    into in place; ``None`` for a stepper without). ``layout`` is the rollout layout it
    resolved once its envs existed.
    """

    working_storage: RolloutStorage | None = None
    batch_segments: BatchSegments | None = None
    layout: RolloutLayout

    @property
    @abc.abstractmethod
    def num_envs(self) -> int: ...

    @abc.abstractmethod
    def begin(self, storage: RolloutStorage) -> None: ...

    @abc.abstractmethod
    def step(self, t: int) -> None: ...

    def step_function(self):
        """What the runner calls as ``step(t)`` in the rollout just begun: :meth:`step`, or a
        shorter path to the same call (fewer Python frames per row)."""
        return self.step

    @abc.abstractmethod
    def abandon(self, t: int) -> None: ...

    @abc.abstractmethod
    def finish(self) -> CompletedEpisodes: ...

    @abc.abstractmethod
    def close(self) -> None: ...

    def lost_from_rows(self):
        """``[N]`` int64: the first row of each env lost in this rollout (``horizon``: none lost),
        or ``None`` when no row is (only a stepper that replaces workers loses rows)."""
        return None

    def replaced_env_indices(self):
        """The envs whose worker was replaced during this rollout; ``None``: never any."""
        return None

    def take_wait_seconds(self):
        """``[N]`` float64: seconds this process waited for each env's worker in this rollout;
        ``None`` for envs stepped in this process."""
        return None

    def take_warnings(self) -> list:
        """Warnings raised where the envs run since the last call, to raise in this process."""
        return []


class VectorStepper(abc.ABC):
    """The envs of a :class:`~parallel_rollouts.ParallelVectorEnv`: Gymnasium steps of row 0 of
    :attr:`storage`, requests to every env, and ready-first steps of some envs.

    The vector env writes the actions into ``storage.actions[0]``; a step writes the envs'
    observations, rewards and flags into row 0. A *part* is what one group of envs returned:
    ``None`` or a list of ``(env_index, info)`` events in env order; parts come in env order.

    Two callbacks, given at construction, tie a stepper to its owner: ``on_failure(error)`` is
    called with any error that leaves the envs in an unknown state, before it is raised (the
    owner is then broken; a caller's mistake the groups refuse is a reply, not an error), and
    ``on_finished(env_ids, events)`` with each ready-first step done (``env_ids`` int64,
    ``events`` as in a part).
    """

    layout: RolloutLayout
    storage: RolloutStorage

    @abc.abstractmethod
    def start_step(self) -> None:
        """Start a step of every env (in this process: the step itself)."""

    @abc.abstractmethod
    def finish_step(self) -> list:
        """The parts of the step :meth:`start_step` started, once it is done."""

    @abc.abstractmethod
    def handle(self, request: tuple) -> list:
        """``group.handle(request)`` on every group (reset, call, set_attr); their results in
        group order. Ready-first steps in flight finish first (reported to ``on_finished``)."""

    @abc.abstractmethod
    def send_envs(self, env_ids) -> None:
        """Start a step of envs ``env_ids`` (int64); each is reported to ``on_finished`` when done."""

    @abc.abstractmethod
    def wait_envs(self) -> None:
        """Wait until at least one step :meth:`send_envs` started is done, and report it."""

    @abc.abstractmethod
    def drain_envs(self) -> None:
        """Wait out every step :meth:`send_envs` started; those not yet started never are."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close every env and release what the stepper holds (called once)."""
