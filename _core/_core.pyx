# cython: freethreading_compatible = False
"""Compiled per-step hot path of Parallel Rollouts.

This module has a pure-Python twin, ``parallel_rollouts._core_python``, with
the same names, signatures and semantics; the long docstrings live there. The
two are tested against each other. Cython directives are set once, in
``setup.py``.

Observation rows are moved as raw bytes: a row of a fixed-shape leaf is
``prod(shape) * itemsize`` contiguous bytes whatever the dtype, so one
``memcpy`` kernel serves uint8 images, int32/int64 and float32/float64 vectors
and bool masks alike, with no per-element Python.
"""

cimport cython
from libc.string cimport memcpy

import numpy as np

from parallel_rollouts._core_checks import (
    check_done_columns,
    check_observation_storage,
    check_step_lists,
    check_step_storage,
)
from parallel_rollouts.conversion import convert_row

cimport numpy as cnp

cnp.import_array()

ctypedef cnp.int64_t int64


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
        check_observation_storage(observations, final_observations)
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

    cdef bint _is_exact_row(self, cnp.ndarray array):
        """Same dtype, same shape, C-contiguous: the row can be copied as bytes."""
        cdef int axis
        cdef cnp.npy_intp* dims
        if cnp.PyArray_TYPE(array) != (<cnp.dtype>self.dtype).type_num:
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

    def write_rows(self, Py_ssize_t row, list sources not None):
        cdef Py_ssize_t column
        if row < 0 or row >= self.observation_bytes.shape[0]:
            raise IndexError(f"row {row} is outside [0, {self.observation_bytes.shape[0]}).")
        if len(sources) != self.num_envs:
            raise ValueError(f"expected {self.num_envs} sources, got {len(sources)}.")
        for column in range(self.num_envs):
            if not self._copy_into(row, column, sources[column]):
                return column
        return -1

    def write_row(self, Py_ssize_t row, Py_ssize_t column, source):
        if row < 0 or row >= self.observation_bytes.shape[0]:
            raise IndexError(f"row {row} is outside [0, {self.observation_bytes.shape[0]}).")
        if column < 0 or column >= self.num_envs:
            raise IndexError(f"column {column} is outside [0, {self.num_envs}).")
        return self._copy_into(row, column, source)

    def scatter_final(self, Py_ssize_t t, done_columns, Py_ssize_t count):
        cdef Py_ssize_t k, column
        cdef const int64[:] columns
        if t < 0 or t >= self.num_final_rows:
            raise IndexError(f"time step {t} is outside [0, {self.num_final_rows}).")
        check_done_columns(done_columns, 0)
        columns = done_columns
        if count < 0 or count > columns.shape[0]:
            raise ValueError(f"count {count} is outside [0, {columns.shape[0]}].")
        for k in range(count):
            column = columns[k]
            if column < 0 or column >= self.num_envs:
                raise IndexError(f"done column {column} is outside [0, {self.num_envs}).")
        if self.row_nbytes == 0:
            return
        with nogil:
            for k in range(count):
                column = columns[k]
                memcpy(
                    &self.final_bytes[t, column, 0],
                    &self.observation_bytes[t + 1, column, 0],
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
        Py_ssize_t env_offset,
    ):
        check_step_storage(
            rewards, terminations, truncations, step_episode_seeds, running_returns, running_lengths,
            running_seeds, completed_returns, completed_lengths, completed_env_indices,
            completed_end_steps, completed_seeds, done_columns,
        )
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
        self.env_offset = env_offset
        self.num_envs = self.rewards.shape[1]
        self._completed_count = 0
        self.rewards_now = np.empty(self.num_envs, dtype=np.float64)
        self.flags_now = np.empty(self.num_envs, dtype=np.uint8)

    @property
    def completed_count(self):
        return self._completed_count

    def record_step(
        self,
        Py_ssize_t t,
        list step_rewards not None,
        list step_terminations not None,
        list step_truncations not None,
    ):
        cdef Py_ssize_t column, n_done = 0, slot
        cdef double reward
        cdef bint terminated, truncated
        if t < 0 or t >= self.rewards.shape[0]:
            raise IndexError(f"time step {t} is outside [0, {self.rewards.shape[0]}).")
        if (
            len(step_rewards) != self.num_envs
            or len(step_terminations) != self.num_envs
            or len(step_truncations) != self.num_envs
        ):
            check_step_lists(
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
        if self._completed_count + self.num_envs > self.completed_returns.shape[0]:
            for column in range(self.num_envs):
                if flags_now[column]:
                    n_done += 1
            if self._completed_count + n_done > self.completed_returns.shape[0]:
                raise ValueError(
                    f"completed-episode buffers are full ({self.completed_returns.shape[0]} slots)."
                )
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
                    slot = self._completed_count
                    self.completed_returns[slot] = self.running_returns[column]
                    self.completed_lengths[slot] = self.running_lengths[column]
                    self.completed_env_indices[slot] = self.env_offset + column
                    self.completed_end_steps[slot] = t
                    self.completed_seeds[slot] = self.running_seeds[column]
                    self._completed_count = slot + 1
                    self.running_returns[column] = 0.0
                    self.running_lengths[column] = 0
                    self.done_columns[n_done] = column
                    n_done += 1
        return n_done


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
    const numeric[:, ::1] values, const double[::1] low, const double[::1] high
) noexcept nogil:
    cdef Py_ssize_t row, k
    cdef double value
    for row in range(values.shape[0]):
        for k in range(values.shape[1]):
            value = <double>values[row, k]
            # Written so that NaN, which fails every comparison, counts as outside.
            if not (value >= low[k] and value <= high[k]):
                return row
    return -1


def find_out_of_bounds(values, low, high):
    cdef Py_ssize_t rows
    array = np.asarray(values)
    if array.ndim == 0:
        raise ValueError("`values` must have a leading row axis.")
    if array.dtype == np.bool_:
        array = array.view(np.uint8)
    elif array.dtype.kind == "f" and array.dtype.itemsize not in (4, 8):
        # float16 / longdouble: no kernel of their own; float64 holds every value
        # the comparison needs, as the twin compares in float64 too.
        array = array.astype(np.float64)
    elif not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    array = np.ascontiguousarray(array)
    rows = array.shape[0]
    row_elements = 1
    for axis in range(1, array.ndim):
        row_elements *= array.shape[axis]
    flat = array.reshape(rows, row_elements)
    low_flat = np.ascontiguousarray(low, dtype=np.float64).reshape(-1)
    high_flat = np.ascontiguousarray(high, dtype=np.float64).reshape(-1)
    if low_flat.shape[0] != flat.shape[1] or high_flat.shape[0] != flat.shape[1]:
        raise ValueError(
            f"bounds cover {low_flat.shape[0]}/{high_flat.shape[0]} elements; each row has {flat.shape[1]}."
        )
    if flat.shape[1] == 0 or rows == 0:
        return -1
    return _dispatch_out_of_bounds(flat, low_flat, high_flat)


cdef Py_ssize_t _dispatch_out_of_bounds(object flat, const double[::1] low, const double[::1] high) except -2:
    kind = flat.dtype.kind
    size = flat.dtype.itemsize
    if kind == "u" and size == 1:
        return _first_row_out_of_bounds[cython.uchar](flat, low, high)
    if kind == "i" and size == 1:
        return _first_row_out_of_bounds[cython.schar](flat, low, high)
    if kind == "i" and size == 2:
        return _first_row_out_of_bounds[cython.short](flat, low, high)
    if kind == "u" and size == 2:
        return _first_row_out_of_bounds[cython.ushort](flat, low, high)
    if kind == "i" and size == 4:
        return _first_row_out_of_bounds[cython.int](flat, low, high)
    if kind == "u" and size == 4:
        return _first_row_out_of_bounds[cython.uint](flat, low, high)
    if kind == "i" and size == 8:
        return _first_row_out_of_bounds[cython.longlong](flat, low, high)
    if kind == "u" and size == 8:
        return _first_row_out_of_bounds[cython.ulonglong](flat, low, high)
    if kind == "f" and size == 4:
        return _first_row_out_of_bounds[cython.float](flat, low, high)
    if kind == "f" and size == 8:
        return _first_row_out_of_bounds[cython.double](flat, low, high)
    raise TypeError(f"unsupported dtype {flat.dtype} for a bounds check.")
