"""Single envs behind the group interface: :class:`EnvGroup`, over the core's ``RowStepper``.

An ``EnvGroup`` owns a contiguous run of envs (global indices
``env_offset .. env_offset + len(envs) - 1``) and writes their part of a
rollout into a column slice of the storage. The serial backend uses one group
per env, the sync backend one group for all envs, each async worker one group
for its slice (on a view of shared memory), and each Ray actor one for its slice.

Per step ``t`` the core's ``RowStepper`` (``core/rows.py``, compiled or interpreted), which
the group builds for each rollout:

1. reads its envs' actions from ``storage.actions[t]``;
2. steps every env, collecting failures instead of stopping at the first;
3. writes the next observations into row ``t + 1`` and the rewards and end
   flags into row ``t``, updating the episode books;
4. for every env whose episode ended, copies the terminal observation into
   ``final_observations[t]`` and resets the env at once with the next episode
   seed (without a seed under ``episode_seeds="first"``), writing the reset
   observation over row ``t + 1``. No step is spent on an autoreset no-op;
5. checks the values of row ``t + 1`` and of the new terminal observations
   against the space (``observation_check``), before the policy sees them.

What only Python does (building an error, warning about a value, writing a reset
observation the typed path cannot) comes back to the group through ``_StepHooks``.

Each env receives an action that nothing else will rewrite: a private copy of
its row, made per step. A group always knows the row its envs stand at (or
that a step was cut short), so an interruption anywhere leaves it either
consistent or refusing to continue.
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from time import perf_counter
from types import ModuleType
from typing import Any

import numpy as np
from gymnasium import Env

from ..checks.conversion import explain_rejected_row
from ..checks.env_returns import check_reset_result
from ..errors import EnvFailure, ObservationError, SpaceError, WorkerError
from ..config.layout import RolloutLayout
from ..checks.observations import ObservationChecker
from ..checks.rounding import RoundingNotices
from ..config.seeding import EpisodeSeedTable
from ..data.spaces import SpaceLayout, check_env_spaces
from ..data.storage import CompletedEpisodes, RolloutStorage
from .base import refused_step

__all__ = ["EnvGroup", "close_each", "describe_failure", "episode_recorder", "unstorable_observation"]


def describe_failure(env_index: int, phase: str, error: BaseException) -> EnvFailure:
    """An :class:`EnvFailure` for ``error``, with its traceback as text (it may cross processes)."""
    return EnvFailure(
        env_index=env_index,
        phase=phase,
        exception_type=type(error).__name__,
        message=str(error),
        traceback="".join(traceback.format_exception(type(error), error, error.__traceback__)),
    )


def _raise_failures(failures: list[tuple[EnvFailure, BaseException]]) -> None:
    error = WorkerError.from_failures([failure for failure, _ in failures])
    raise error from failures[0][1]


def close_each(envs: Sequence[Any], first_index: int = 0) -> list[tuple[int, BaseException]]:
    """Close every env (or vector env), even after one raised; ``(index, error)`` for each that did.

    ``envs[k]`` is named ``first_index + k``.
    """
    errors = []
    for position, env in enumerate(envs):
        try:
            env.close()
        except Exception as error:
            errors.append((first_index + position, error))
    return errors


def episode_recorder(
    core: ModuleType,
    storage: RolloutStorage,
    running_returns: np.ndarray,
    running_lengths: np.ndarray,
    running_seeds: np.ndarray,
    completed: CompletedEpisodes,
    done_columns: np.ndarray,
    env_offset: int,
):
    """The core's ``StepRecorder`` over one rollout's storage and a group's episode books."""
    return core.StepRecorder(
        storage.rewards,
        storage.terminations,
        storage.truncations,
        storage.step_episode_seeds,
        running_returns,
        running_lengths,
        running_seeds,
        completed.returns,
        completed.lengths,
        completed.env_indices,
        completed.end_steps,
        completed.seeds,
        done_columns,
        env_offset,
    )


class EnvGroup:
    """A contiguous run of envs and the state that outlives one rollout.

    Parameters
    ----------
    envs:
        The envs, already constructed, in global order.
    env_offset:
        Global index of ``envs[0]``.
    layout:
        The collector's :class:`~parallel_rollouts.config.layout.RolloutLayout`: the spaces every env
        must declare, the root seed episode seeds derive from, the info keys, the core and
        the observation check.
    incarnation:
        How many times the worker hosting these envs was replaced: their episode
        seeds come from the stream of that incarnation (:mod:`parallel_rollouts.config.seeding`).
    """

    def __init__(self, envs: Sequence[Env], env_offset: int, layout: RolloutLayout, incarnation: int = 0) -> None:
        self.envs = list(envs)
        self.env_offset = env_offset
        self.num_envs = len(self.envs)
        self._observation_layout = observation_layout = layout.observation_layout
        self._action_layout = layout.action_layout
        self._info_keys = layout.info_keys
        self._core = layout.core
        self._checker = ObservationChecker(observation_layout, layout.core, layout.observation_check, env_offset)
        self._rounding = RoundingNotices(observation_layout, env_offset)
        for column, env in enumerate(self.envs):
            check_env_spaces(
                env_offset + column, env.observation_space, env.action_space, layout.observation_space,
                layout.action_space,
            )

        n = self.num_envs
        self._running_returns = np.zeros(n, dtype=np.float64)
        self._running_lengths = np.zeros(n, dtype=np.int64)
        self._running_seeds = np.zeros(n, dtype=np.int64)
        # Episode numbers index the seed streams (a replacement's stream is its incarnation's).
        self._seed_table = EpisodeSeedTable(layout.root_seed, env_offset, [0] * n, incarnation)
        # Whether episodes after the first are reset with a seed of their own (the layout's episode_seeds).
        self._reseed = layout.episode_seeds == "every"
        self._done_columns = np.zeros(n, dtype=np.int64)
        # The observation each env is at between rollouts, kept privately so that a
        # caller editing a returned batch cannot change where the next one starts.
        self._current_observations = observation_layout.allocate((1, n), np.zeros)
        self._storage: RolloutStorage | None = None
        self._writers: list = []
        self._recorder = None
        self._stepper = None
        self._row_stepper = None
        self._completed: CompletedEpisodes | None = None
        # Written again by every rollout (read out by a copy): see CompletedEpisodes.buffers_like.
        self._episode_buffers: CompletedEpisodes | None = None
        # The storage row the envs stand at during a rollout; None while a step is
        # under way (an interruption there leaves the envs in an unknown state).
        self._row: int | None = 0

    # -- resets ----------------------------------------------------------------------------

    def _reset_env(self, column: int) -> Any:
        """Reset one env with its next episode seed and return the observation."""
        seed = self._seed_table.next_seed(column)
        started = perf_counter()
        result = self.envs[column].reset(seed=seed)
        if self._storage is not None:  # within a rollout: its timing counts the reset
            self._storage.env_reset_seconds[0, column] += perf_counter() - started
        observation, _info = check_reset_result(result)
        self._seed_table.advance(column)
        self._running_seeds[column] = seed
        return observation

    def reset_all(self) -> None:
        """First reset of every env; failures of several envs are reported together."""
        failures = []
        observations = []
        for column in range(self.num_envs):
            try:
                observations.append(self._reset_env(column))
            except Exception as error:
                failures.append((describe_failure(self.env_offset + column, "reset", error), error))
        if failures:
            _raise_failures(failures)
        # A writer over the one-row private storage (with an empty final-observation
        # array: nothing ends at a reset) converts and checks exactly as steps do.
        writers = [
            self._core.ObservationWriter(leaf, leaf[:0], self._rounding.writer_hook(leaf_index))
            for leaf_index, leaf in enumerate(self._current_observations)
        ]
        describe = lambda column: "an observation from its first `reset` (observations row t=0)"  # noqa: E731
        for column, observation in enumerate(observations):
            self._write_observation(writers, 0, column, observation, describe)
        self._checker.check([leaf[0] for leaf in self._current_observations], None, describe)
        self._rounding.say()

    # -- one rollout -----------------------------------------------------------------------

    def begin(self, storage: RolloutStorage) -> None:
        """Start a rollout into ``storage``, this group's column slice of the batch.

        A rollout that was neither finished nor abandoned (an interruption outside
        any step) is abandoned first, at the row its envs stand at.
        """
        if self._storage is not None:
            self.abandon(self._row if self._row is not None else -1)
        horizon = storage.horizon
        self._completed = self._episode_buffers = CompletedEpisodes.buffers_like(self._episode_buffers, horizon * self.num_envs)
        writers = [
            self._core.ObservationWriter(observations, final, self._rounding.writer_hook(leaf_index))
            for leaf_index, (observations, final) in enumerate(zip(storage.observations, storage.final_observations))
        ]
        recorder = episode_recorder(
            self._core, storage, self._running_returns, self._running_lengths, self._running_seeds,
            self._completed, self._done_columns, self.env_offset,
        )
        for leaf_storage, current in zip(storage.observations, self._current_observations):
            leaf_storage[0] = current[0]
        layout = self._observation_layout
        self._stepper = self._core.EnvStepper(
            self.envs,
            writers,
            recorder,
            layout.flatten if layout.is_nested else None,
            self._info_keys,
            [storage.infos[key] for key in self._info_keys],
            storage.env_step_seconds[0],
        )
        self._row_stepper = self._core.RowStepper(
            self._stepper,
            list(storage.actions),
            None if not self._action_layout.is_nested else self._split_actions,
            self._seed_table if self._reseed else None,
            self._running_seeds,
            self._checker.checked_leaves(),
            _StepHooks(self),
            storage.env_reset_seconds[0],
        )
        self._writers, self._recorder = writers, recorder
        self._row = 0
        self._storage = storage

    def step(self, t: int) -> None:
        """Step every env once with the actions in ``storage.actions[t]``."""
        if self._row != t:
            self._refuse_step(t)
        self._row = None
        self._row_stepper.step(t)
        self._row = t + 1

    def _raise_step_failures(self, t: int) -> None:
        """Turn what the stepper noted into the error: env failures first, else the observation."""
        stepper = self._stepper
        if stepper.failures:
            failures = []
            for column, phase, error, key, info in stepper.failures:
                reason = _info_error(key, info, error) if phase == "info" else error
                failures.append((describe_failure(self.env_offset + column, phase, reason), error))
            _raise_failures(failures)
        column, leaf_index, value = stepper.bad_observation
        describe = lambda column: f"an observation at step t={t} (observations row t={t + 1})"  # noqa: E731
        if leaf_index < 0:
            raise ObservationError(
                f"env {self.env_offset + column} returned {describe(column)} that does not match its "
                f"observation space: {value}"
            )
        self._raise_write_error(column, leaf_index, value, describe)

    def _describe_row(self, t: int, n_done: int):
        def describe(column: int) -> str:
            if column in self._done_columns[:n_done]:
                return f"an observation from the reset after its episode ended at step t={t} (observations row t={t + 1})"
            return f"an observation at step t={t} (observations row t={t + 1})"

        return describe

    def finish(self) -> CompletedEpisodes:
        """End the rollout: remember where each env is, return the episodes."""
        storage = self._storage
        horizon = storage.horizon
        if self._row != horizon:
            self._refuse_step(horizon)
        for leaf_storage, current in zip(storage.observations, self._current_observations):
            current[0] = leaf_storage[horizon]
        completed = self._completed.head(self._recorder.completed_count)
        self._storage, self._writers, self._recorder, self._completed = None, [], None, None
        self._stepper = self._row_stepper = None
        # Once per rollout, with every row written: a warning made an error drops a complete rollout.
        self._rounding.say()
        return completed

    def abandon(self, t: int) -> None:
        """Drop the rollout; the next one starts from the row the envs stand at.

        ``t`` is the number of steps the caller saw complete; when an interruption
        fell between a step and the caller's count, the group's own record of its
        row wins. If a step itself was cut short, the envs' state is unknown and
        this raises :class:`CollectorClosedError`. Episodes that ended in the
        dropped rows are not reported in any batch; the episodes running at the
        row keep the return and length of their dropped steps.
        """
        storage = self._storage
        if storage is None:
            return
        if self._row is None:
            self._refuse_step(t)
        for leaf_storage, current in zip(storage.observations, self._current_observations):
            current[0] = leaf_storage[self._row]
        self._storage, self._writers, self._recorder, self._completed = None, [], None, None
        self._stepper = self._row_stepper = None

    def _refuse_step(self, t: int) -> None:
        raise refused_step(self._row, t, self.env_offset, self.env_offset + self.num_envs - 1)

    def close(self) -> list[tuple[int, BaseException]]:
        """Close every env; return ``(env_index, error)`` for those whose ``close`` raised."""
        return close_each(self.envs, self.env_offset)

    # -- helpers ---------------------------------------------------------------------------

    def _split_actions(self, t: int) -> list:
        """One action per env from row ``t`` of each leaf of a nested (Dict/Tuple) action space.

        Envs receive what Gymnasium's vector envs hand them: NumPy scalars for
        scalar leaves (Discrete), arrays otherwise. Array actions are views of a
        copy made for this step alone, so an env may keep its action (as
        ``StickyAction`` does) or change it without touching the batch. (A
        single-leaf space is split the same way by the core's ``RowStepper``.)
        """
        leaves = self._storage.actions
        per_leaf = [list(row.copy() if row.ndim > 1 else row) for row in (leaf[t] for leaf in leaves)]
        unflatten = self._action_layout.unflatten
        return [unflatten([values[column] for values in per_leaf]) for column in range(self.num_envs)]

    def _write_observation(self, writers: list, row: int, column: int, observation: Any, describe) -> None:
        for leaf_index, (writer, value) in enumerate(
            zip(writers, self._flatten_observation(column, observation, describe))
        ):
            if not writer.write_row(row, column, value):
                self._raise_write_error(column, leaf_index, value, describe)

    def _flatten_observation(self, column: int, observation: Any, describe) -> list:
        try:
            return self._observation_layout.flatten(observation)
        except SpaceError as error:
            raise ObservationError(
                f"env {self.env_offset + column} returned {describe(column)} that does not match its "
                f"observation space: {error}"
            ) from None

    def _raise_write_error(self, column: int, leaf_index: int, value: Any, describe) -> None:
        raise unstorable_observation(self._observation_layout, leaf_index, self.env_offset + column, value, describe(column))


class _StepHooks:
    """What the core's ``RowStepper`` hands back to Python: errors, warnings, the general rule."""

    def __init__(self, group: EnvGroup) -> None:
        self._group = group

    def step_failed(self, t: int) -> None:
        self._group._raise_step_failures(t)

    def rows_outside(self, t: int, n_done: int) -> None:
        group = self._group
        group._checker.check([leaf[t + 1] for leaf in group._storage.observations], None, group._describe_row(t, n_done))

    def finals_outside(self, t: int, n_done: int) -> None:
        group = self._group
        ended = group._done_columns[:n_done]
        group._checker.check(
            [leaf[t, ended] for leaf in group._storage.final_observations],
            ended,
            lambda column: f"a terminal observation at step t={t} (final_observations row t={t})",
        )

    def reset_unwritable(self, t: int, column: int, observation: Any) -> None:
        self._group._write_observation(self._group._writers, t + 1, column, observation, _reset_row(t))

    def reset_failed(self, t: int, failures: list[tuple[int, BaseException]]) -> None:
        offset = self._group.env_offset
        _raise_failures([(describe_failure(offset + column, "autoreset", error), error) for column, error in failures])


def _reset_row(t: int):
    return lambda column: f"an observation from the reset after its episode ended at step t={t} (observations row t={t + 1})"


def unstorable_observation(layout: SpaceLayout, leaf_index: int, env_index: int, value: Any, what: str) -> ObservationError:
    """The error for an observation the conversion rule refuses: which env, which row and leaf, and why."""
    leaf = layout.leaves[leaf_index]
    where = f" at {leaf.name}" if layout.is_nested else ""
    return ObservationError(
        f"env {env_index} returned {what}{where} that its observation space {leaf.space!r} cannot "
        f"store: got {explain_rejected_row(value, leaf.shape, leaf.dtype)}."
    )


def _info_error(key: str, info: Any, error: BaseException) -> Exception:
    """What the user reads for a failed ``info_keys`` entry (the env index is added by the caller)."""
    if not isinstance(info, dict):
        return TypeError(f"`step` returned info {type(info).__name__} {info!r}; Gymnasium envs return a dict.")
    if isinstance(error, KeyError):
        return KeyError(f"info has no key {key!r} (keys: {sorted(map(str, info))!r}); info_keys must name scalar entries present on every step")
    return error
