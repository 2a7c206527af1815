# cython: freethreading_compatible = False
"""Compiled per-step hot path of Parallel Rollouts.

This module has a pure-Python twin, ``parallel_rollouts.core.twin``, with
the same names, signatures and semantics; the long docstrings live there. The
two are tested against each other. Cython directives are set once, in
``setup.py``.

Observation rows are moved as raw bytes: a row of a fixed-shape leaf is
``prod(shape) * itemsize`` contiguous bytes whatever the dtype, so one
``memcpy`` kernel serves uint8 images, int32/int64 and float32/float64 vectors
and bool masks alike, with no per-element Python.
"""

cimport cython
from libc.float cimport FLT_MIN
from libc.limits cimport LLONG_MAX, LLONG_MIN
from libc.math cimport INFINITY, ceil, floor, nextafterf
from libc.stdint cimport uint64_t
from libc.string cimport memcpy, memset
from cpython.long cimport PyLong_AsLongLongAndOverflow

import numpy as np

# The slow paths are the package's Python modules on this floor and the one below: every
# argument check and refusal (`arguments`, shared with the twin, so that both cores raise
# the same exception with the same message), and the general rules for values the typed
# fast paths do not take (the conversion rule, the checks of what `step`/`reset` returned).
from parallel_rollouts.checks.conversion import convert_row
from parallel_rollouts.checks.env_returns import (
    check_reset_result,
    check_step_result,
    end_flag,
    info_number,
    reward_value,
)
from parallel_rollouts.core import arguments

cimport numpy as cnp

cnp.import_array()

ctypedef cnp.int64_t int64


# A monotonic clock read without a Python call (the one time.perf_counter reads on Linux):
# the seconds each env spends in `step` are measured on every step, so the read must cost
# little next to the step itself.
cdef extern from *:
    """
    #if defined(_WIN32)
    #include <windows.h>
    static double parallel_rollouts_clock(void) {
        LARGE_INTEGER count, frequency;
        QueryPerformanceCounter(&count);
        QueryPerformanceFrequency(&frequency);
        return (double)count.QuadPart / (double)frequency.QuadPart;
    }
    #else
    #include <time.h>
    static double parallel_rollouts_clock(void) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
    }
    #endif
    """
    double parallel_rollouts_clock() nogil


cdef inline Py_ssize_t _index_in(object value, Py_ssize_t stop, str field) except? -1:
    """``value`` as an index in ``[0, stop)``: an ``int`` in range here, anything else decided
    (taken or refused) by ``arguments.index_argument``, as the twin does."""
    cdef int overflow = 0
    cdef long long index
    if type(value) is int:
        index = PyLong_AsLongLongAndOverflow(value, &overflow)
        if not overflow and 0 <= index < stop:
            return <Py_ssize_t>index
    return arguments.index_argument(value, stop, field)


cdef inline Py_ssize_t _count_in(object value, Py_ssize_t stop) except? -1:
    """``value`` as a count in ``[0, stop]`` (see ``_index_in``)."""
    cdef int overflow = 0
    cdef long long count
    if type(value) is int:
        count = PyLong_AsLongLongAndOverflow(value, &overflow)
        if not overflow and 0 <= count <= stop:
            return <Py_ssize_t>count
    return arguments.count_argument(value, stop)


cdef inline object _row_bytes_view(object array):
    """View ``array`` of shape ``[rows, envs, *leaf]`` as ``[rows, envs, nbytes]`` uint8.

    ``check_observation_storage`` has made sure the leaf axes are C-contiguous,
    so the reshape is a view: a copy would silently swallow every write.
    """
    rows = array.shape[0]
    envs = array.shape[1]
    row_elements = 1
    for axis in range(2, array.ndim):
        row_elements *= array.shape[axis]
    if row_elements == 0 or rows == 0 or envs == 0:
        return np.empty((rows, envs, row_elements * array.itemsize), dtype=np.uint8)
    return array.reshape(rows, envs, row_elements).view(np.uint8)


cdef class ObservationWriter:
    """Writes env observations into one leaf of ``[rows, env, ...]`` storage."""

    cdef unsigned char[:, :, :] observation_bytes
    cdef unsigned char[:, :, :] final_bytes
    cdef object observations
    cdef object row_shape
    cdef int64[::1] row_dims
    cdef object dtype
    cdef Py_ssize_t row_nbytes
    cdef Py_ssize_t num_envs
    cdef Py_ssize_t num_final_rows

    def __init__(self, observations, final_observations):
        arguments.check_observation_storage(observations, final_observations)
        self.observations = observations
        self.row_shape = tuple(observations.shape[2:])
        self.row_dims = np.asarray(self.row_shape, dtype=np.int64).reshape(-1)
        self.dtype = observations.dtype
        self.observation_bytes = _row_bytes_view(observations)
        self.final_bytes = _row_bytes_view(final_observations)
        self.row_nbytes = self.observation_bytes.shape[2]
        self.num_envs = observations.shape[1]
        self.num_final_rows = final_observations.shape[0]

    cdef bint _copy_into(self, Py_ssize_t row, Py_ssize_t column, object source) except -1:
        cdef cnp.ndarray array
        if type(source) is np.ndarray and self._is_exact_row(<cnp.ndarray>source):
            array = <cnp.ndarray>source
            if self.row_nbytes:
                memcpy(
                    &self.observation_bytes[row, column, 0],
                    cnp.PyArray_DATA(array),
                    self.row_nbytes,
                )
            return True
        # Slow path: Python scalars, other dtypes, non-contiguous arrays, under the
        # one conversion rule (no value may change but by float rounding).
        converted = convert_row(source, self.row_shape, self.dtype)
        if converted is None:
            return False
        self.observations[row, column] = converted
        return True

    cdef inline bint _same_dtype(self, cnp.ndarray array):
        """The storage's dtype, itemsize included (a type number alone does not fix the size of a
        string, void or datetime dtype; int64 and long long are the same type under two numbers)."""
        cdef cnp.dtype own = <cnp.dtype>self.dtype
        cdef cnp.dtype given = array.descr
        return given is own or (given.itemsize == own.itemsize and cnp.PyArray_EquivTypes(given, own))

    cdef bint _is_exact_row(self, cnp.ndarray array):
        """Same dtype, same shape, C-contiguous: the row can be copied as bytes."""
        cdef int axis
        cdef cnp.npy_intp* dims
        if not self._same_dtype(array):
            return False
        if not cnp.PyArray_ISNOTSWAPPED(array):
            return False
        if cnp.PyArray_NDIM(array) != self.row_dims.shape[0]:
            return False
        dims = cnp.PyArray_DIMS(array)
        for axis in range(self.row_dims.shape[0]):
            if dims[axis] != self.row_dims[axis]:
                return False
        return cnp.PyArray_IS_C_CONTIGUOUS(array)

    cdef bint _is_exact_block(self, object source):
        """An array ``[num_envs, *row shape]`` of the storage's dtype (any strides): stored as it is."""
        cdef cnp.ndarray array
        cdef int axis
        cdef cnp.npy_intp* dims
        if type(source) is not np.ndarray:
            return False
        array = <cnp.ndarray>source
        if not self._same_dtype(array) or not cnp.PyArray_ISNOTSWAPPED(array):
            return False
        if cnp.PyArray_NDIM(array) != self.row_dims.shape[0] + 1:
            return False
        dims = cnp.PyArray_DIMS(array)
        if dims[0] != self.num_envs:
            return False
        for axis in range(self.row_dims.shape[0]):
            if dims[axis + 1] != self.row_dims[axis]:
                return False
        return True

    cdef int _store_block(self, Py_ssize_t row, cnp.ndarray block) except -1:
        """Store an exact block (see ``_is_exact_block``) as ``observations[row]``."""
        cdef const unsigned char* data = <const unsigned char*>cnp.PyArray_DATA(block)
        if self.row_nbytes == 0 or self.num_envs == 0:
            return 0
        if self.observation_bytes.strides[1] != self.row_nbytes:
            self.observations[row] = block  # storage of another layout: NumPy's general copy
        elif cnp.PyArray_IS_C_CONTIGUOUS(block):
            memcpy(&self.observation_bytes[row, 0, 0], data, self.num_envs * self.row_nbytes)
        elif not _gather_rows(block, &self.observation_bytes[row, 0, 0]):
            self.observations[row] = block
        return 0

    def write_rows(self, row, sources):
        cdef Py_ssize_t column, index = _index_in(row, self.observation_bytes.shape[0], "row")
        if type(sources) is not list or len(<list>sources) != self.num_envs:
            arguments.check_step_lists(self.num_envs, sources=sources)
        for column in range(self.num_envs):
            if not self._copy_into(index, column, sources[column]):
                return column
        return -1

    def write_row(self, row, column, source):
        cdef Py_ssize_t index = _index_in(row, self.observation_bytes.shape[0], "row")
        return self._copy_into(index, _index_in(column, self.num_envs, "column"), source)

    def scatter_final(self, t, done_columns, count):
        cdef Py_ssize_t k, column, step = _index_in(t, self.num_final_rows, "time step"), n
        cdef const int64[:] columns
        arguments.check_done_columns(done_columns, 0)
        columns = done_columns
        n = _count_in(count, columns.shape[0])
        for k in range(n):
            column = columns[k]
            if column < 0 or column >= self.num_envs:
                arguments.index_argument(column, self.num_envs, "done column")
        if self.row_nbytes == 0:
            return
        with nogil:
            for k in range(n):
                column = columns[k]
                memcpy(
                    &self.final_bytes[step, column, 0],
                    &self.observation_bytes[step + 1, column, 0],
                    self.row_nbytes,
                )


cdef class StepRecorder:
    """Records one step of rewards and end flags and keeps the episode books."""

    cdef double[:, :] rewards
    cdef unsigned char[:, :] terminations
    cdef unsigned char[:, :] truncations
    cdef int64[:, :] step_episode_seeds
    cdef double[:] running_returns
    cdef int64[:] running_lengths
    cdef int64[:] running_seeds
    cdef double[:] completed_returns
    cdef int64[:] completed_lengths
    cdef int64[:] completed_env_indices
    cdef int64[:] completed_end_steps
    cdef int64[:] completed_seeds
    cdef int64[:] done_columns
    cdef Py_ssize_t env_offset
    cdef Py_ssize_t num_envs
    cdef Py_ssize_t _completed_count
    # Scratch rows for one step's converted inputs, allocated once.
    cdef double[::1] rewards_now
    cdef unsigned char[::1] flags_now

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
        self.env_offset = arguments.env_offset_argument(env_offset)
        self.rewards = rewards
        self.terminations = terminations.view(np.uint8)
        self.truncations = truncations.view(np.uint8)
        self.step_episode_seeds = step_episode_seeds
        self.running_returns = running_returns
        self.running_lengths = running_lengths
        self.running_seeds = running_seeds
        self.completed_returns = completed_returns
        self.completed_lengths = completed_lengths
        self.completed_env_indices = completed_env_indices
        self.completed_end_steps = completed_end_steps
        self.completed_seeds = completed_seeds
        self.done_columns = done_columns
        self.num_envs = self.rewards.shape[1]
        self._completed_count = 0
        self.rewards_now = np.empty(self.num_envs, dtype=np.float64)
        self.flags_now = np.empty(self.num_envs, dtype=np.uint8)

    @property
    def completed_count(self):
        return self._completed_count

    def record_step(self, t, step_rewards, step_terminations, step_truncations):
        cdef Py_ssize_t column, step = _index_in(t, self.rewards.shape[0], "time step")
        if not (
            type(step_rewards) is list and len(<list>step_rewards) == self.num_envs
            and type(step_terminations) is list and len(<list>step_terminations) == self.num_envs
            and type(step_truncations) is list and len(<list>step_truncations) == self.num_envs
        ):
            arguments.check_step_lists(
                self.num_envs,
                step_rewards=step_rewards,
                step_terminations=step_terminations,
                step_truncations=step_truncations,
            )
        # Convert every input before touching the books, so a bad value leaves
        # nothing half-recorded.
        cdef double[::1] rewards_now = self.rewards_now
        cdef unsigned char[::1] flags_now = self.flags_now
        for column in range(self.num_envs):
            rewards_now[column] = float(step_rewards[column])
            flags_now[column] = (
                (1 if step_terminations[column] else 0) | (2 if step_truncations[column] else 0)
            )
        return self._record_scratch(step)

    def record_rows(self, t, counted=None):
        """Record step ``t`` from the rewards and flags already stored in row ``t``.

        For sources that write whole rows themselves (a vector env). ``counted``
        is ``None`` or a bool ``[num_envs]`` array; a column where it is False
        took a step that belongs to no episode (a ``NEXT_STEP`` autoreset step):
        its reward and length are not added. Returns how many episodes ended;
        their columns go to the front of ``done_columns``.
        """
        cdef Py_ssize_t column, n_done = 0, step = _index_in(t, self.rewards.shape[0], "time step")
        cdef const unsigned char[:] counted_view
        cdef bint all_counted = counted is None
        if not all_counted:
            arguments.check_counted(counted, self.num_envs)
            counted_view = counted.view(np.uint8)
        if self._completed_count + self.num_envs > self.completed_returns.shape[0]:
            # Only near the end of the buffers can this step's episodes overflow them.
            for column in range(self.num_envs):
                if self.terminations[step, column] or self.truncations[step, column]:
                    n_done += 1
            self._require_room(n_done)
            n_done = 0
        with nogil:
            for column in range(self.num_envs):
                self.step_episode_seeds[step, column] = self.running_seeds[column]
                if all_counted or counted_view[column]:
                    self.running_returns[column] += self.rewards[step, column]
                    self.running_lengths[column] += 1
                if self.terminations[step, column] or self.truncations[step, column]:
                    self._end_episode(step, column, n_done)
                    n_done += 1
        return n_done

    cdef int _require_room(self, Py_ssize_t n_done) except -1:
        if self._completed_count + n_done > self.completed_returns.shape[0]:
            arguments.refuse_full_buffers(self.completed_returns.shape[0])
        return 0

    cdef inline void _end_episode(self, Py_ssize_t t, Py_ssize_t column, Py_ssize_t n_done) noexcept nogil:
        """Book the episode of ``column`` that ended at step ``t`` as the ``n_done``-th of the step."""
        cdef Py_ssize_t slot = self._completed_count
        self.completed_returns[slot] = self.running_returns[column]
        self.completed_lengths[slot] = self.running_lengths[column]
        self.completed_env_indices[slot] = self.env_offset + column
        self.completed_end_steps[slot] = t
        self.completed_seeds[slot] = self.running_seeds[column]
        self._completed_count = slot + 1
        self.running_returns[column] = 0.0
        self.running_lengths[column] = 0
        self.done_columns[n_done] = column

    cdef Py_ssize_t _record_scratch(self, Py_ssize_t t) except -1:
        """Record step ``t`` from ``rewards_now`` / ``flags_now``; return how many episodes ended."""
        cdef Py_ssize_t column, n_done = 0
        cdef double reward
        cdef bint terminated, truncated
        cdef double[::1] rewards_now = self.rewards_now
        cdef unsigned char[::1] flags_now = self.flags_now
        if self._completed_count + self.num_envs > self.completed_returns.shape[0]:
            for column in range(self.num_envs):
                if flags_now[column]:
                    n_done += 1
            self._require_room(n_done)
            n_done = 0
        with nogil:
            for column in range(self.num_envs):
                reward = rewards_now[column]
                terminated = flags_now[column] & 1
                truncated = (flags_now[column] & 2) != 0
                self.rewards[t, column] = reward
                self.terminations[t, column] = terminated
                self.truncations[t, column] = truncated
                self.step_episode_seeds[t, column] = self.running_seeds[column]
                self.running_returns[column] += reward
                self.running_lengths[column] += 1
                if terminated or truncated:
                    self._end_episode(t, column, n_done)
                    n_done += 1
        return n_done


cdef class EnvStepper:
    """Steps every env of a group once and records the step (the per-env loop, compiled)."""

    cdef list envs
    cdef list writers
    cdef StepRecorder recorder
    cdef object flatten
    cdef tuple info_keys
    cdef list info_storage
    cdef Py_ssize_t num_envs
    cdef public list failures
    cdef public object bad_observation
    cdef double[::1] step_seconds
    cdef bint timed

    def __init__(self, envs, writers, recorder, flatten, info_keys, info_storage, step_seconds=None):
        arguments.require_list(envs, "envs")
        arguments.require_instances(writers, ObservationWriter, "writers")
        arguments.require_instance(recorder, StepRecorder, "recorder")
        arguments.require_tuple(info_keys, "info_keys")
        arguments.require_list(info_storage, "info_storage")
        arguments.check_stepper_arguments(
            envs,
            [((<ObservationWriter>w).observation_bytes.shape[0], (<ObservationWriter>w).num_envs) for w in writers],
            ((<StepRecorder>recorder).rewards.shape[0], (<StepRecorder>recorder).num_envs),
            flatten,
            info_keys,
            info_storage,
            step_seconds,
        )
        self.timed = step_seconds is not None
        if self.timed:
            self.step_seconds = step_seconds
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
        cdef Py_ssize_t step = _index_in(t, self.recorder.rewards.shape[0], "time step")
        if type(actions) is not list or len(<list>actions) != self.num_envs:
            arguments.check_step_lists(self.num_envs, actions=actions)
        return self._step(step, actions)

    cdef Py_ssize_t _step(self, Py_ssize_t t, list actions) except -2:
        """Step row ``t`` (in range) with ``actions`` (one per env, checked by the caller)."""
        cdef Py_ssize_t column, leaf_index, n_keys = len(self.info_keys)
        cdef double reward_number, started
        cdef unsigned char flags
        cdef double[::1] rewards_now = self.recorder.rewards_now
        cdef unsigned char[::1] flags_now = self.recorder.flags_now
        cdef ObservationWriter writer
        cdef object result, observation, reward, terminated, truncated, info, info_value
        if self.failures:
            self.failures = []
        self.bad_observation = None
        for column in range(self.num_envs):
            try:
                if self.timed:
                    started = parallel_rollouts_clock()
                    result = self.envs[column].step(actions[column])
                    self.step_seconds[column] += parallel_rollouts_clock() - started
                else:
                    result = self.envs[column].step(actions[column])
                if type(result) is not tuple or len(<tuple>result) != 5:
                    result = check_step_result(result)
                observation, reward, terminated, truncated, info = <tuple>result
                if type(reward) is float:
                    reward_number = <double>reward
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
            rewards_now[column] = reward_number
            flags_now[column] = flags
            for leaf_index in range(n_keys):
                key = self.info_keys[leaf_index]
                try:
                    info_value = info[key]
                    if type(info_value) is not float:
                        info_value = info_number(info_value, key)
                    (<cnp.ndarray>self.info_storage[leaf_index])[t, column] = info_value
                except (KeyError, TypeError, ValueError) as error:
                    self.failures.append((column, "info", error, key, info))
            if self.bad_observation is not None:
                continue
            if self.flatten is None:
                writer = <ObservationWriter>self.writers[0]
                if not writer._copy_into(t + 1, column, observation):
                    self.bad_observation = (column, 0, observation)
            else:
                self._write_nested(t + 1, column, observation)
        if self.failures or self.bad_observation is not None:
            return -1
        return self.recorder._record_scratch(t)

    cdef _write_nested(self, Py_ssize_t row, Py_ssize_t column, object observation):
        cdef Py_ssize_t leaf_index
        try:
            values = self.flatten(observation)
        except Exception as error:
            self.bad_observation = (column, -1, error)
            return
        for leaf_index in range(len(self.writers)):
            if not (<ObservationWriter>self.writers[leaf_index])._copy_into(row, column, values[leaf_index]):
                self.bad_observation = (column, leaf_index, values[leaf_index])
                return


ctypedef fused numeric:
    unsigned char
    signed char
    short
    unsigned short
    int
    unsigned int
    long long
    unsigned long long
    float
    double


cdef Py_ssize_t _first_row_out_of_bounds(
    const numeric* values, Py_ssize_t rows, Py_ssize_t row_elements, const double* low, const double* high
) noexcept nogil:
    cdef Py_ssize_t row, k
    cdef double value, lo, hi
    cdef bint outside = False
    # First whether any value is outside, one element of the row at a time down the rows: the
    # bounds stay in registers and the loop has no branch (a step's row of 1024 CartPoles is
    # checked 4x faster than row by row). NaN fails both comparisons, so it counts as outside.
    for k in range(row_elements):
        lo = low[k]
        hi = high[k]
        for row in range(rows):
            value = <double>values[row * row_elements + k]
            outside |= (not (value >= lo)) | (not (value <= hi))
    if not outside:
        return -1
    # Rare: which row is the first.
    for row in range(rows):
        for k in range(row_elements):
            value = <double>values[row * row_elements + k]
            if not (value >= low[k] and value <= high[k]):
                return row
    return -1


# Integers of at most this magnitude are exact in float64.
cdef double EXACT_INTEGER_LIMIT = 9007199254740992.0  # 2 ** 53


cdef inline bint _integer_bounds(double low, double high, long long* low_out, long long* high_out) noexcept nogil:
    """The int64 bounds ``[low_out, high_out]`` that decide ``<double>v >= low and <double>v <= high``
    exactly for every int64 ``v``; False when there are none this simple (bounds at or past 2**53,
    NaN), and the float64 comparison is used instead.

    Within ``(-2**53, 2**53)`` a value of smaller magnitude converts exactly, and one of
    larger magnitude lands past the bound on the same side as the integer itself."""
    if low == -INFINITY:
        low_out[0] = LLONG_MIN
    elif -EXACT_INTEGER_LIMIT < low < EXACT_INTEGER_LIMIT:
        low_out[0] = <long long>ceil(low)
    else:
        return False
    if high == INFINITY:
        high_out[0] = LLONG_MAX
    elif -EXACT_INTEGER_LIMIT < high < EXACT_INTEGER_LIMIT:
        high_out[0] = <long long>floor(high)
    else:
        return False
    return True


cdef Py_ssize_t _first_int64_row_out_of_bounds(
    const long long* values, Py_ssize_t rows, Py_ssize_t row_elements, const double* low, const double* high
) noexcept nogil:
    """``_first_row_out_of_bounds`` for int64 values (integer actions), compared as integers:
    the conversion of each value to float64 costs more than the comparisons."""
    cdef Py_ssize_t row, k
    cdef long long lo, hi
    cdef unsigned long long width, any_bits, offset
    cdef bint outside = False
    for k in range(row_elements):
        if not _integer_bounds(low[k], high[k], &lo, &hi):
            return _first_row_out_of_bounds[cython.longlong](values, rows, row_elements, low, high)
        if hi < lo:
            return 0  # no value is inside; rows > 0
        width = <unsigned long long>hi - <unsigned long long>lo
        if width >> 63:
            # Bounds more than 2**63 apart: one unsigned comparison a value (below lo wraps past the width).
            for row in range(rows):
                outside |= (<unsigned long long>values[row * row_elements + k] - <unsigned long long>lo) > width
            continue
        # The offset x = v - lo is outside when x > width: then x or width - x has its top bit
        # set (a value below lo wraps to x >= 2**63), and neither has when x <= width. So the
        # top bit of the OR of them all decides, with no comparison per value: a loop the
        # compiler vectorizes with the baseline instruction set, which has no 64-bit compare.
        any_bits = 0
        if row_elements == 1:
            # The same loop over contiguous values (a Discrete action a row), which it vectorizes;
            # the strided one below it does not.
            for row in range(rows):
                offset = <unsigned long long>values[row] - <unsigned long long>lo
                any_bits |= offset | (width - offset)
        else:
            for row in range(rows):
                offset = <unsigned long long>values[row * row_elements + k] - <unsigned long long>lo
                any_bits |= offset | (width - offset)
        outside |= (any_bits >> 63) != 0
    if not outside:
        return -1
    return _first_row_out_of_bounds[cython.longlong](values, rows, row_elements, low, high)


cdef inline bint _is_flat_float64(object bounds):
    return (
        type(bounds) is np.ndarray
        and cnp.PyArray_TYPE(<cnp.ndarray>bounds) == cnp.NPY_FLOAT64
        and cnp.PyArray_NDIM(<cnp.ndarray>bounds) == 1
        and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>bounds)
    )


# The one dtype dispatch of the bounds kernels: a dtype maps to one kernel (by kind and size,
# so that int64 and long long are one), and each kernel is one specialization of the fused
# `_first_row_out_of_bounds` (int64 has its integer-compare variant).
cdef enum BoundsKernel:
    NO_KERNEL = -1
    UINT8_KERNEL, INT8_KERNEL, UINT16_KERNEL, INT16_KERNEL, UINT32_KERNEL, INT32_KERNEL
    UINT64_KERNEL, INT64_KERNEL, FLOAT32_KERNEL, FLOAT64_KERNEL


cdef inline int _kernel_of(int type_number, Py_ssize_t itemsize) noexcept nogil:
    """The bounds kernel for values of this NumPy type number and item size (bool as uint8)."""
    if type_number == cnp.NPY_BOOL or type_number == cnp.NPY_UBYTE:
        return UINT8_KERNEL
    if type_number == cnp.NPY_BYTE:
        return INT8_KERNEL
    if type_number == cnp.NPY_USHORT:
        return UINT16_KERNEL
    if type_number == cnp.NPY_SHORT:
        return INT16_KERNEL
    if type_number == cnp.NPY_FLOAT:
        return FLOAT32_KERNEL
    if type_number == cnp.NPY_DOUBLE:
        return FLOAT64_KERNEL
    if type_number == cnp.NPY_INT or type_number == cnp.NPY_LONG or type_number == cnp.NPY_LONGLONG:
        return INT32_KERNEL if itemsize == 4 else INT64_KERNEL if itemsize == 8 else NO_KERNEL
    if type_number == cnp.NPY_UINT or type_number == cnp.NPY_ULONG or type_number == cnp.NPY_ULONGLONG:
        return UINT32_KERNEL if itemsize == 4 else UINT64_KERNEL if itemsize == 8 else NO_KERNEL
    return NO_KERNEL


cdef Py_ssize_t _first_outside(
    int kernel, const void* data, Py_ssize_t rows, Py_ssize_t k, const double* lo, const double* hi
) noexcept nogil:
    """``rows`` contiguous rows of ``k`` elements at ``data``: the first with an element outside
    ``[lo, hi]`` (NaN included), or -1; -2 for ``NO_KERNEL``."""
    if kernel == UINT8_KERNEL:
        return _first_row_out_of_bounds[cython.uchar](<const unsigned char*>data, rows, k, lo, hi)
    if kernel == INT8_KERNEL:
        return _first_row_out_of_bounds[cython.schar](<const signed char*>data, rows, k, lo, hi)
    if kernel == UINT16_KERNEL:
        return _first_row_out_of_bounds[cython.ushort](<const unsigned short*>data, rows, k, lo, hi)
    if kernel == INT16_KERNEL:
        return _first_row_out_of_bounds[cython.short](<const short*>data, rows, k, lo, hi)
    if kernel == UINT32_KERNEL:
        return _first_row_out_of_bounds[cython.uint](<const unsigned int*>data, rows, k, lo, hi)
    if kernel == INT32_KERNEL:
        return _first_row_out_of_bounds[cython.int](<const int*>data, rows, k, lo, hi)
    if kernel == UINT64_KERNEL:
        return _first_row_out_of_bounds[cython.ulonglong](<const unsigned long long*>data, rows, k, lo, hi)
    if kernel == INT64_KERNEL:
        return _first_int64_row_out_of_bounds(<const long long*>data, rows, k, lo, hi)
    if kernel == FLOAT32_KERNEL:
        return _first_row_out_of_bounds[cython.float](<const float*>data, rows, k, lo, hi)
    if kernel == FLOAT64_KERNEL:
        return _first_row_out_of_bounds[cython.double](<const double*>data, rows, k, lo, hi)
    return -2


def find_out_of_bounds(values, low, high):
    cdef Py_ssize_t rows, row_elements, axis
    cdef cnp.ndarray fast
    # The per-step path: a C-contiguous native array and flat float64 bounds (as the
    # space layout keeps them) go straight to the kernel, with no conversions.
    if (
        type(values) is np.ndarray
        and cnp.PyArray_NDIM(<cnp.ndarray>values) >= 1
        and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>values)
        and cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>values)
        and _is_flat_float64(low)
        and _is_flat_float64(high)
    ):
        fast = <cnp.ndarray>values
        rows = cnp.PyArray_DIMS(fast)[0]
        row_elements = 1
        for axis in range(1, cnp.PyArray_NDIM(fast)):
            row_elements *= cnp.PyArray_DIMS(fast)[axis]
        if (
            cnp.PyArray_DIMS(<cnp.ndarray>low)[0] == row_elements
            and cnp.PyArray_DIMS(<cnp.ndarray>high)[0] == row_elements
            and rows > 0
            and row_elements > 0
            and _kernel_of(cnp.PyArray_TYPE(fast), cnp.PyArray_ITEMSIZE(fast)) != NO_KERNEL
        ):
            return _dispatch_out_of_bounds(fast, rows, row_elements, low, high)
    # Everything else: checked by the rule both cores share, then made a kernel's operand.
    array, low_flat, high_flat = arguments.bounds_operands(values, low, high)
    rows, row_elements = array.shape
    if row_elements == 0 or rows == 0:
        return -1
    if array.dtype == np.bool_:
        array = array.view(np.uint8)
    elif array.dtype.kind == "f" and array.dtype.itemsize not in (4, 8):
        # float16 / longdouble: no kernel of their own; float64 holds every value
        # the comparison needs, as the twin compares in float64 too.
        array = array.astype(np.float64)
    elif not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    return _dispatch_out_of_bounds(np.ascontiguousarray(array), rows, row_elements, low_flat, high_flat)


cdef Py_ssize_t _dispatch_out_of_bounds(
    cnp.ndarray flat, Py_ssize_t rows, Py_ssize_t k, cnp.ndarray low, cnp.ndarray high
) except -2:
    """``flat``: C-contiguous, ``rows * k`` elements; ``low``/``high``: C-contiguous float64, ``k`` each.

    Raw pointers rather than typed memoryviews: acquiring three buffers costs more
    than checking one step's row.
    """
    cdef Py_ssize_t first = _first_outside(
        _kernel_of(cnp.PyArray_TYPE(flat), cnp.PyArray_ITEMSIZE(flat)), cnp.PyArray_DATA(flat), rows, k,
        <const double*>cnp.PyArray_DATA(low), <const double*>cnp.PyArray_DATA(high),
    )
    if first != -2:
        return first
    raise TypeError(f"unsupported dtype {flat.dtype} for a bounds check.")


cdef class RowStepper:
    """A group's whole step of one row, end of episode included (see the twin's docstring).

    One call per row: split the actions, step every env, and for the envs whose
    episode ended scatter the terminal observation, reset with the next episode
    seed read from the seed table, write the reset observation; then check the
    new rows' values. Python runs only inside the envs and on the rare paths the
    ``hooks`` object handles (errors, warnings, the general conversion rule).
    """

    cdef EnvStepper stepper
    cdef StepRecorder recorder
    cdef object action_leaf
    cdef bint action_rows_are_arrays
    cdef object split_nested
    cdef object seed_table
    cdef bint reseed
    cdef const int64[:, ::1] seeds
    cdef int64[::1] blocks
    cdef int64[::1] episodes_started
    cdef int64[:] running_seeds
    cdef list checked
    cdef object hooks
    cdef Py_ssize_t num_envs
    cdef double[::1] reset_seconds
    cdef bint timed

    def __init__(self, stepper, action_leaves, split_nested, seed_table, running_seeds, checked_leaves, hooks, reset_seconds=None):
        cdef ObservationWriter writer
        cdef EnvStepper env_stepper = arguments.require_instance(stepper, EnvStepper, "stepper")
        arguments.check_row_stepper_arguments(
            (env_stepper.recorder.rewards.shape[0], env_stepper.recorder.num_envs), action_leaves, split_nested,
            seed_table, running_seeds, checked_leaves,
            [(<ObservationWriter>w).observations for w in env_stepper.writers], hooks, reset_seconds,
        )
        self.timed = reset_seconds is not None
        if self.timed:
            self.reset_seconds = reset_seconds
        self.stepper = env_stepper
        self.recorder = env_stepper.recorder
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
        self.checked = []
        for leaf_index, low, high in checked_leaves:
            writer = <ObservationWriter>env_stepper.writers[leaf_index]
            self.checked.append(_LeafBounds(writer, low, high))
        self.hooks = hooks
        self.num_envs = env_stepper.num_envs

    cdef list _split(self, Py_ssize_t t):
        cdef object actions
        if self.split_nested is not None:
            actions = self.split_nested(t)
            if type(actions) is not list or len(<list>actions) != self.num_envs:
                arguments.check_step_lists(self.num_envs, actions=actions)
            return actions
        row = self.action_leaf[t]
        if self.action_rows_are_arrays:
            # A copy per step: an env may keep or change its action without touching the batch.
            row = row.copy()
        return list(row)

    def step(self, t):
        return self._step_row(_index_in(t, self.recorder.rewards.shape[0], "time step"))

    cdef Py_ssize_t _step_row(self, Py_ssize_t t) except -1:
        cdef Py_ssize_t n_done
        cdef _LeafBounds bounds
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

    cdef int _end_episodes(self, Py_ssize_t t, Py_ssize_t n_done) except -1:
        cdef Py_ssize_t k, column, episode, block, offset
        cdef int64 seed
        cdef double started
        cdef ObservationWriter writer
        cdef _LeafBounds bounds
        cdef const int64[:] done_columns = self.recorder.done_columns
        cdef list failures = None
        for writer in self.stepper.writers:
            if writer.row_nbytes:
                for k in range(n_done):
                    column = done_columns[k]
                    memcpy(&writer.final_bytes[t, column, 0], &writer.observation_bytes[t + 1, column, 0], writer.row_nbytes)
        for bounds in self.checked:
            if bounds.finals_outside(t, done_columns, n_done):
                self.hooks.finals_outside(t, n_done)
                break
        for k in range(n_done):
            column = done_columns[k]
            seed = -1  # no seed table: the env continues its own generator, the seed is unknown
            episode = 0
            if self.reseed:
                episode = self.episodes_started[column]
                block = episode // self.seeds.shape[1]
                offset = episode - block * self.seeds.shape[1]
                if self.blocks[column] != block:
                    self.seed_table.fill(column, block)
                seed = self.seeds[column, offset]
            try:
                result = self._reset(column, seed)
                if type(result) is not tuple or len(<tuple>result) != 2:
                    result = check_reset_result(result)
                observation = (<tuple>result)[0]
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

    cdef object _reset(self, Py_ssize_t column, int64 seed):
        """Reset env ``column`` (with ``seed`` when the group reseeds every episode), timed."""
        cdef double started = 0.0
        env = self.stepper.envs[column]
        if self.timed:
            started = parallel_rollouts_clock()
        result = env.reset(seed=seed) if self.reseed else env.reset()
        if self.timed:
            self.reset_seconds[column] += parallel_rollouts_clock() - started
        return result

    cdef bint _write_reset(self, Py_ssize_t row, Py_ssize_t column, object observation) except -1:
        cdef Py_ssize_t leaf_index
        cdef list writers = self.stepper.writers
        if self.stepper.flatten is None:
            return (<ObservationWriter>writers[0])._copy_into(row, column, observation)
        try:
            values = self.stepper.flatten(observation)
        except Exception:
            return False
        if len(values) != len(writers):
            return False
        for leaf_index in range(len(writers)):
            if not (<ObservationWriter>writers[leaf_index])._copy_into(row, column, values[leaf_index]):
                return False
        return True


# Float leaves are checked against their bounds repeated into a tile of at least this many
# values: the loop over a block of rows then reads values and bounds side by side, which
# the compiler turns into vector compares (the per-element loop over float64 bounds it
# cannot vectorize with the baseline x86-64 instruction set).
cdef enum:
    BOUNDS_TILE = 64


cdef class _LeafBounds:
    """The bounds of one observation leaf and the typed check of its rows in place."""

    cdef ObservationWriter writer
    cdef const double[::1] low
    cdef const double[::1] high
    cdef int type_number
    cdef int kernel
    cdef Py_ssize_t itemsize
    cdef Py_ssize_t elements
    # Float leaves (no NaN bound): the bounds repeated over `tile` values (0: no tile). For
    # float32 leaves they are rounded outwards to float32, which decides every float32 value
    # exactly as the float64 bounds do, and lets the compare stay in float32.
    cdef Py_ssize_t tile
    cdef float[::1] low32
    cdef float[::1] high32
    cdef double[::1] low64
    cdef double[::1] high64

    def __init__(self, ObservationWriter writer not None, low, high):
        cdef Py_ssize_t j
        self.writer = writer
        self.low = low
        self.high = high
        self.type_number = (<cnp.dtype>writer.dtype).type_num
        self.itemsize = (<cnp.dtype>writer.dtype).itemsize
        self.elements = low.shape[0]
        self.kernel = _kernel_of(self.type_number, self.itemsize)
        if self.kernel == NO_KERNEL:
            # float16 and the like: no typed kernel; the caller checks such leaves the slow way.
            self.type_number = -1
        self.tile = 0
        if self.elements and self.type_number in (cnp.NPY_FLOAT, cnp.NPY_DOUBLE) and not (np.isnan(low).any() or np.isnan(high).any()):
            self.tile = max(1, BOUNDS_TILE // self.elements) * self.elements
            if self.type_number == cnp.NPY_FLOAT:
                self.low32 = np.empty(self.tile, dtype=np.float32)
                self.high32 = np.empty(self.tile, dtype=np.float32)
                for j in range(self.tile):
                    self.low32[j] = _float32_at_or_above(self.low[j % self.elements])
                    self.high32[j] = _float32_at_or_below(self.high[j % self.elements])
                if _has_subnormal(self.low) or _has_subnormal(self.high):
                    # A process with denormals-are-zero set (torch.set_flush_denormal) compares
                    # a subnormal float32 bound as zero; the float64 compares keep it exact.
                    self.tile = 0
            else:
                self.low64 = np.empty(self.tile, dtype=np.float64)
                self.high64 = np.empty(self.tile, dtype=np.float64)
                for j in range(self.tile):
                    self.low64[j] = self.low[j % self.elements]
                    self.high64[j] = self.high[j % self.elements]

    cdef bint _values_outside(self, const unsigned char* data, Py_ssize_t rows) noexcept nogil:
        """``rows`` contiguous rows at ``data``: is any value outside (NaN included)?"""
        if self.tile:
            if self.type_number == cnp.NPY_FLOAT:
                return _tiled_outside[float](<const float*>data, rows * self.elements, self.tile, &self.low32[0], &self.high32[0])
            return _tiled_outside[double](<const double*>data, rows * self.elements, self.tile, &self.low64[0], &self.high64[0])
        return _first_outside(self.kernel, data, rows, self.elements, &self.low[0], &self.high[0]) >= 0

    cdef bint row_outside(self, Py_ssize_t row) except -1:
        """Whether any env's values in observations row ``row`` lie outside the bounds."""
        cdef Py_ssize_t column
        if self.elements == 0:
            return False
        if self.type_number < 0:
            return find_out_of_bounds(self.writer.observations[row], np.asarray(self.low), np.asarray(self.high)) >= 0
        if self.writer.num_envs == 0:
            return False
        if self.writer.observation_bytes.strides[1] == self.writer.row_nbytes:
            # The envs' rows lie end to end: one pass over them all.
            return self._values_outside(&self.writer.observation_bytes[row, 0, 0], self.writer.num_envs)
        for column in range(self.writer.num_envs):
            if self._values_outside(&self.writer.observation_bytes[row, column, 0], 1):
                return True
        return False

    cdef bint finals_outside(self, Py_ssize_t t, const int64[:] columns, Py_ssize_t count) except -1:
        """Whether any terminal observation ``final_observations[t, columns[:count]]`` lies outside."""
        cdef Py_ssize_t k
        if self.elements == 0:
            return False
        if self.type_number < 0:
            # Until the resets overwrite it, row t + 1 holds what was just copied into the finals.
            return find_out_of_bounds(
                self.writer.observations[t + 1][np.asarray(columns[:count])], np.asarray(self.low), np.asarray(self.high)
            ) >= 0
        for k in range(count):
            if self._values_outside(&self.writer.final_bytes[t, columns[k], 0], 1):
                return True
        return False


cdef bint _has_subnormal(const double[::1] bounds) noexcept:
    """Whether a bound is nonzero and smaller in size than the least normal float32 (checked in float64)."""
    cdef Py_ssize_t j
    for j in range(bounds.shape[0]):
        if bounds[j] != 0 and -<double>FLT_MIN < bounds[j] < <double>FLT_MIN:
            return True
    return False


cdef inline float _float32_at_or_above(double bound) noexcept:
    """The least float32 not below ``bound``: a float32 value is >= it exactly when it is >= ``bound``."""
    cdef float rounded = <float>bound
    if <double>rounded < bound:
        rounded = nextafterf(rounded, INFINITY)
    return rounded


cdef inline float _float32_at_or_below(double bound) noexcept:
    """The greatest float32 not above ``bound``: a float32 value is <= it exactly when it is <= ``bound``."""
    cdef float rounded = <float>bound
    if <double>rounded > bound:
        rounded = nextafterf(rounded, -INFINITY)
    return rounded


ctypedef fused float_value:
    float
    double


cdef bint _tiled_outside(const float_value* values, Py_ssize_t total, Py_ssize_t tile, const float_value* low, const float_value* high) noexcept nogil:
    """Is any of ``total`` values outside its bounds (``low``/``high`` repeated every ``tile`` values), or NaN?

    No branch in the loop over a tile, so that it compiles to vector compares.
    """
    cdef Py_ssize_t start = 0, j
    cdef float_value value
    cdef int outside = 0
    while start + tile <= total:
        for j in range(tile):
            value = values[start + j]
            outside |= (value < low[j]) | (value > high[j]) | (value != value)
        start += tile
    for j in range(total - start):
        value = values[start + j]
        outside |= (value < low[j]) | (value > high[j]) | (value != value)
    return outside != 0


cdef inline bint _is_vector(object values, Py_ssize_t length, int type_number):
    """A C-contiguous native 1-D array of ``length`` entries of dtype ``type_number``."""
    return (
        type(values) is np.ndarray
        and cnp.PyArray_NDIM(<cnp.ndarray>values) == 1
        and cnp.PyArray_DIMS(<cnp.ndarray>values)[0] == length
        and cnp.PyArray_TYPE(<cnp.ndarray>values) == type_number
        and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>values)
        and cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>values)
    )


cdef class VectorRowRecorder:
    """One row a vector env returned, stored, checked and booked in one call (see the twin's docstring)."""

    cdef StepRecorder recorder
    cdef list writers
    cdef list checked
    cdef unsigned char[:, :] reset_steps
    cdef unsigned char[::1] counted
    cdef double[:] step_seconds
    cdef bint timed
    cdef bint next_step
    cdef bint scatter_finals
    cdef Py_ssize_t num_envs
    # Whether every row and book the books pass writes is contiguous (see _book_contiguous).
    cdef bint unit_strides

    def __init__(self, recorder, writers, checked_leaves, reset_steps, counted, step_seconds, autoreset_mode):
        cdef StepRecorder step_recorder = arguments.require_instance(recorder, StepRecorder, "recorder")
        arguments.require_instances(writers, ObservationWriter, "writers")
        arguments.check_vector_row_arguments(
            (step_recorder.rewards.shape[0], step_recorder.num_envs),
            [(<ObservationWriter>w).observations for w in writers],
            [(<ObservationWriter>w).num_final_rows for w in writers],
            checked_leaves, reset_steps, counted, step_seconds, autoreset_mode,
        )
        self.recorder = step_recorder
        self.writers = writers
        self.checked = [_LeafBounds(<ObservationWriter>writers[leaf_index], low, high) for leaf_index, low, high in checked_leaves]
        self.reset_steps = reset_steps.view(np.uint8)
        self.counted = counted.view(np.uint8)
        self.timed = step_seconds is not None
        if self.timed:
            self.step_seconds = step_seconds
        self.next_step = autoreset_mode == "NextStep"
        self.scatter_finals = autoreset_mode != "SameStep"
        self.num_envs = step_recorder.num_envs
        self.unit_strides = self.num_envs > 0 and (
            step_recorder.rewards.strides[1] == sizeof(double)
            and step_recorder.terminations.strides[1] == 1
            and step_recorder.truncations.strides[1] == 1
            and step_recorder.step_episode_seeds.strides[1] == sizeof(int64)
            and step_recorder.running_returns.strides[0] == sizeof(double)
            and step_recorder.running_lengths.strides[0] == sizeof(int64)
            and step_recorder.running_seeds.strides[0] == sizeof(int64)
            and self.reset_steps.strides[1] == 1
            and (not self.timed or self.step_seconds.strides[0] == sizeof(double))
        )

    def record(self, t, rewards, terminations, truncations, leaves, seconds):
        cdef StepRecorder rec = self.recorder
        cdef Py_ssize_t step = _index_in(t, rec.rewards.shape[0], "time step")
        if type(leaves) is not list or len(<list>leaves) != len(self.writers):
            arguments.check_step_lists(len(self.writers), leaves=leaves)
        return self._record(step, rewards, terminations, truncations, leaves,
                            seconds if type(seconds) is float else arguments.seconds_argument(seconds))

    cdef Py_ssize_t _record(self, Py_ssize_t t, rewards, terminations, truncations, list leaves, double seconds) except -2:
        cdef StepRecorder rec = self.recorder
        cdef Py_ssize_t n = self.num_envs, column, k, n_done = 0, leaf_index, n_leaves = len(self.writers)
        cdef const double* reward64 = NULL
        cdef const float* reward32 = NULL
        cdef const unsigned char* terminated
        cdef const unsigned char* truncated
        cdef double reward, share
        cdef bint ended, counted_now
        cdef ObservationWriter writer
        cdef _LeafBounds bounds
        # Every condition of the fast path but the bounds is checked before anything is written.
        if not _is_vector(terminations, n, cnp.NPY_BOOL) or not _is_vector(truncations, n, cnp.NPY_BOOL):
            return -1
        if _is_vector(rewards, n, cnp.NPY_DOUBLE):
            reward64 = <const double*>cnp.PyArray_DATA(<cnp.ndarray>rewards)
        elif _is_vector(rewards, n, cnp.NPY_FLOAT):
            reward32 = <const float*>cnp.PyArray_DATA(<cnp.ndarray>rewards)
        else:
            return -1
        for leaf_index in range(n_leaves):
            if not (<ObservationWriter>self.writers[leaf_index])._is_exact_block(leaves[leaf_index]):
                return -1
        for bounds in self.checked:
            if bounds.type_number < 0:
                return -1
        terminated = <const unsigned char*>cnp.PyArray_DATA(<cnp.ndarray>terminations)
        truncated = <const unsigned char*>cnp.PyArray_DATA(<cnp.ndarray>truncations)
        if self.next_step and n and _ended_uncounted(terminated, truncated, &self.counted[0], n):
            return -1
        if rec._completed_count + n > rec.completed_returns.shape[0]:
            for column in range(n):
                if terminated[column] or truncated[column]:
                    n_done += 1
            rec._require_room(n_done)
            n_done = 0
        # The observations go straight into row t + 1 and are checked there (one pass over the
        # values, not a copy to check and another to store). A value outside the bounds declines
        # with that row written; the general path writes it again.
        for leaf_index in range(n_leaves):
            (<ObservationWriter>self.writers[leaf_index])._store_block(t + 1, <cnp.ndarray>leaves[leaf_index])
        for bounds in self.checked:
            if bounds.row_outside(t + 1):
                return -1
        share = seconds / n if n else 0.0
        if self.unit_strides:
            return self._book_contiguous(t, reward64, reward32, terminated, truncated, share)
        # Row t of each field as a local view: the loop then keeps its pointers in registers.
        cdef double[:] rewards_row = rec.rewards[t]
        cdef unsigned char[:] terminations_row = rec.terminations[t]
        cdef unsigned char[:] truncations_row = rec.truncations[t]
        cdef int64[:] seeds_row = rec.step_episode_seeds[t]
        cdef unsigned char[:] reset_row = self.reset_steps[t]
        cdef double[:] running_returns = rec.running_returns
        cdef int64[:] running_lengths = rec.running_lengths
        cdef int64[:] running_seeds = rec.running_seeds
        cdef unsigned char[::1] counted = self.counted
        cdef bint next_step = self.next_step
        with nogil:
            for column in range(n):
                reward = reward64[column] if reward64 != NULL else <double>reward32[column]
                ended = terminated[column] != 0 or truncated[column] != 0
                rewards_row[column] = reward
                terminations_row[column] = terminated[column] != 0
                truncations_row[column] = truncated[column] != 0
                seeds_row[column] = running_seeds[column]
                if next_step:
                    # A column that ended at the step before spent this one on its reset.
                    counted_now = counted[column] != 0
                    reset_row[column] = not counted_now
                    counted[column] = not ended
                else:
                    counted_now = True
                    reset_row[column] = 0
                if counted_now:
                    running_returns[column] += reward
                    running_lengths[column] += 1
                if ended:
                    rec._end_episode(t, column, n_done)
                    n_done += 1
            if self.timed:
                for column in range(n):
                    self.step_seconds[column] += share
        return self._after_books(t, n_done)

    cdef Py_ssize_t _book_contiguous(
        self, Py_ssize_t t, const double* reward64, const float* reward32, const unsigned char* terminated,
        const unsigned char* truncated, double share,
    ) except -1:
        """The books of row ``t`` when every row and book is contiguous (the storage's own
        layout): one simple pass per field, each of which compiles to vector code, and a pass
        over the ended columns only when there are any."""
        cdef StepRecorder rec = self.recorder
        cdef Py_ssize_t n = self.num_envs, column, n_done = 0
        cdef double* rewards_row = &rec.rewards[t, 0]
        cdef double* running_returns = &rec.running_returns[0]
        cdef int64* running_lengths = &rec.running_lengths[0]
        cdef unsigned char* counted = &self.counted[0]
        cdef unsigned char* reset_row = &self.reset_steps[t, 0]
        cdef unsigned char* terminations_row = &rec.terminations[t, 0]
        cdef unsigned char* truncations_row = &rec.truncations[t, 0]
        cdef double* step_seconds
        cdef int any_ended = 0
        cdef double old_value, new_value
        cdef uint64_t old_bits, new_bits, keep_new
        with nogil:
            if reward64 != NULL:
                memcpy(rewards_row, reward64, n * sizeof(double))
            else:
                for column in range(n):
                    rewards_row[column] = <double>reward32[column]
            for column in range(n):
                terminations_row[column] = terminated[column] != 0
                truncations_row[column] = truncated[column] != 0
                any_ended |= terminated[column] | truncated[column]
            memcpy(&rec.step_episode_seeds[t, 0], &rec.running_seeds[0], n * sizeof(int64))
            if self.next_step:
                # A column that ended at the step before spent this one on its reset: it is
                # marked, and its reward counts in no episode.
                for column in range(n):
                    reset_row[column] = counted[column] == 0
                # A select of bits rather than a branch, so that the loop compiles to vector
                # code; an uncounted column keeps its value bit for bit.
                for column in range(n):
                    old_value = running_returns[column]
                    new_value = old_value + rewards_row[column]
                    memcpy(&old_bits, &old_value, 8)
                    memcpy(&new_bits, &new_value, 8)
                    keep_new = 0 - <uint64_t>(counted[column] != 0)
                    new_bits = (new_bits & keep_new) | (old_bits & ~keep_new)
                    memcpy(&running_returns[column], &new_bits, 8)
                    running_lengths[column] += counted[column] != 0
                for column in range(n):
                    counted[column] = (terminated[column] | truncated[column]) == 0
            else:
                memset(reset_row, 0, n)
                for column in range(n):
                    running_returns[column] += rewards_row[column]
                    running_lengths[column] += 1
            if any_ended:
                n_done = _book_ended(rec, t, terminated, truncated, n)
            if self.timed:
                step_seconds = &self.step_seconds[0]
                for column in range(n):
                    step_seconds[column] += share
        return self._after_books(t, n_done)

    cdef Py_ssize_t _after_books(self, Py_ssize_t t, Py_ssize_t n_done) except -1:
        """Scatter the terminal rows of the ``n_done`` ended columns and forget their seeds."""
        cdef StepRecorder rec = self.recorder
        cdef Py_ssize_t leaf_index, k, column
        cdef ObservationWriter writer
        if self.scatter_finals and n_done:
            # Row t + 1 holds the terminal observations until a reset overwrites it.
            for leaf_index in range(len(self.writers)):
                writer = <ObservationWriter>self.writers[leaf_index]
                if writer.row_nbytes:
                    for k in range(n_done):
                        column = rec.done_columns[k]
                        memcpy(&writer.final_bytes[t, column, 0], &writer.observation_bytes[t + 1, column, 0], writer.row_nbytes)
        if self.next_step:
            # The vector env resets them at the next step with seeds of its own choosing.
            for k in range(n_done):
                rec.running_seeds[rec.done_columns[k]] = -1
        return n_done


cdef bint _ended_uncounted(
    const unsigned char* terminated, const unsigned char* truncated, const unsigned char* counted, Py_ssize_t n
) noexcept nogil:
    """Whether a column ended that did not count this step (NEXT_STEP: it ended twice in a row).

    A branch-free reduction, which compiles to vector code: the common answer is no."""
    cdef Py_ssize_t column
    cdef unsigned char found = 0
    for column in range(n):
        found |= ((terminated[column] | truncated[column]) != 0) & (counted[column] == 0)
    return found != 0


cdef Py_ssize_t _book_ended(
    StepRecorder rec, Py_ssize_t t, const unsigned char* terminated, const unsigned char* truncated, Py_ssize_t n
) noexcept nogil:
    """Book the episodes that ended at step ``t``, in column order; return how many.

    The flags are read eight at a time, and only a word holding an end is looked
    into: ends are rare, so most words are passed with one test."""
    cdef Py_ssize_t word, column, start, stop, n_done = 0
    cdef uint64_t ended_bits, truncated_bits
    for word in range((n + 7) // 8):
        start = word * 8
        if start + 8 <= n:
            memcpy(&ended_bits, terminated + start, 8)
            memcpy(&truncated_bits, truncated + start, 8)
            if (ended_bits | truncated_bits) == 0:
                continue
            stop = start + 8
        else:
            stop = n
        for column in range(start, stop):
            if terminated[column] or truncated[column]:
                rec._end_episode(t, column, n_done)
                n_done += 1
    return n_done


cdef bint _gather_rows(cnp.ndarray block, unsigned char* dest) except -1:
    """Copy ``block`` ``[rows, *leaf]`` into the C-contiguous ``dest``; False (nothing copied) when
    its leaf axes do not collapse into one strided axis (the caller then lets NumPy copy it)."""
    cdef int ndim = cnp.PyArray_NDIM(block), axis
    cdef cnp.npy_intp* dims = cnp.PyArray_DIMS(block)
    cdef cnp.npy_intp* strides = cnp.PyArray_STRIDES(block)
    cdef Py_ssize_t itemsize = cnp.PyArray_ITEMSIZE(block)
    cdef Py_ssize_t rows = dims[0], elements = 1, row_stride = strides[0], element_stride = itemsize
    cdef Py_ssize_t row, k, expected
    cdef const unsigned char* source = <const unsigned char*>cnp.PyArray_DATA(block)
    cdef const unsigned char* at
    cdef unsigned char* to
    # The leaf axes collapse when each (of more than one element) steps over the ones after it.
    expected = -1
    for axis in range(ndim - 1, 0, -1):
        if dims[axis] == 1:
            continue
        if expected == -1:
            element_stride = strides[axis]
        elif strides[axis] != expected:
            return False
        expected = strides[axis] * dims[axis]
        elements *= dims[axis]
    with nogil:
        # memcpy of a constant size compiles to one load and store, aligned or not.
        if itemsize == 4:
            for row in range(rows):
                at = source + row * row_stride
                to = dest + row * elements * 4
                for k in range(elements):
                    memcpy(to + k * 4, at + k * element_stride, 4)
        elif itemsize == 8:
            for row in range(rows):
                at = source + row * row_stride
                to = dest + row * elements * 8
                for k in range(elements):
                    memcpy(to + k * 8, at + k * element_stride, 8)
        else:
            for row in range(rows):
                at = source + row * row_stride
                to = dest + row * elements * itemsize
                for k in range(elements):
                    memcpy(to + k * itemsize, at + k * element_stride, itemsize)
    return True
