"""Pure-Python twin of the compiled per-step hot path (``parallel_rollouts.core._core``).

Both modules expose the same names with the same signatures and semantics, and
the test suite runs every case through both. This file is the readable
specification; the Cython module is the fast one.

The per-step work of a group of envs lives here:

* :class:`ObservationWriter` moves env observations into one leaf of the
  preallocated ``[rows, env, ...]`` observation storage and scatters the rows of
  envs whose episode just ended into ``final_observations``.
* :func:`find_out_of_bounds` checks a batch of actions or observations against
  a space's bounds.
* :class:`StepRecorder` writes one step of rewards and end flags and keeps the
  episode books: running return and length per env, the seed of the episode each
  row belongs to, and a record for every episode that ends.
* :class:`EnvStepper` steps every env of a group once and records the step.
* :class:`RowStepper` is a group's whole step of one row: it splits the actions,
  runs the :class:`EnvStepper`, scatters the terminal observations of the envs
  whose episode ended, resets them with their next episode seeds, and checks
  the new rows against the space's bounds. What only Python can do (building
  an error, warning about a value) it hands to the ``hooks`` object it was
  built with.
* :class:`VectorRowRecorder` is the same for a vector env's row: it stores
  the rows one ``step`` of the vector env returned, checks them, and keeps the
  books, in one call, or declines when the row needs the general rules.

Storage handed to either class may be a column slice (``array[:, lo:hi]``) of a
larger ``[rows, num_envs, ...]`` array, which is how one worker writes its own
envs' part of a shared batch.
"""

from __future__ import annotations

from time import perf_counter

import numpy as np

from .arguments import (
    bounds_operands,
    check_counted,
    check_done_columns,
    check_observation_storage,
    check_row_stepper_arguments,
    check_step_lists,
    check_step_storage,
    check_stepper_arguments,
    check_vector_row_arguments,
    count_argument,
    env_offset_argument,
    index_argument,
    refuse_full_buffers,
    refuse_returning_hook,
    require_instance,
    require_instances,
    require_list,
    require_tuple,
    seconds_argument,
)
from ..checks.conversion import convert_row
from ..checks.env_returns import check_reset_result, check_step_result, end_flag, info_number, reward_value

__all__ = [
    "EnvStepper",
    "ObservationWriter",
    "RowStepper",
    "StepRecorder",
    "VectorRowRecorder",
    "find_out_of_bounds",
]


class ObservationWriter:
    """Writes env observations into one leaf of ``[rows, env, ...]`` storage.

    Parameters
    ----------
    observations:
        Storage of shape ``[horizon + 1, num_envs, *leaf_shape]``. Row ``t + 1``
        receives the observations that follow the actions of step ``t``; row
        ``horizon`` is the bootstrap row.
    final_observations:
        Storage of shape ``[horizon, num_envs, *leaf_shape]`` with the same dtype.
        Row ``t`` receives the terminal observation of every env whose episode
        ended at step ``t``.

    Rows are copied whole. A source whose dtype and shape already match the
    storage is copied byte for byte; anything else (a Python scalar, another
    dtype) is converted by NumPy as one row. A source of the wrong shape is never
    written: the methods report it instead, so the caller can name the env.
    """

    def __init__(self, observations: np.ndarray, final_observations: np.ndarray) -> None:
        check_observation_storage(observations, final_observations)
        self._observations = observations
        self._final_observations = final_observations
        self._row_shape = tuple(observations.shape[2:])
        self._num_envs = observations.shape[1]

    def _copy_into(self, row: int, column: int, source: object) -> bool:
        array = convert_row(source, self._row_shape, self._observations.dtype)
        if array is None:
            return False
        self._observations[row, column] = array
        return True

    def write_rows(self, row: int, sources: list) -> int:
        """Write ``sources[j]`` into ``observations[row, j]`` for every env ``j``.

        Returns ``-1`` when every source was written, otherwise the index of the
        first source that cannot be stored (wrong shape, non-numeric, or a value
        the conversion rule of :mod:`parallel_rollouts.checks.conversion` refuses);
        sources before it have been written, it and those after it have not.
        """
        row = index_argument(row, self._observations.shape[0], "row")
        check_step_lists(self._num_envs, sources=sources)
        for column, source in enumerate(sources):
            if not self._copy_into(row, column, source):
                return column
        return -1

    def write_row(self, row: int, column: int, source: object) -> bool:
        """Write one env's observation into ``observations[row, column]``.

        Returns ``False``, writing nothing, when ``source`` cannot be stored.
        """
        row = index_argument(row, self._observations.shape[0], "row")
        return self._copy_into(row, index_argument(column, self._num_envs, "column"), source)

    def scatter_final(self, t: int, done_columns: np.ndarray, count: int) -> None:
        """Copy ``observations[t + 1, c]`` into ``final_observations[t, c]``.

        ``c`` runs over ``done_columns[:count]``, the envs whose episode ended at
        step ``t``. Call it before the reset observations overwrite row ``t + 1``.
        """
        t = index_argument(t, self._final_observations.shape[0], "time step")
        check_done_columns(done_columns, 0)
        columns = done_columns[: count_argument(count, done_columns.shape[0])]
        outside = columns[(columns < 0) | (columns >= self._num_envs)]
        if outside.size:
            index_argument(int(outside[0]), self._num_envs, "done column")
        self._final_observations[t, columns] = self._observations[t + 1, columns]


class StepRecorder:
    """Records one step of rewards and end flags and keeps the episode books.

    Parameters
    ----------
    rewards, terminations, truncations:
        ``[horizon, num_envs]`` storage (float64, bool, bool).
    step_episode_seeds:
        ``[horizon, num_envs]`` int64 storage; row ``t`` receives the reset seed
        of the episode each env was in when it took step ``t``.
    running_returns, running_lengths, running_seeds:
        ``[num_envs]`` float64 / int64 / int64 state of the episode each env is
        in. They outlive one rollout: episodes continue across collections.
        The caller sets ``running_seeds[c]`` when it resets env ``c``.
    completed_returns, completed_lengths, completed_env_indices,
    completed_end_steps, completed_seeds:
        1-D buffers (float64, then int64) that receive one entry per episode that
        ends, in order of time step and then env. ``horizon * num_envs`` entries
        are always enough.
    done_columns:
        int64 vector with room for every env; :meth:`record_step` writes the
        columns of the envs whose episode ended to its front.
    env_offset:
        Global index of this storage's first env, added to the recorded env
        indices when the storage is a column slice of a larger batch.
    """

    def __init__(
        self,
        rewards: np.ndarray,
        terminations: np.ndarray,
        truncations: np.ndarray,
        step_episode_seeds: np.ndarray,
        running_returns: np.ndarray,
        running_lengths: np.ndarray,
        running_seeds: np.ndarray,
        completed_returns: np.ndarray,
        completed_lengths: np.ndarray,
        completed_env_indices: np.ndarray,
        completed_end_steps: np.ndarray,
        completed_seeds: np.ndarray,
        done_columns: np.ndarray,
        env_offset: int,
    ) -> None:
        check_step_storage(
            rewards, terminations, truncations, step_episode_seeds, running_returns, running_lengths,
            running_seeds, completed_returns, completed_lengths, completed_env_indices,
            completed_end_steps, completed_seeds, done_columns,
        )
        self._env_offset = env_offset_argument(env_offset)
        self._rewards = rewards
        self._terminations = terminations
        self._truncations = truncations
        self._step_episode_seeds = step_episode_seeds
        self._running_returns = running_returns
        self._running_lengths = running_lengths
        self._running_seeds = running_seeds
        self._completed_returns = completed_returns
        self._completed_lengths = completed_lengths
        self._completed_env_indices = completed_env_indices
        self._completed_end_steps = completed_end_steps
        self._completed_seeds = completed_seeds
        self._done_columns = done_columns
        self._num_envs = rewards.shape[1]
        self._completed_count = 0

    @property
    def completed_count(self) -> int:
        """How many completed-episode entries have been written so far."""
        return self._completed_count

    def record_step(self, t: int, step_rewards: list, step_terminations: list, step_truncations: list) -> int:
        """Record step ``t`` for every env and return how many episodes ended.

        ``step_rewards`` etc. are lists of one entry per env, as the envs returned
        them. The columns of the envs whose episode ended are written, in
        increasing order, to the front of ``done_columns``; the return value says
        how many. Their running return and length restart at zero. Every input is
        converted before anything is written, so a bad reward records nothing.
        """
        t = index_argument(t, self._rewards.shape[0], "time step")
        check_step_lists(
            self._num_envs,
            step_rewards=step_rewards,
            step_terminations=step_terminations,
            step_truncations=step_truncations,
        )
        rewards_now = np.empty(self._num_envs, dtype=np.float64)
        terminated = np.empty(self._num_envs, dtype=bool)
        truncated = np.empty(self._num_envs, dtype=bool)
        # One env at a time, as the compiled core: the first bad value raises first in both.
        for column in range(self._num_envs):
            rewards_now[column] = float(step_rewards[column])
            terminated[column] = bool(step_terminations[column])
            truncated[column] = bool(step_truncations[column])
        columns = np.flatnonzero(terminated | truncated)
        if self._completed_count + columns.shape[0] > self._completed_returns.shape[0]:
            refuse_full_buffers(self._completed_returns.shape[0])

        self._rewards[t] = rewards_now
        self._terminations[t] = terminated
        self._truncations[t] = truncated
        self._step_episode_seeds[t] = self._running_seeds
        self._running_returns += rewards_now
        self._running_lengths += 1

        return self._end_episodes(t, columns)

    def _end_episodes(self, t: int, columns: np.ndarray) -> int:
        """Book the episodes of ``columns`` that ended at step ``t``; return how many."""
        n_done = columns.shape[0]
        start = self._completed_count
        stop = start + n_done
        self._completed_returns[start:stop] = self._running_returns[columns]
        self._completed_lengths[start:stop] = self._running_lengths[columns]
        self._completed_env_indices[start:stop] = self._env_offset + columns
        self._completed_end_steps[start:stop] = t
        self._completed_seeds[start:stop] = self._running_seeds[columns]
        self._completed_count = stop
        self._running_returns[columns] = 0.0
        self._running_lengths[columns] = 0
        self._done_columns[:n_done] = columns
        return n_done

    def record_rows(self, t: int, counted: np.ndarray | None = None) -> int:
        """Record step ``t`` from the rewards and flags already stored in row ``t``.

        For sources that write whole rows themselves (a vector env). ``counted``
        is ``None`` or a bool ``[num_envs]`` array; a column where it is False
        took a step that belongs to no episode (a ``NEXT_STEP`` autoreset step):
        its reward and length are not added. Returns how many episodes ended;
        their columns go to the front of ``done_columns``.
        """
        t = index_argument(t, self._rewards.shape[0], "time step")
        if counted is not None:
            check_counted(counted, self._num_envs)
        columns = np.flatnonzero(self._terminations[t] | self._truncations[t])
        if self._completed_count + columns.shape[0] > self._completed_returns.shape[0]:
            refuse_full_buffers(self._completed_returns.shape[0])
        self._step_episode_seeds[t] = self._running_seeds
        if counted is None:
            self._running_returns += self._rewards[t]
            self._running_lengths += 1
        else:
            self._running_returns[counted] += self._rewards[t][counted]
            self._running_lengths += counted
        return self._end_episodes(t, columns)


class EnvStepper:
    """Steps every env of a group once and records the step: the per-env loop of a rollout.

    Parameters
    ----------
    envs:
        The group's envs, one per column of the storage.
    writers:
        One :class:`ObservationWriter` per observation leaf.
    recorder:
        The :class:`StepRecorder` of the rollout.
    flatten:
        ``None`` for a single-leaf space, else a callable taking one observation
        to the list of its leaf values.
    info_keys, info_storage:
        Scalar info entries to store, and one ``[horizon, num_envs]`` float64
        array for each.
    step_seconds:
        ``None``, or a contiguous ``[num_envs]`` float64 array: each env's
        ``step`` call adds the seconds it took (a monotonic clock) to its entry.

    :meth:`step` calls ``env.step`` for every env (even after one fails), checks
    what it returned (:mod:`parallel_rollouts.checks.env_returns`), writes the
    observation into row ``t + 1`` and the info entries into row ``t``, and then,
    if every env succeeded, records rewards and end flags with the recorder.
    """

    #: ``(column, phase, exception, info_key, info)`` for every env that failed in the
    #: last step (the last two are set for phase ``"info"``).
    failures: list = []
    #: ``(column, leaf_index, value)`` of the first observation that could not be
    #: stored in the last step (``leaf_index`` -1: it did not match the nesting).
    bad_observation = None

    def __init__(
        self,
        envs: list,
        writers: list,
        recorder: StepRecorder,
        flatten,
        info_keys: tuple,
        info_storage: list,
        step_seconds=None,
    ) -> None:
        require_list(envs, "envs")
        require_instances(writers, ObservationWriter, "writers")
        require_instance(recorder, StepRecorder, "recorder")
        require_tuple(info_keys, "info_keys")
        require_list(info_storage, "info_storage")
        check_stepper_arguments(
            envs,
            [(w._observations.shape[0], w._num_envs) for w in writers],
            recorder._rewards.shape,
            flatten,
            info_keys,
            info_storage,
            step_seconds,
        )
        self._step_seconds = step_seconds
        self._envs = envs
        self._writers = writers
        self._recorder = recorder
        self._flatten = flatten
        self._info = list(zip(info_keys, info_storage))
        self.failures = []
        self.bad_observation = None

    def step(self, t: int, actions: list) -> int:
        """Step every env with ``actions[column]``; return how many episodes ended, or -1.

        -1 means nothing was recorded: see :attr:`failures` and :attr:`bad_observation`.
        """
        t = index_argument(t, self._recorder._rewards.shape[0], "time step")
        check_step_lists(len(self._envs), actions=actions)
        self.failures = []
        self.bad_observation = None
        rewards, terminations, truncations = [], [], []
        step_seconds, clock = self._step_seconds, perf_counter
        for column, env in enumerate(self._envs):
            try:
                started = clock()
                result = env.step(actions[column])
                if step_seconds is not None:
                    step_seconds[column] += clock() - started
                observation, reward, terminated, truncated, info = check_step_result(result)
                reward = reward if type(reward) is float else reward_value(reward)
                terminated = terminated if type(terminated) is bool else end_flag(terminated, "terminated")
                truncated = truncated if type(truncated) is bool else end_flag(truncated, "truncated")
            except Exception as error:
                self.failures.append((column, "step", error, None, None))
                continue
            rewards.append(reward)
            terminations.append(terminated)
            truncations.append(truncated)
            for key, storage in self._info:
                try:
                    value = info[key]
                    storage[t, column] = value if type(value) is float else info_number(value, key)
                except (KeyError, TypeError, ValueError) as error:
                    self.failures.append((column, "info", error, key, info))
            if self.bad_observation is None:
                self._write(t + 1, column, observation)
        if self.failures or self.bad_observation is not None:
            return -1
        return self._recorder.record_step(t, rewards, terminations, truncations)

    def _write(self, row: int, column: int, observation) -> None:
        if self._flatten is None:
            values = [observation]
        else:
            try:
                values = self._flatten(observation)
            except Exception as error:
                self.bad_observation = (column, -1, error)
                return
        for leaf_index, (writer, value) in enumerate(zip(self._writers, values)):
            if not writer._copy_into(row, column, value):
                self.bad_observation = (column, leaf_index, value)
                return


class RowStepper:
    """A group's whole step of one row, end of episode included.

    Parameters
    ----------
    stepper:
        The rollout's :class:`EnvStepper`.
    action_leaves:
        The rollout's action storage, one ``[horizon, num_envs, *leaf]`` array
        per leaf of the action space.
    split_nested:
        ``None`` for a single-leaf action space (each env gets row ``t`` of the
        leaf, a NumPy scalar or a view of a copy made for this step), else
        ``split_nested(t)`` returning the list of per-env actions.
    seed_table:
        The group's :class:`~parallel_rollouts.config.seeding.EpisodeSeedTable`: arrays
        ``seeds``, ``blocks``, ``episodes_started`` and a method
        ``fill(column, block)``. ``None``: an env whose episode ended is reset
        without a seed (it continues its own generator) and its next episode's
        seed is recorded as -1.
    running_seeds:
        The recorder's ``running_seeds``; a reset sets its env's entry.
    checked_leaves:
        ``(leaf_index, low, high)`` for each observation leaf whose values are
        checked (flat float64 bounds); empty when ``observation_check="off"``.
    hooks:
        The Python side of the group, called only on rare paths:
        ``step_failed(t)`` (must raise: see the stepper's ``failures`` and
        ``bad_observation``), ``rows_outside(t, n_done)`` and
        ``finals_outside(t, n_done)`` (a value of row ``t + 1`` / of a terminal
        observation lies outside the bounds: raise or warn),
        ``reset_unwritable(t, column, observation)`` (a reset observation the fast
        path cannot store: store it by the general rule or raise) and
        ``reset_failed(t, failures)`` (must raise; ``failures`` holds
        ``(column, exception)`` for each env whose ``reset`` failed).
    reset_seconds:
        ``None``, or a contiguous ``[num_envs]`` float64 array: each reset of an
        env whose episode ended adds the seconds its ``reset`` call took.

    :meth:`step` does, in order: split the actions; step every env (the
    :class:`EnvStepper`); for the envs whose episode ended, copy row ``t + 1``
    into ``final_observations[t]``, check those terminal observations, and reset
    each env with its next episode seed, writing the reset observation over row
    ``t + 1`` (every env is reset even after one fails); then check row ``t + 1``.
    It returns how many episodes ended.
    """

    def __init__(
        self, stepper: EnvStepper, action_leaves: list, split_nested, seed_table, running_seeds: np.ndarray,
        checked_leaves: list, hooks, reset_seconds=None,
    ) -> None:
        require_instance(stepper, EnvStepper, "stepper")
        check_row_stepper_arguments(
            stepper._recorder._rewards.shape, action_leaves, split_nested, seed_table, running_seeds,
            checked_leaves, [writer._observations for writer in stepper._writers], hooks, reset_seconds,
        )
        self._reset_seconds = reset_seconds
        self._stepper = stepper
        self._action_leaves = action_leaves
        self._split_nested = split_nested
        self._seed_table = seed_table
        self._running_seeds = running_seeds
        self._checked_leaves = checked_leaves
        self._hooks = hooks
        self._num_envs = len(stepper._envs)

    def _split(self, t: int) -> list:
        if self._split_nested is not None:
            return self._split_nested(t)
        row = self._action_leaves[0][t]
        return list(row.copy() if row.ndim > 1 else row)

    def step(self, t: int) -> int:
        """Step row ``t`` (see the class docstring); return how many episodes ended."""
        stepper = self._stepper
        t = index_argument(t, stepper._recorder._rewards.shape[0], "time step")
        n_done = stepper.step(t, self._split(t))
        if n_done < 0:
            self._hooks.step_failed(t)
            refuse_returning_hook("step_failed")
        if n_done:
            self._end_episodes(t, n_done)
        for leaf_index, low, high in self._checked_leaves:
            if find_out_of_bounds(stepper._writers[leaf_index]._observations[t + 1], low, high) >= 0:
                self._hooks.rows_outside(t, n_done)
                break
        return n_done

    def _end_episodes(self, t: int, n_done: int) -> None:
        stepper = self._stepper
        done_columns = stepper._recorder._done_columns
        ended = done_columns[:n_done]
        for writer in stepper._writers:
            writer.scatter_final(t, done_columns, n_done)
        for leaf_index, low, high in self._checked_leaves:
            if find_out_of_bounds(stepper._writers[leaf_index]._final_observations[t, ended], low, high) >= 0:
                self._hooks.finals_outside(t, n_done)
                break
        table = self._seed_table
        failures = []
        for column in ended.tolist():
            seed = -1  # no seed table: the env continues its own generator, the seed is unknown
            if table is not None:
                episode = int(table.episodes_started[column])
                block, offset = divmod(episode, table.seeds.shape[1])
                if table.blocks[column] != block:
                    table.fill(column, block)
                seed = int(table.seeds[column, offset])
            try:
                started = perf_counter()
                env = stepper._envs[column]
                result = env.reset(seed=seed) if table is not None else env.reset()
                if self._reset_seconds is not None:
                    self._reset_seconds[column] += perf_counter() - started
                observation, _ = check_reset_result(result)
            except Exception as error:
                failures.append((column, error))
                continue
            if table is not None:
                table.episodes_started[column] = episode + 1
            self._running_seeds[column] = seed
            if not self._write_reset(t + 1, column, observation):
                self._hooks.reset_unwritable(t, column, observation)
        if failures:
            self._hooks.reset_failed(t, failures)
            refuse_returning_hook("reset_failed")

    def _write_reset(self, row: int, column: int, observation) -> bool:
        writers = self._stepper._writers
        if self._stepper._flatten is None:
            return writers[0]._copy_into(row, column, observation)
        try:
            values = self._stepper._flatten(observation)
        except Exception:
            return False
        if len(values) != len(writers):
            return False
        return all(writer._copy_into(row, column, value) for writer, value in zip(writers, values))


class VectorRowRecorder:
    """One row a vector env returned, stored, checked and booked in one call.

    Parameters
    ----------
    recorder:
        The rollout's :class:`StepRecorder` (its storage and episode books).
    writers:
        One :class:`ObservationWriter` per observation leaf.
    checked_leaves:
        ``(leaf_index, low, high)`` for each observation leaf whose values are
        checked, as for :class:`RowStepper`.
    reset_steps:
        ``[horizon, num_envs]`` bool storage; row ``t`` marks the sub-envs whose
        step ``t`` was a ``NEXT_STEP`` reset (belongs to no episode).
    counted:
        A contiguous ``[num_envs]`` bool array owned by the caller and kept across
        rollouts: False for a sub-env whose episode ended at the step before (in
        ``"NextStep"`` mode its next step is the vector env's reset). Updated in place.
    step_seconds:
        ``None``, or ``[num_envs]`` float64: each row adds an equal share of the
        seconds the vector env's ``step`` took to every sub-env.
    autoreset_mode:
        The vector env's mode, as the value of Gymnasium's ``AutoresetMode``:
        ``"NextStep"``, ``"SameStep"`` or ``"Disabled"``.

    :meth:`record` takes what one ``step`` returned. It declines, returning -1,
    unless every value can be stored as it is: rewards a
    contiguous float64 or float32 ``[num_envs]`` array, both flags contiguous
    bool ``[num_envs]`` arrays, each observation leaf an array of the
    storage's dtype and shape ``[num_envs, *leaf]`` (any strides), every checked value inside
    its bounds, and (``"NextStep"``) no sub-env reporting an end at its reset
    step. A decline writes nothing, except when only the bounds are broken:
    the observations are stored into row ``t + 1`` first and checked there (one
    pass over the values), so that row is written. The caller then takes the
    general path, which converts, warns or raises as the rules say, and writes
    that row again. Otherwise it writes observation row ``t + 1``,
    rewards, flags and ``reset_steps`` row ``t``, the step seconds, and the
    books (a reset step adds neither reward nor length); copies the terminal
    observations of the ended sub-envs into ``final_observations[t]`` unless the
    mode is ``"SameStep"`` (the vector env returns those in its info); and in
    ``"NextStep"`` mode records the ended sub-envs' next seeds as unknown (-1),
    since the vector env resets them with seeds of its own. It returns how many
    episodes ended; their columns are at the front of the recorder's
    ``done_columns``.
    """

    def __init__(
        self, recorder: StepRecorder, writers: list, checked_leaves: list, reset_steps: np.ndarray,
        counted: np.ndarray, step_seconds, autoreset_mode: str,
    ) -> None:
        require_instance(recorder, StepRecorder, "recorder")
        require_instances(writers, ObservationWriter, "writers")
        check_vector_row_arguments(
            recorder._rewards.shape,
            [writer._observations for writer in writers],
            [writer._final_observations.shape[0] for writer in writers],
            checked_leaves, reset_steps, counted, step_seconds, autoreset_mode,
        )
        self._recorder = recorder
        self._writers = writers
        self._checked_leaves = checked_leaves
        self._reset_steps = reset_steps
        self._counted = counted
        self._step_seconds = step_seconds
        self._next_step = autoreset_mode == "NextStep"
        self._scatter_finals = autoreset_mode != "SameStep"
        self._num_envs = recorder._num_envs

    def _takes(self, rewards, terminations, truncations, leaves: list) -> bool:
        """Whether every value can be stored as it is (the bounds aside: they are checked in place)."""
        n = self._num_envs
        if not (
            _is_vector(terminations, n, (np.bool_,))
            and _is_vector(truncations, n, (np.bool_,))
            and _is_vector(rewards, n, (np.float64, np.float32))
        ):
            return False
        for writer, leaf in zip(self._writers, leaves):
            target = writer._observations
            if not (
                type(leaf) is np.ndarray
                and leaf.dtype == target.dtype
                and leaf.dtype.isnative
                and leaf.shape == (n,) + target.shape[2:]
            ):
                return False
        for leaf_index, _, _ in self._checked_leaves:
            values = leaves[leaf_index]
            if values.dtype.kind == "f" and values.dtype.itemsize not in (4, 8):
                return False  # (float16 and the like: the compiled twin has no kernel for them)
        if self._next_step and ((terminations | truncations) & ~self._counted).any():
            return False
        return True

    def record(self, t: int, rewards, terminations, truncations, leaves: list, seconds: float) -> int:
        """Store, check and book row ``t``; return how many episodes ended, or -1 (declined; see the class)."""
        recorder = self._recorder
        t = index_argument(t, recorder._rewards.shape[0], "time step")
        check_step_lists(len(self._writers), leaves=leaves)
        seconds = seconds_argument(seconds)
        if not self._takes(rewards, terminations, truncations, leaves):
            return -1
        ended = terminations | truncations
        columns = np.flatnonzero(ended)
        if recorder._completed_count + columns.shape[0] > recorder._completed_returns.shape[0]:
            refuse_full_buffers(recorder._completed_returns.shape[0])
        for writer, leaf in zip(self._writers, leaves):
            writer._observations[t + 1] = leaf
        for leaf_index, low, high in self._checked_leaves:
            if find_out_of_bounds(self._writers[leaf_index]._observations[t + 1], low, high) >= 0:
                return -1
        recorder._rewards[t] = rewards
        # As NumPy's own True: a bool array may hold another nonzero byte (a view of uint8 data).
        recorder._terminations[t] = terminations.view(np.uint8) != 0
        recorder._truncations[t] = truncations.view(np.uint8) != 0
        if self._step_seconds is not None and self._num_envs:
            self._step_seconds += seconds / self._num_envs
        recorder._step_episode_seeds[t] = recorder._running_seeds
        if self._next_step:
            counted = self._counted.copy()
            np.logical_not(counted, out=self._reset_steps[t])
            np.logical_not(ended, out=self._counted)
            recorder._running_returns[counted] += recorder._rewards[t][counted]
            recorder._running_lengths += counted
        else:
            self._reset_steps[t] = False
            recorder._running_returns += recorder._rewards[t]
            recorder._running_lengths += 1
        n_done = recorder._end_episodes(t, columns)
        if self._scatter_finals:
            for writer in self._writers:
                writer.scatter_final(t, recorder._done_columns, n_done)
        if self._next_step:
            recorder._running_seeds[columns] = -1
        return n_done


def _is_vector(values, length: int, dtypes: tuple) -> bool:
    """A C-contiguous native 1-D array of ``length`` entries of one of ``dtypes``."""
    return (
        type(values) is np.ndarray
        and values.shape == (length,)
        and any(values.dtype == dtype for dtype in dtypes)
        and values.dtype.isnative
        and values.flags.c_contiguous
    )


def find_out_of_bounds(values: np.ndarray, low: np.ndarray, high: np.ndarray) -> int:
    """Index of the first row of ``values`` with an element outside ``[low, high]``, or -1.

    ``values`` has shape ``[rows, *leaf_shape]`` and any integer, float or bool
    dtype; ``low`` and ``high`` are the leaf's inclusive bounds as flat float64
    arrays of ``prod(leaf_shape)`` elements. Comparisons are made in float64.
    NaN is outside any bounds.
    """
    flat, low_flat, high_flat = bounds_operands(values, low, high)
    if flat.size == 0:
        return -1
    as_double = flat.astype(np.float64)
    inside = (as_double >= low_flat) & (as_double <= high_flat)
    outside_rows = np.flatnonzero(~inside.all(axis=1))
    return int(outside_rows[0]) if outside_rows.size else -1
