# The types of `rows.py` when Cython compiles it as `parallel_rollouts.core._core` (this file is
# found by the extension's name). The interpreter never reads it: `rows.py` runs as it is there.
# Every class becomes an extension type, its attributes C fields, its hot methods C methods, and
# its kernels (the classes cimported below) are called as C functions. The fields other objects
# read when they are built (in untyped code: comprehensions, arguments) are readonly.
cimport cython

from parallel_rollouts.core._kernels cimport Clock, EpisodeBooks, LeafBounds, RowBytes, VectorRowBooks, int64


cdef Py_ssize_t _index_in(object value, Py_ssize_t stop, str field) except? -1
cdef Py_ssize_t _count_in(object value, Py_ssize_t stop) except? -1


cdef class ObservationWriter:
    cdef readonly RowBytes rows
    cdef readonly object observations
    cdef object row_shape
    cdef object dtype
    cdef readonly Py_ssize_t num_rows
    cdef readonly Py_ssize_t num_envs
    cdef readonly Py_ssize_t num_final_rows
    cdef object on_conversion
    cdef set converted_columns

    cdef bint _copy_into(self, Py_ssize_t row, Py_ssize_t column, object source) except -1


cdef class StepRecorder:
    cdef readonly EpisodeBooks books
    cdef int64[:] done_columns
    cdef readonly Py_ssize_t horizon
    cdef readonly Py_ssize_t num_envs

    cdef Py_ssize_t _record_scratch(self, Py_ssize_t t) except -1


cdef class EnvStepper:
    cdef list envs
    cdef readonly list writers
    cdef readonly StepRecorder recorder
    cdef object flatten
    cdef tuple info_keys
    cdef list info_storage
    cdef readonly Py_ssize_t num_envs
    cdef public list failures
    cdef public object bad_observation
    cdef double[::1] step_seconds
    cdef bint timed
    cdef Clock clock

    @cython.locals(
        books=EpisodeBooks, column=Py_ssize_t, leaf_index=Py_ssize_t, n_keys=Py_ssize_t,
        reward_number=cython.double, started=cython.double, flags=cython.uchar, writer=ObservationWriter,
    )
    cdef Py_ssize_t _step(self, Py_ssize_t t, list actions) except -2

    @cython.locals(leaf_index=Py_ssize_t, writer=ObservationWriter)
    cdef _write_nested(self, Py_ssize_t row, Py_ssize_t column, object observation)


cdef class RowStepper:
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
    cdef Clock clock

    cdef list _split(self, Py_ssize_t t)

    @cython.locals(n_done=Py_ssize_t, bounds=LeafBounds)
    cdef Py_ssize_t _step_row(self, Py_ssize_t t) except -1

    @cython.locals(
        k=Py_ssize_t, column=Py_ssize_t, episode=int64, block=int64, offset=int64, seed=int64,
        writer=ObservationWriter, bounds=LeafBounds, failures=list,
    )
    cdef int _end_episodes(self, Py_ssize_t t, Py_ssize_t n_done) except -1

    @cython.locals(started=cython.double)
    cdef object _reset(self, Py_ssize_t column, int64 seed)

    @cython.locals(leaf_index=Py_ssize_t, writers=list, writer=ObservationWriter)
    cdef bint _write_reset(self, Py_ssize_t row, Py_ssize_t column, object observation) except -1


cdef class GymnasiumRowStepper:
    cdef list envs
    cdef Py_ssize_t num_envs
    cdef bint next_step
    cdef bint same_step
    cdef bint disabled
    cdef Py_ssize_t env_offset
    cdef object on_final
    cdef double[:] rewards
    cdef unsigned char[:] terminations
    cdef unsigned char[:] truncations
    cdef unsigned char[:] autoreset
    cdef list columns
    cdef public list observations
    cdef public list rewards_now
    cdef public list terminations_now
    cdef public list truncations_now
    cdef public list failures

    @cython.locals(
        events=list, observations=list, rewards=list, terminations=list, truncations=list,
        offset=Py_ssize_t, k=Py_ssize_t, column=Py_ssize_t, ended_before=bint,
    )
    cdef object _step(self, list actions, list columns)

    @cython.locals(
        columns=list, rewards=list, terminations=list, truncations=list, count=Py_ssize_t, k=Py_ssize_t,
        column=Py_ssize_t, ended=cython.uchar,
    )
    cpdef bint store_row(self) except -1


cdef class VectorRowRecorder:
    cdef StepRecorder recorder
    cdef list writers
    cdef list checked
    cdef bint next_step
    cdef bint scatter_finals
    cdef bint seeds_unknown
    cdef Py_ssize_t num_envs
    cdef VectorRowBooks row_books

    @cython.locals(leaf_index=Py_ssize_t, writer=ObservationWriter, bounds=LeafBounds)
    cdef Py_ssize_t _record(self, Py_ssize_t t, rewards, terminations, truncations, list leaves, double seconds) except -2

    cdef int _require_room(self, terminations, truncations) except -1

    @cython.locals(n_done=Py_ssize_t, writer=ObservationWriter)
    cdef Py_ssize_t _book(self, Py_ssize_t t, rewards, terminations, truncations, double seconds) except -1
