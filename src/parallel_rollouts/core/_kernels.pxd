# The typed kernels of the per-step core, as the compiled row code (`rows.py` built as `_core`)
# sees them: its `_core.pxd` cimports these classes, so each call is a C call.
cimport cython
cimport numpy as cnp

ctypedef cnp.int64_t int64


@cython.final
cdef class Clock:
    cpdef double now(self) noexcept


@cython.final
cdef class RowBytes:
    cdef readonly object observations
    cdef readonly object final_observations
    cdef unsigned char[:, :, :] observation_bytes
    cdef unsigned char[:, :, :] final_bytes
    cdef int64[::1] row_dims
    cdef object dtype
    cdef readonly Py_ssize_t row_nbytes
    cdef readonly Py_ssize_t num_envs
    cdef readonly Py_ssize_t num_final_rows
    cdef bint _same_dtype(self, cnp.ndarray array) noexcept
    cdef bint _has_leaf_shape(self, object source, bint block) noexcept
    cpdef bint copy_exact(self, Py_ssize_t row, Py_ssize_t column, object source) except -1
    cpdef bint is_exact_block(self, object source) except -1
    cpdef int store_block(self, Py_ssize_t row, object block) except -1
    cpdef int scatter(self, Py_ssize_t t, const int64[:] columns, Py_ssize_t count) except -1


@cython.final
cdef class LeafBounds:
    cdef RowBytes rows
    cdef object low_array
    cdef object high_array
    cdef const double[::1] low
    cdef const double[::1] high
    cdef int type_number
    cdef int kernel
    cdef Py_ssize_t elements
    cdef readonly bint typed
    cdef Py_ssize_t tile
    cdef float[::1] low32
    cdef float[::1] high32
    cdef double[::1] low64
    cdef double[::1] high64
    cdef bint _values_outside(self, const unsigned char* data, Py_ssize_t rows) noexcept nogil
    cpdef bint row_outside(self, Py_ssize_t row) except -1
    cpdef bint finals_outside(self, Py_ssize_t t, const int64[:] columns, Py_ssize_t count) except -1


@cython.final
cdef class EpisodeBooks:
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
    cdef readonly Py_ssize_t completed_count
    cdef readonly Py_ssize_t capacity
    cdef readonly double[::1] rewards_now
    cdef readonly unsigned char[::1] flags_now
    cdef void _end_episode(self, Py_ssize_t t, Py_ssize_t column, Py_ssize_t n_done) noexcept nogil
    cdef Py_ssize_t _count_ended_row(self, Py_ssize_t t) noexcept nogil
    cpdef Py_ssize_t record_scratch(self, Py_ssize_t t) except -2
    cpdef Py_ssize_t record_rows(self, Py_ssize_t t, object counted) except -2
    cpdef int forget_seeds(self, Py_ssize_t count) except -1


@cython.final
cdef class VectorRowBooks:
    cdef EpisodeBooks books
    cdef unsigned char[:, :] reset_steps
    cdef unsigned char[::1] counted
    cdef double[:] step_seconds
    cdef bint timed
    cdef Py_ssize_t num_envs
    cdef bint unit_strides
    cpdef int reward_kind(self, object rewards, object terminations, object truncations) except -1
    cpdef bint ended_uncounted(self, object terminations, object truncations) except -1
    cpdef bint room_for(self, object terminations, object truncations) except -1
    cpdef Py_ssize_t book(self, Py_ssize_t t, object rewards, object terminations, object truncations, double share) except -1
    cpdef int count_unended(self, object terminations, object truncations) except -1
    cdef Py_ssize_t _book_contiguous(
        self, Py_ssize_t t, const double* reward64, const float* reward32, const unsigned char* terminated,
        const unsigned char* truncated, double share,
    ) except -1
