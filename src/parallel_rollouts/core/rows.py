"""The per-step core: a group's rows stepped, stored, reset and booked, written once.

This one source is both cores. Cython compiles it, with the types declared in
``_core.pxd``, into the extension ``parallel_rollouts.core._core``, whose
kernels are the typed ones of ``_kernels.pyx``; the interpreter runs it as the
pure-Python core (``core="python"``), whose kernels are their NumPy references
in ``kernels.py``. The kernels move bytes, check bounds and keep the books;
everything else, the order of a row's work, autoreset, the seeds, every check
and message, is here. The tests run every case through both.

The per-step work of a group of envs:

* :class:`ObservationWriter` moves env observations into one leaf of the
  preallocated ``[rows, env, ...]`` observation storage and scatters the rows of
  envs whose episode just ended into ``final_observations``.
* :func:`find_out_of_bounds` checks a batch of actions or observations against
  a space's bounds.
* :class:`StepRecorder` writes one step of rewards and end flags and keeps the
  episode books: running return and length per env, the seed of the episode each
  row belongs to, and a record for every episode that ends.
* :class:`EnvStepper` steps every env of a group once and records the step.
* :class:`RowStepper` is a group's whole step of one row, autoreset included:
  it splits the actions, runs the :class:`EnvStepper`, scatters the terminal
  observations of the envs whose episode ended, resets them with their next
  episode seeds, and checks the new rows against the space's bounds. What only
  Python can do (building an error, warning about a value) it hands to the
  ``hooks`` object it was built with.
* :class:`GymnasiumRowStepper` is a vector step of single envs the way
  Gymnasium's ``SyncVectorEnv`` takes it, for ``ParallelVectorEnv``: each env
  is stepped, or reset (``NEXT_STEP``) or refused (``DISABLED``) after an
  episode's end, or stepped and reset in the same step (``SAME_STEP``); it
  collects what the envs returned, their info events and their failures, and
  stores rewards and end flags that need no conversion.
* :class:`VectorRowRecorder` is the same for a vector env's row, whose
  autoreset the vector env does: it stores the rows one ``step`` of the vector
  env returned, checks them, and keeps the books, in one call, or declines when
  the row needs the general rules.

Storage handed to any class may be a column slice (``array[:, lo:hi]``) of a
larger ``[rows, num_envs, ...]`` array, which is how one worker writes its own
envs' part of a shared batch.
"""

from parallel_rollouts.checks.conversion import convert_row
from parallel_rollouts.checks.env_returns import check_reset_result, check_step_result, end_flag, info_number, reward_value
from parallel_rollouts.core import arguments

if __name__.endswith("._core"):  # the compiled build; the interpreter imports this file as `rows`
    from parallel_rollouts.core import _kernels as kernels
else:
    from parallel_rollouts.core import kernels

__all__ = [
    "EnvStepper",
    "GymnasiumRowStepper",
    "ObservationWriter",
    "RowStepper",
    "StepRecorder",
    "VectorRowRecorder",
    "find_out_of_bounds",
]

find_out_of_bounds = kernels.find_out_of_bounds


def _index_in(value, stop, field):
    """``value`` as an index in ``[0, stop)``: an ``int`` in range here, anything else decided
    (taken or refused) by ``arguments.index_argument``."""
    if type(value) is int and 0 <= value < stop:
        return value
    return arguments.index_argument(value, stop, field)


def _count_in(value, stop):
    """``value`` as a count in ``[0, stop]`` (see ``_index_in``)."""
    if type(value) is int and 0 <= value <= stop:
        return value
    return arguments.count_argument(value, stop)


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
    on_conversion:
        ``None``, or a callable ``(column, dtype)`` told the first time a value of
        env ``column`` is stored converted from another ``dtype`` (for the warning
        that a conversion may round; once per column, so it costs nothing per step).

    Rows are copied whole. A source whose dtype and shape already match the
    storage is copied byte for byte; anything else (a Python scalar, another
    dtype) is converted as one row by the rule of
    :mod:`parallel_rollouts.checks.conversion`. A source that cannot be stored
    is never written: the methods report it instead, so the caller can name the env.
    """

    def __init__(self, observations, final_observations, on_conversion=None):
        arguments.check_observation_storage(observations, final_observations)
        self.rows = kernels.RowBytes(observations, final_observations)
        self.on_conversion = on_conversion
        self.converted_columns = set()
        self.observations = observations
        self.row_shape = tuple(observations.shape[2:])
        self.dtype = observations.dtype
        self.num_rows = observations.shape[0]
        self.num_envs = observations.shape[1]
        self.num_final_rows = final_observations.shape[0]

    def _copy_into(self, row, column, source):
        if self.rows.copy_exact(row, column, source):
            return True
        # Python scalars, other dtypes, non-contiguous arrays: the one conversion rule (no
        # value may change but by float rounding).
        converted = convert_row(source, self.row_shape, self.dtype)
        if converted is None:
            return False
        # The set first: once a column is told, a step pays one lookup and no dtype comparison.
        if self.on_conversion is not None and column not in self.converted_columns and converted.dtype != self.dtype:
            self.converted_columns.add(column)
            self.on_conversion(column, converted.dtype)
        self.observations[row, column] = converted
        return True

    def write_rows(self, row, sources):
        """Write ``sources[j]`` into ``observations[row, j]`` for every env ``j``.

        Returns ``-1`` when every source was written, otherwise the index of the
        first source that cannot be stored (wrong shape, non-numeric, or a value
        the conversion rule refuses); sources before it have been written, it and
        those after it have not.
        """
        index = _index_in(row, self.num_rows, "row")
        if type(sources) is not list or len(sources) != self.num_envs:
            arguments.check_step_lists(self.num_envs, sources=sources)
        for column in range(self.num_envs):
            if not self._copy_into(index, column, sources[column]):
                return column
        return -1

    def write_row(self, row, column, source):
        """Write one env's observation into ``observations[row, column]``.

        Returns ``False``, writing nothing, when ``source`` cannot be stored.
        """
        index = _index_in(row, self.num_rows, "row")
        return self._copy_into(index, _index_in(column, self.num_envs, "column"), source)

    def scatter_final(self, t, done_columns, count):
        """Copy ``observations[t + 1, c]`` into ``final_observations[t, c]``.

        ``c`` runs over ``done_columns[:count]``, the envs whose episode ended at
        step ``t``. Call it before the reset observations overwrite row ``t + 1``.
        """
        step = _index_in(t, self.num_final_rows, "time step")
        arguments.check_done_columns(done_columns, 0)
        n = _count_in(count, done_columns.shape[0])
        for k in range(n):
            column = int(done_columns[k])
            if column < 0 or column >= self.num_envs:
                arguments.index_argument(column, self.num_envs, "done column")
        self.rows.scatter(step, done_columns, n)


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
        rewards,
        terminations,
        truncations,
        step_episode_seeds,
        running_returns,
        running_lengths,
        running_seeds,
        completed_returns,
        completed_lengths,
        completed_env_indices,
        completed_end_steps,
        completed_seeds,
        done_columns,
        env_offset,
    ):
        arguments.check_step_storage(
            rewards, terminations, truncations, step_episode_seeds, running_returns, running_lengths,
            running_seeds, completed_returns, completed_lengths, completed_env_indices,
            completed_end_steps, completed_seeds, done_columns,
        )
        self.books = kernels.EpisodeBooks(
            rewards, terminations, truncations, step_episode_seeds, running_returns, running_lengths,
            running_seeds, completed_returns, completed_lengths, completed_env_indices, completed_end_steps,
            completed_seeds, done_columns, arguments.env_offset_argument(env_offset),
        )
        self.done_columns = done_columns
        self.horizon = rewards.shape[0]
        self.num_envs = rewards.shape[1]

    @property
    def completed_count(self):
        """How many completed-episode entries have been written so far."""
        return self.books.completed_count

    def record_step(self, t, step_rewards, step_terminations, step_truncations):
        """Record step ``t`` for every env and return how many episodes ended.

        ``step_rewards`` etc. are lists of one entry per env, as the envs returned
        them. The columns of the envs whose episode ended are written, in
        increasing order, to the front of ``done_columns``; the return value says
        how many. Their running return and length restart at zero. Every input is
        converted before anything is written, so a bad reward records nothing.
        """
        step = _index_in(t, self.horizon, "time step")
        if not (
            type(step_rewards) is list and len(step_rewards) == self.num_envs
            and type(step_terminations) is list and len(step_terminations) == self.num_envs
            and type(step_truncations) is list and len(step_truncations) == self.num_envs
        ):
            arguments.check_step_lists(
                self.num_envs,
                step_rewards=step_rewards,
                step_terminations=step_terminations,
                step_truncations=step_truncations,
            )
        # One env at a time into the books' scratch rows: the first bad value raises, and
        # nothing is recorded.
        for column in range(self.num_envs):
            self.books.rewards_now[column] = float(step_rewards[column])
            self.books.flags_now[column] = (
                (1 if step_terminations[column] else 0) | (2 if step_truncations[column] else 0)
            )
        return self._record_scratch(step)

    def _record_scratch(self, t):
        """Record step ``t`` from the books' scratch rows; return how many episodes ended."""
        n_done = self.books.record_scratch(t)
        if n_done < 0:
            arguments.refuse_full_buffers(self.books.capacity)
        return n_done

    def record_rows(self, t, counted=None):
        """Record step ``t`` from the rewards and flags already stored in row ``t``.

        For sources that write whole rows themselves (a multi-agent env). ``counted``
        is ``None`` or a bool ``[num_envs]`` array, the source's mask; a column where
        it is False took a step that belongs to no episode (an agent that is not
        live): its reward and length are not added. Returns how many episodes ended;
        their columns go to the front of ``done_columns``.
        """
        step = _index_in(t, self.horizon, "time step")
        if counted is not None:
            arguments.check_counted(counted, self.num_envs)
        n_done = self.books.record_rows(step, counted)
        if n_done < 0:
            arguments.refuse_full_buffers(self.books.capacity)
        return n_done


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
    After a step, ``failures`` lists ``(column, phase, exception, info_key, info)``
    for every env that failed (the last two set for phase ``"info"``), and
    ``bad_observation`` is ``(column, leaf_index, value)`` of the first
    observation that could not be stored (``leaf_index`` -1: it did not match
    the nesting), or ``None``.
    """

    def __init__(self, envs, writers, recorder, flatten, info_keys, info_storage, step_seconds=None):
        arguments.require_list(envs, "envs")
        arguments.require_instances(writers, ObservationWriter, "writers")
        arguments.require_instance(recorder, StepRecorder, "recorder")
        arguments.require_tuple(info_keys, "info_keys")
        arguments.require_list(info_storage, "info_storage")
        arguments.check_stepper_arguments(
            envs,
            [(writer.num_rows, writer.num_envs) for writer in writers],
            (recorder.horizon, recorder.num_envs),
            flatten,
            info_keys,
            info_storage,
            step_seconds,
        )
        self.timed = step_seconds is not None
        if self.timed:
            self.step_seconds = step_seconds
        self.clock = kernels.Clock()
        self.envs = envs
        self.writers = writers
        self.recorder = recorder
        self.flatten = flatten
        self.info_keys = info_keys
        self.info_storage = info_storage
        self.num_envs = len(envs)
        self.failures = []
        self.bad_observation = None

    def step(self, t, actions):
        """Step every env with ``actions[column]``; return how many episodes ended, or -1.

        -1 means nothing was recorded: see ``failures`` and ``bad_observation``.
        """
        step = _index_in(t, self.recorder.horizon, "time step")
        if type(actions) is not list or len(actions) != self.num_envs:
            arguments.check_step_lists(self.num_envs, actions=actions)
        return self._step(step, actions)

    def _step(self, t, actions):
        """Step row ``t`` (in range) with ``actions`` (one per env, checked by the caller)."""
        books = self.recorder.books
        n_keys = len(self.info_keys)
        if self.failures:
            self.failures = []
        self.bad_observation = None
        for column in range(self.num_envs):
            try:
                if self.timed:
                    started = self.clock.now()
                    result = self.envs[column].step(actions[column])
                    self.step_seconds[column] += self.clock.now() - started
                else:
                    result = self.envs[column].step(actions[column])
                if type(result) is not tuple or len(result) != 5:
                    result = check_step_result(result)
                observation, reward, terminated, truncated, info = result
                if type(reward) is float:
                    reward_number = reward
                else:
                    reward_number = reward_value(reward)
                if terminated is True:
                    flags = 1
                elif terminated is False:
                    flags = 0
                else:
                    flags = 1 if end_flag(terminated, "terminated") else 0
                if truncated is True:
                    flags |= 2
                elif truncated is not False and end_flag(truncated, "truncated"):
                    flags |= 2
            except Exception as error:
                self.failures.append((column, "step", error, None, None))
                continue
            books.rewards_now[column] = reward_number
            books.flags_now[column] = flags
            for leaf_index in range(n_keys):
                key = self.info_keys[leaf_index]
                try:
                    info_value = info[key]
                    if type(info_value) is not float:
                        info_value = info_number(info_value, key)
                    self.info_storage[leaf_index][t, column] = info_value
                except (KeyError, TypeError, ValueError) as error:
                    self.failures.append((column, "info", error, key, info))
            if self.bad_observation is not None:
                continue
            if self.flatten is None:
                writer = self.writers[0]
                if not writer._copy_into(t + 1, column, observation):
                    self.bad_observation = (column, 0, observation)
            else:
                self._write_nested(t + 1, column, observation)
        if self.failures or self.bad_observation is not None:
            return -1
        return self.recorder._record_scratch(t)

    def _write_nested(self, row, column, observation):
        try:
            values = self.flatten(observation)
        except Exception as error:
            self.bad_observation = (column, -1, error)
            return
        if len(values) != len(self.writers):
            self.bad_observation = (column, -1, ValueError(
                f"the observation has {len(values)} leaves; the observation space has {len(self.writers)}"
            ))
            return
        for leaf_index in range(len(self.writers)):
            writer = self.writers[leaf_index]
            if not writer._copy_into(row, column, values[leaf_index]):
                self.bad_observation = (column, leaf_index, values[leaf_index])
                return


class RowStepper:
    """A group's whole step of one row, end of episode and autoreset included.

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

    def __init__(self, stepper, action_leaves, split_nested, seed_table, running_seeds, checked_leaves, hooks, reset_seconds=None):
        arguments.require_instance(stepper, EnvStepper, "stepper")
        arguments.check_row_stepper_arguments(
            (stepper.recorder.horizon, stepper.recorder.num_envs), action_leaves, split_nested, seed_table,
            running_seeds, checked_leaves, [writer.observations for writer in stepper.writers], hooks, reset_seconds,
        )
        self.timed = reset_seconds is not None
        if self.timed:
            self.reset_seconds = reset_seconds
        self.clock = kernels.Clock()
        self.stepper = stepper
        self.recorder = stepper.recorder
        self.action_leaf = action_leaves[0]
        self.action_rows_are_arrays = action_leaves[0].ndim > 2
        self.split_nested = split_nested
        self.seed_table = seed_table
        self.reseed = seed_table is not None
        if self.reseed:
            self.seeds = seed_table.seeds
            self.blocks = seed_table.blocks
            self.episodes_started = seed_table.episodes_started
        self.running_seeds = running_seeds
        self.checked = [
            kernels.LeafBounds(stepper.writers[leaf_index].rows, low, high) for leaf_index, low, high in checked_leaves
        ]
        self.hooks = hooks
        self.num_envs = stepper.num_envs

    def _split(self, t):
        if self.split_nested is not None:
            actions = self.split_nested(t)
            if type(actions) is not list or len(actions) != self.num_envs:
                arguments.check_step_lists(self.num_envs, actions=actions)
            return actions
        row = self.action_leaf[t]
        if self.action_rows_are_arrays:
            # A copy per step: an env may keep or change its action without touching the batch.
            row = row.copy()
        return list(row)

    def step(self, t):
        """Step row ``t`` (see the class docstring); return how many episodes ended."""
        return self._step_row(_index_in(t, self.recorder.horizon, "time step"))

    def _step_row(self, t):
        n_done = self.stepper._step(t, self._split(t))
        if n_done < 0:
            self.hooks.step_failed(t)
            arguments.refuse_returning_hook("step_failed")
        if n_done:
            self._end_episodes(t, n_done)
        for bounds in self.checked:
            if bounds.row_outside(t + 1):
                self.hooks.rows_outside(t, n_done)
                break
        return n_done

    def _end_episodes(self, t, n_done):
        """Autoreset: keep the terminal rows of the ``n_done`` ended envs, check them, reset each
        env with its next episode seed and write the reset observation over row ``t + 1``."""
        done_columns = self.recorder.done_columns
        for writer in self.stepper.writers:
            writer.rows.scatter(t, done_columns, n_done)
        for bounds in self.checked:
            if bounds.finals_outside(t, done_columns, n_done):
                self.hooks.finals_outside(t, n_done)
                break
        failures = None
        for k in range(n_done):
            column = int(done_columns[k])
            seed = -1  # no seed table: the env continues its own generator, the seed is unknown
            episode = 0
            if self.reseed:
                episode = int(self.episodes_started[column])
                block = episode // self.seeds.shape[1]
                offset = episode - block * self.seeds.shape[1]
                if self.blocks[column] != block:
                    self.seed_table.fill(column, block)
                seed = int(self.seeds[column, offset])
            try:
                result = self._reset(column, seed)
                if type(result) is not tuple or len(result) != 2:
                    result = check_reset_result(result)
                observation = result[0]
            except Exception as error:
                if failures is None:
                    failures = []
                failures.append((column, error))
                continue
            if self.reseed:
                self.episodes_started[column] = episode + 1
            self.running_seeds[column] = seed
            if not self._write_reset(t + 1, column, observation):
                self.hooks.reset_unwritable(t, column, observation)
        if failures:
            self.hooks.reset_failed(t, failures)
            arguments.refuse_returning_hook("reset_failed")
        return 0

    def _reset(self, column, seed):
        """Reset env ``column`` (with ``seed`` when the group reseeds every episode), timed."""
        env = self.stepper.envs[column]
        started = self.clock.now() if self.timed else 0.0
        result = env.reset(seed=seed) if self.reseed else env.reset()
        if self.timed:
            self.reset_seconds[column] += self.clock.now() - started
        return result

    def _write_reset(self, row, column, observation):
        writers = self.stepper.writers
        if self.stepper.flatten is None:
            writer = writers[0]
            return writer._copy_into(row, column, observation)
        try:
            values = self.stepper.flatten(observation)
        except Exception:
            return False
        if len(values) != len(writers):
            return False
        for leaf_index in range(len(writers)):
            writer = writers[leaf_index]
            if not writer._copy_into(row, column, values[leaf_index]):
                return False
        return True


class GymnasiumRowStepper:
    """One vector step of a group of single envs, as ``gymnasium.vector.SyncVectorEnv`` takes it.

    Parameters
    ----------
    envs:
        The group's envs, one per column.
    autoreset_mode:
        The vector env's mode, as the value of Gymnasium's ``AutoresetMode``:
        ``"NextStep"``, ``"SameStep"`` or ``"Disabled"``.
    env_offset:
        Global index of the group's first env (for the events and the messages).
    on_final:
        ``SAME_STEP`` only: called ``on_final(column, observation, info, events)``
        with what an env whose episode ended returned, before it is reset; it
        stores or sends the terminal observation (appending its event to ``events``).
    rewards:
        The float64 ``[num_envs]`` row that receives the rewards.
    terminations, truncations:
        The ``[num_envs]`` rows that receive the end flags, as uint8 views of bool storage.
    autoreset:
        A uint8 ``[num_envs]`` view of the group's bool state, kept across steps: 1 for an
        env whose episode ended at its previous step. The caller clears it on a reset.

    :meth:`step` takes one action per env and the columns to step (increasing).
    In column order it steps each env, except that after an episode's end a
    ``"NextStep"`` env is reset instead (reward 0, no end) and a ``"Disabled"`` one
    fails; a ``"SameStep"`` env whose episode ends is reset within the step. Every
    reset is ``env.reset()`` without a seed, as Gymnasium's autoreset does. It
    returns the ``(env_index, info)`` events of the non-empty infos in env order
    (``None`` if there are none) and sets ``observations``, ``rewards_now``,
    ``terminations_now`` and ``truncations_now`` to one entry per stepped env that
    did not fail, as the envs returned them; ``failures`` lists ``(column, exception)``
    for each env that failed (every env is stepped even after one fails). It
    stores nothing: the caller stores the observations, then :meth:`store_row`
    the rest.
    """

    def __init__(self, envs, autoreset_mode, env_offset, on_final, rewards, terminations, truncations, autoreset):
        arguments.require_list(envs, "envs")
        if autoreset_mode not in ("NextStep", "SameStep", "Disabled"):
            raise ValueError(f"`autoreset_mode` must be 'NextStep', 'SameStep' or 'Disabled'; got {autoreset_mode!r}.")
        for field, row in (("rewards", rewards), ("terminations", terminations), ("truncations", truncations), ("autoreset", autoreset)):
            if getattr(row, "shape", None) != (len(envs),):
                raise ValueError(f"`{field}` must have shape ({len(envs)},); got {getattr(row, 'shape', None)!r}.")
        self.envs = envs
        self.num_envs = len(envs)
        self.next_step = autoreset_mode == "NextStep"
        self.same_step = autoreset_mode == "SameStep"
        self.disabled = autoreset_mode == "Disabled"
        self.env_offset = env_offset
        self.on_final = on_final
        self.rewards = rewards
        self.terminations = terminations
        self.truncations = truncations
        self.autoreset = autoreset
        self.columns = []
        self.observations = []
        self.rewards_now = []
        self.terminations_now = []
        self.truncations_now = []
        self.failures = []

    def step(self, actions, columns):
        """Step the envs of ``columns`` (see the class docstring); return the info events or ``None``."""
        if type(actions) is not list or len(actions) != self.num_envs:
            arguments.check_step_lists(self.num_envs, actions=actions)
        arguments.require_list(columns, "columns")
        for column in columns:
            if type(column) is not int or column < 0 or column >= self.num_envs:
                arguments.index_argument(column, self.num_envs, "column")
        return self._step(actions, columns)

    def _step(self, actions, columns):
        events = []
        observations, rewards, terminations, truncations = [], [], [], []
        self.columns = columns
        self.observations, self.rewards_now = observations, rewards
        self.terminations_now, self.truncations_now = terminations, truncations
        if self.failures:
            self.failures = []
        offset = self.env_offset
        for k in range(len(columns)):
            column = columns[k]
            env = self.envs[column]
            ended_before = self.autoreset[column] != 0
            try:
                if ended_before and self.next_step:
                    observation, info = env.reset()
                    reward, terminated, truncated = 0.0, False, False
                else:
                    if ended_before and self.disabled:
                        raise RuntimeError(
                            f"env {offset + column} ended its episode at the previous step and autoreset_mode is "
                            "DISABLED; call `reset(options={'reset_mask': mask})` for it before `step`."
                        )
                    observation, reward, terminated, truncated, info = env.step(actions[column])
                    if self.same_step and (terminated or truncated):
                        self.on_final(column, observation, info, events)
                        observation, info = env.reset()
            except Exception as error:
                self.failures.append((column, error))
                continue
            observations.append(observation)
            rewards.append(reward)
            terminations.append(terminated)
            truncations.append(truncated)
            if info:
                events.append((offset + column, info))
        return events or None

    def store_row(self):
        """Store the last step's rewards and end flags (a step without failures) into their rows and
        set ``autoreset`` for its columns. Returns ``False``, storing nothing, unless every reward
        is a ``float`` and every flag a ``bool``: the caller then stores them by NumPy's rules."""
        columns = self.columns
        rewards, terminations, truncations = self.rewards_now, self.terminations_now, self.truncations_now
        count = len(columns)
        if len(rewards) != count:
            return False
        for k in range(count):
            if not isinstance(rewards[k], float):
                return False
            if terminations[k] is not True and terminations[k] is not False:
                return False
            if truncations[k] is not True and truncations[k] is not False:
                return False
        for k in range(count):
            column = columns[k]
            ended = 0
            self.rewards[column] = rewards[k]
            if terminations[k] is True:
                ended = 1
            self.terminations[column] = ended
            if truncations[k] is True:
                self.truncations[column] = 1
                ended = 1
            else:
                self.truncations[column] = 0
            self.autoreset[column] = ended
        return True


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
        rollouts: the source's mask of the next row, False for a sub-env whose step
        belongs to no episode. In ``"NextStep"`` mode the recorder sets it after each
        row to the sub-envs that did not end (the vector env spends the next step of
        an ended one on its reset); in the other modes it is left as the caller set it.
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
    its bounds, and no sub-env reporting an end in a row ``counted`` does not
    count (under ``"NextStep"``, at its reset step). A decline writes nothing, except when only the bounds are broken:
    the observations are stored into row ``t + 1`` first and checked there (one
    pass over the values), so that row is written. The caller then takes the
    general path, which converts, warns or raises as the rules say, and writes
    that row again. Otherwise it writes observation row ``t + 1``,
    rewards, flags and ``reset_steps`` row ``t``, the step seconds, and the
    books (a reset step adds neither reward nor length); copies the terminal
    observations of the ended sub-envs into ``final_observations[t]`` unless the
    mode is ``"SameStep"`` (the vector env returns those in its info); and in
    ``"NextStep"`` and ``"SameStep"`` modes records the ended sub-envs' next seeds
    as unknown (-1), since the vector env resets them with seeds of its own
    (``"Disabled"``: the caller resets them and records their seeds). It returns
    how many episodes ended; their columns are at the front of the recorder's
    ``done_columns``. :meth:`book` does the same for a row the caller has stored
    under the general rules.
    """

    def __init__(self, recorder, writers, checked_leaves, reset_steps, counted, step_seconds, autoreset_mode):
        arguments.require_instance(recorder, StepRecorder, "recorder")
        arguments.require_instances(writers, ObservationWriter, "writers")
        arguments.check_vector_row_arguments(
            (recorder.horizon, recorder.num_envs),
            [writer.observations for writer in writers],
            [writer.num_final_rows for writer in writers],
            checked_leaves, reset_steps, counted, step_seconds, autoreset_mode,
        )
        self.recorder = recorder
        self.writers = writers
        self.checked = [kernels.LeafBounds(writers[leaf_index].rows, low, high) for leaf_index, low, high in checked_leaves]
        self.next_step = autoreset_mode == "NextStep"
        self.scatter_finals = autoreset_mode != "SameStep"
        self.seeds_unknown = autoreset_mode != "Disabled"
        self.num_envs = recorder.num_envs
        self.row_books = kernels.VectorRowBooks(recorder.books, reset_steps, counted, step_seconds)

    def record(self, t, rewards, terminations, truncations, leaves, seconds):
        """Store, check and book row ``t``; return how many episodes ended, or -1 (declined; see the class)."""
        step = _index_in(t, self.recorder.horizon, "time step")
        if type(leaves) is not list or len(leaves) != len(self.writers):
            arguments.check_step_lists(len(self.writers), leaves=leaves)
        return self._record(
            step, rewards, terminations, truncations, leaves,
            seconds if type(seconds) is float else arguments.seconds_argument(seconds),
        )

    def _record(self, t, rewards, terminations, truncations, leaves, seconds):
        # Every condition of the fast path but the bounds is checked before anything is written.
        if not self.row_books.reward_kind(rewards, terminations, truncations):
            return -1
        for leaf_index in range(len(self.writers)):
            writer = self.writers[leaf_index]
            if not writer.rows.is_exact_block(leaves[leaf_index]):
                return -1
        for bounds in self.checked:
            if not bounds.typed:
                return -1
        if self.row_books.ended_uncounted(terminations, truncations):
            return -1
        self._require_room(terminations, truncations)
        # The observations go straight into row t + 1 and are checked there (one pass over the
        # values, not a copy to check and another to store). A value outside the bounds declines
        # with that row written; the general path writes it again.
        for leaf_index in range(len(self.writers)):
            writer = self.writers[leaf_index]
            writer.rows.store_block(t + 1, leaves[leaf_index])
        for bounds in self.checked:
            if bounds.row_outside(t + 1):
                return -1
        return self._book(t, rewards, terminations, truncations, seconds)

    def book(self, t, rewards, terminations, truncations, seconds):
        """Book row ``t``, whose observations the caller has stored into row ``t + 1`` under the
        general rules, as :meth:`record` books a row it takes: ``rewards`` a contiguous float64
        ``[num_envs]`` array, the flags contiguous bool ones (the values the caller stored).
        Returns how many episodes ended."""
        step = _index_in(t, self.recorder.horizon, "time step")
        seconds = seconds if type(seconds) is float else arguments.seconds_argument(seconds)
        if self.row_books.reward_kind(rewards, terminations, truncations) != 1:
            arguments.refuse_vector_row(self.num_envs)
        self._require_room(terminations, truncations)
        return self._book(step, rewards, terminations, truncations, seconds)

    def _require_room(self, terminations, truncations):
        """Refuse, writing nothing, a row whose ended episodes the completed-episode buffers cannot hold."""
        if not self.row_books.room_for(terminations, truncations):
            arguments.refuse_full_buffers(self.recorder.books.capacity)
        return 0

    def _book(self, t, rewards, terminations, truncations, seconds):
        """The books of a stored row (checked, with room): autoreset's bookkeeping for a vector env."""
        n_done = self.row_books.book(t, rewards, terminations, truncations, seconds / self.num_envs if self.num_envs else 0.0)
        if self.next_step:
            # The vector env spends an ended sub-env's next step on its reset: that row counts in no episode.
            self.row_books.count_unended(terminations, truncations)
        if self.scatter_finals and n_done:
            # Row t + 1 holds the terminal observations until the vector env's reset overwrites it.
            for writer in self.writers:
                writer.rows.scatter(t, self.recorder.done_columns, n_done)
        if self.seeds_unknown:
            # The vector env resets them (at the next step, or within this one) with seeds of its own.
            self.recorder.books.forget_seeds(n_done)
        return n_done
