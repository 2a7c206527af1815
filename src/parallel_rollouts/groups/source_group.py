"""The rollout life of a group whose one source covers many columns: a vector env, a multi-agent env.

:class:`SourceGroup` is what :class:`~parallel_rollouts.groups.vector_source.VectorEnvGroup` and
:class:`~parallel_rollouts.groups.agents.AgentEnvGroup` share: one object (the *source*) steps all
of the group's columns at once, its rows are booked by the core's ``StepRecorder`` under the
source's mask, and a rollout is begun, stepped row by row, finished or abandoned the same way
whatever the source. A subclass reads its source: it builds what its rows need in
:meth:`_begin_rows`, writes row ``t`` (and ``t + 1``) in :meth:`_step_row`, drops that in
:meth:`_end_rollout`, and names its source in :meth:`_hosting` for errors.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from ..checks.conversion import convert_row
from ..data.storage import CompletedEpisodes, RolloutStorage
from ..errors import WorkerError
from .base import refused_step
from .single_envs import describe_failure, episode_recorder, unstorable_observation

__all__ = ["UNKNOWN_SEED", "SourceGroup"]

#: Recorded as an episode's seed when the source chose it (or no per-env seed exists).
UNKNOWN_SEED = -1


class SourceGroup:
    """One source stepped into ``num_envs`` columns of rollout storage (global indices
    ``env_offset .. env_offset + num_envs - 1``).

    The subclass's ``__init__`` sets ``source`` (the object whose ``close`` ends it),
    ``env_offset``, ``num_envs``, ``_core``, ``_observation_layout``, ``_rounding`` and ``_current_observations``
    (``[1, num_envs, ...]`` per leaf), and calls :meth:`_init_books`.
    """

    source: Any
    env_offset: int
    num_envs: int

    def _init_books(self) -> None:
        """The columns' episode books, which outlive a rollout, and the empty rollout state."""
        n = self.num_envs
        self._running_returns = np.zeros(n, dtype=np.float64)
        self._running_lengths = np.zeros(n, dtype=np.int64)
        self._running_seeds = np.full(n, UNKNOWN_SEED, dtype=np.int64)
        self._done_columns = np.zeros(n, dtype=np.int64)
        self._storage: RolloutStorage | None = None
        self._completed: CompletedEpisodes | None = None
        # Written again by every rollout (read out by a copy): see CompletedEpisodes.buffers_like.
        self._episode_buffers: CompletedEpisodes | None = None
        self._recorder = None
        # The storage row the source stands at during a rollout; None while a step is under
        # way (an interruption there leaves the source in an unknown state).
        self._row: int | None = 0

    def begin(self, storage: RolloutStorage) -> None:
        """Start a rollout into ``storage``, this group's column slice of the batch.

        A rollout that was neither finished nor abandoned (an interruption outside any
        step) is abandoned first, at the row the source stands at.
        """
        if self._storage is not None:
            self.abandon(self._row if self._row is not None else -1)
        self._storage = storage
        # Each column ends at most one episode per step.
        self._completed = self._episode_buffers = CompletedEpisodes.buffers_like(
            self._episode_buffers, storage.horizon * self.num_envs
        )
        self._recorder = episode_recorder(
            self._core, storage, self._running_returns, self._running_lengths, self._running_seeds,
            self._completed, self._done_columns, self.env_offset,
        )
        self._begin_rows(storage)
        for leaf_storage, current in zip(storage.observations, self._current_observations):
            leaf_storage[0] = current[0]
        self._row = 0

    def step(self, t: int) -> None:
        """Step the source once with the actions in ``storage.actions[t]``; write row ``t`` (and ``t + 1``)."""
        if self._row != t:
            self._refuse_step(t)
        self._row = None
        self._step_row(t)
        self._row = t + 1

    def finish(self) -> CompletedEpisodes:
        """End the rollout: remember where the source stands, return the episodes."""
        storage = self._storage
        if self._row != storage.horizon:
            self._refuse_step(storage.horizon)
        for leaf_storage, current in zip(storage.observations, self._current_observations):
            current[0] = leaf_storage[storage.horizon]
        completed = self._completed.head(self._recorder.completed_count)
        self._end_rollout()
        # Once per rollout, with every row written: a warning made an error drops a complete rollout.
        self._rounding.say()
        return completed

    def abandon(self, t: int) -> None:
        """Drop the rollout; the next one starts from the row the source stands at.

        ``t`` is the number of steps the caller saw complete; when an interruption fell
        between a step and the caller's count, the group's own record of its row wins. If a
        step itself was cut short, the source's state is unknown and this raises
        :class:`CollectorClosedError`.
        """
        if self._storage is None:
            return
        if self._row is None:
            self._refuse_step(t)
        for leaf_storage, current in zip(self._storage.observations, self._current_observations):
            current[0] = leaf_storage[self._row]
        self._end_rollout()

    def close(self) -> list[tuple[int, BaseException]]:
        """Close the source; ``(env_index, error)`` if its ``close`` raised."""
        try:
            self.source.close()
        except Exception as error:
            return [(self.env_offset, error)]
        return []

    def _refuse_step(self, t: int) -> None:
        raise refused_step(self._row, t, self.env_offset, self.env_offset + self.num_envs - 1)

    def _failure(self, phase: str, error: BaseException) -> WorkerError:
        """The source raised: every one of its columns is affected, so each is listed."""
        failure = describe_failure(self.env_offset, phase, error)
        message = f"{self._hosting()} raised {failure.exception_type} in `{phase}`: {failure.message}"
        # One traceback (the first entry's) for the one exception.
        failures = (failure,) + tuple(
            replace(failure, env_index=self.env_offset + column, traceback="") for column in range(1, self.num_envs)
        )
        return WorkerError(message, failures)

    def _converted_column(self, column: int, values: list, what: str) -> list[np.ndarray]:
        """Column ``column``'s observation leaves ``values`` as the storage's arrays, under the one
        conversion rule; every leaf is converted before any is stored. ``what`` names the value."""
        layout = self._observation_layout
        converted = []
        for leaf_index, (leaf, value) in enumerate(zip(layout.leaves, values)):
            array = convert_row(value, leaf.shape, leaf.dtype)
            if array is None:
                raise unstorable_observation(layout, leaf_index, self.env_offset + column, value, what)
            if array.dtype != leaf.dtype:
                self._rounding.converted(leaf_index, column, array.dtype)
            converted.append(array)
        return converted

    # -- what a subclass provides ----------------------------------------------------------

    def _begin_rows(self, storage: RolloutStorage) -> None:
        """What the source's rows need in this rollout, beyond the episode books (nothing by default)."""

    def _end_rollout(self) -> None:
        """Forget the rollout (a subclass drops what :meth:`_begin_rows` built, then calls this)."""
        self._storage, self._completed, self._recorder = None, None, None

    def _step_row(self, t: int) -> None:
        raise NotImplementedError

    def _hosting(self) -> str:
        """``"the ... hosting envs a..b"``: the source, as its errors name it."""
        raise NotImplementedError

