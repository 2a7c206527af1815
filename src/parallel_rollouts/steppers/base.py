"""What a runner asks of a per-step env stepper."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

from ..config.layout import RolloutLayout
from ..data.storage import CompletedEpisodes, RolloutStorage

if TYPE_CHECKING:
    from ..processes.batch_segments import BatchSegments

__all__ = ["EnvStepper"]


class EnvStepper(abc.ABC):
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
