# cython: freethreading_compatible = False
"""The typed kernels of the per-step core: row copies, bounds checks, episode books.

The row code that calls them is written once, in ``rows.py``: compiled (as
``parallel_rollouts.core._core``) it calls these kernels as C functions;
interpreted (``core="python"``) it calls their NumPy references in
``kernels.py``, which have the same classes, methods and results, and which the
tests hold these to, dtype by dtype. A kernel decides nothing a user sees:
every argument check, refusal and message is the row code's or ``arguments``'s.
Cython directives are set once, in ``setup.py``.

Observation rows are moved as raw bytes: a row of a fixed-shape leaf is
``prod(shape) * itemsize`` contiguous bytes whatever the dtype, so one
``memcpy`` serves uint8 images, int32/int64 and float32/float64 vectors and
bool masks alike.
"""

cimport cython
from libc.float cimport FLT_MIN
from libc.limits cimport LLONG_MAX, LLONG_MIN
from libc.math cimport INFINITY, ceil, floor, nextafterf
from libc.stdint cimport uint64_t
from libc.string cimport memcpy

import numpy as np

from parallel_rollouts.core import arguments

cimport numpy as cnp

cnp.import_array()

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



@cython.final
cdef class Clock:
    """A monotonic clock in seconds (the one ``time.perf_counter`` reads on Linux), read without a Python call."""

    cpdef double now(self) noexcept:
        return parallel_rollouts_clock()


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



@cython.final
cdef class RowBytes:
    """The rows of one observation leaf, ``observations`` ``[rows, envs, *leaf]`` and its
    ``final_observations``, as bytes: exact rows and blocks copied with ``memcpy``.

    The storage has been checked by ``arguments.check_observation_storage``.
    """

    def __init__(self, observations, final_observations):
        self.observations = observations
        self.final_observations = final_observations
        self.row_dims = np.asarray(observations.shape[2:], dtype=np.int64).reshape(-1)
        self.dtype = observations.dtype
        self.observation_bytes = _row_bytes_view(observations)
        self.final_bytes = _row_bytes_view(final_observations)
        self.row_nbytes = self.observation_bytes.shape[2]
        self.num_envs = observations.shape[1]
        self.num_final_rows = final_observations.shape[0]

    cdef inline bint _same_dtype(self, cnp.ndarray array) noexcept:
        """The storage's dtype, itemsize included (a type number alone does not fix the size of a
        string, void or datetime dtype; int64 and long long are the same type under two numbers)."""
        cdef cnp.dtype own = <cnp.dtype>self.dtype
        cdef cnp.dtype given = array.descr
        return given is own or (given.itemsize == own.itemsize and cnp.PyArray_EquivTypes(given, own))

    cdef bint _has_leaf_shape(self, object source, bint block) noexcept:
        """``source`` is an array of the storage's dtype in native byte order shaped as one row
        (``[*leaf]``) or, with ``block``, as one row of every env (``[num_envs, *leaf]``)."""
        cdef cnp.ndarray array
        cdef int axis, first = 1 if block else 0
        cdef cnp.npy_intp* dims
        if not cnp.PyArray_CheckExact(source):
            return False
        array = <cnp.ndarray>source
        if not self._same_dtype(array) or not cnp.PyArray_ISNOTSWAPPED(array):
            return False
        if cnp.PyArray_NDIM(array) != self.row_dims.shape[0] + first:
            return False
        dims = cnp.PyArray_DIMS(array)
        if block and dims[0] != self.num_envs:
            return False
        for axis in range(self.row_dims.shape[0]):
            if dims[axis + first] != self.row_dims[axis]:
                return False
        return True

    cpdef bint copy_exact(self, Py_ssize_t row, Py_ssize_t column, object source) except -1:
        """Copy ``source`` into ``observations[row, column]`` when it is an exact row (the storage's
        dtype, native byte order, the leaf's shape, C-contiguous); False, copying nothing, otherwise."""
        if not self._has_leaf_shape(source, False) or not cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>source):
            return False
        if self.row_nbytes:
            memcpy(&self.observation_bytes[row, column, 0], cnp.PyArray_DATA(<cnp.ndarray>source), self.row_nbytes)
        return True

    cpdef bint is_exact_block(self, object source) except -1:
        """An array ``[num_envs, *leaf]`` of the storage's dtype in native byte order (any strides)."""
        return self._has_leaf_shape(source, True)

    cpdef int store_block(self, Py_ssize_t row, object block) except -1:
        """Store an exact block (see ``is_exact_block``) as ``observations[row]``."""
        cdef cnp.ndarray array = <cnp.ndarray?>block
        if self.row_nbytes == 0 or self.num_envs == 0:
            return 0
        if self.observation_bytes.strides[1] != self.row_nbytes:
            self.observations[row] = array  # storage of another layout: NumPy's general copy
        elif cnp.PyArray_IS_C_CONTIGUOUS(array):
            memcpy(&self.observation_bytes[row, 0, 0], cnp.PyArray_DATA(array), self.num_envs * self.row_nbytes)
        elif not _gather_rows(array, &self.observation_bytes[row, 0, 0]):
            self.observations[row] = array
        return 0

    cpdef int scatter(self, Py_ssize_t t, const int64[:] columns, Py_ssize_t count) except -1:
        """Copy ``observations[t + 1, c]`` into ``final_observations[t, c]`` for ``c`` in
        ``columns[:count]`` (in range: the caller checked them)."""
        cdef Py_ssize_t k
        if self.row_nbytes == 0:
            return 0
        with nogil:
            for k in range(count):
                memcpy(
                    &self.final_bytes[t, columns[k], 0],
                    &self.observation_bytes[t + 1, columns[k], 0],
                    self.row_nbytes,
                )
        return 0


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
        cnp.PyArray_CheckExact(bounds)
        and cnp.PyArray_TYPE(<cnp.ndarray>bounds) == cnp.NPY_FLOAT64
        and cnp.PyArray_NDIM(<cnp.ndarray>bounds) == 1
        and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>bounds)
    )


# The one dtype dispatch of the bounds kernels: a dtype maps to one kernel (by kind and size,
# so that int64 and long long are one), and each kernel is one specialization of the fused
# `_first_row_out_of_bounds` (int64 has its integer-compare variant).
cdef enum BoundsKernel:
    NO_KERNEL = -1
    BOOL_KERNEL, UINT8_KERNEL, INT8_KERNEL, UINT16_KERNEL, INT16_KERNEL, UINT32_KERNEL, INT32_KERNEL
    UINT64_KERNEL, INT64_KERNEL, FLOAT32_KERNEL, FLOAT64_KERNEL


cdef inline int _kernel_of(int type_number, Py_ssize_t itemsize) noexcept nogil:
    """The bounds kernel for values of this NumPy type number and item size."""
    if type_number == cnp.NPY_BOOL:
        return BOOL_KERNEL
    if type_number == cnp.NPY_UBYTE:
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


cdef Py_ssize_t _first_bool_row_out_of_bounds(
    const unsigned char* values, Py_ssize_t rows, Py_ssize_t row_elements, const double* low, const double* high
) noexcept nogil:
    """``_first_row_out_of_bounds`` for bool values: any nonzero byte is True, 1.0 (a bool array
    may hold other bytes than 0 and 1, as a view of uint8 data does), as NumPy reads it."""
    cdef Py_ssize_t row, k
    cdef double value
    for row in range(rows):
        for k in range(row_elements):
            value = 1.0 if values[row * row_elements + k] != 0 else 0.0
            if not (value >= low[k] and value <= high[k]):
                return row
    return -1


cdef Py_ssize_t _first_outside(
    int kernel, const void* data, Py_ssize_t rows, Py_ssize_t k, const double* lo, const double* hi
) noexcept nogil:
    """``rows`` contiguous rows of ``k`` elements at ``data``: the first with an element outside
    ``[lo, hi]`` (NaN included), or -1; -2 for ``NO_KERNEL``."""
    if kernel == BOOL_KERNEL:
        return _first_bool_row_out_of_bounds(<const unsigned char*>data, rows, k, lo, hi)
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
        cnp.PyArray_CheckExact(values)
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
    # Everything else: checked by the rule the NumPy reference shares, then made a kernel's operand.
    array, low_flat, high_flat = arguments.bounds_operands(values, low, high)
    rows, row_elements = array.shape
    if row_elements == 0 or rows == 0:
        return -1
    if array.dtype.kind == "f" and array.dtype.type not in (np.float32, np.float64):
        # float16 / longdouble: no kernel of their own; float64 holds every value
        # the comparison needs, as the NumPy reference compares in float64 too.
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


# Float leaves are checked against their bounds repeated into a tile of at least this many
# values: the loop over a block of rows then reads values and bounds side by side, which
# the compiler turns into vector compares (the per-element loop over float64 bounds it
# cannot vectorize with the baseline x86-64 instruction set).
cdef enum:
    BOUNDS_TILE = 64


@cython.final
cdef class LeafBounds:
    """The bounds of one observation leaf (flat float64 ``low``/``high``) and the check of its rows in place.

    ``typed`` is False for a leaf with no typed kernel (float16 and the like), whose rows
    are checked by ``find_out_of_bounds``'s general rule.
    """

    def __init__(self, RowBytes rows not None, low, high):
        cdef Py_ssize_t j
        self.rows = rows
        self.low_array = low
        self.high_array = high
        self.low = low
        self.high = high
        self.type_number = (<cnp.dtype>rows.dtype).type_num
        self.elements = low.shape[0]
        self.kernel = _kernel_of(self.type_number, (<cnp.dtype>rows.dtype).itemsize)
        if not (<cnp.dtype>rows.dtype).isnative:
            # Storage in the other byte order (never the library's own): the general rule reads it.
            self.kernel = NO_KERNEL
        self.typed = self.kernel != NO_KERNEL
        # Float leaves (no NaN bound): the bounds repeated over `tile` values (0: no tile). For
        # float32 leaves they are rounded outwards to float32, which decides every float32 value
        # exactly as the float64 bounds do, and lets the compare stay in float32.
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

    cpdef bint row_outside(self, Py_ssize_t row) except -1:
        """Whether any env's values in ``observations[row]`` lie outside the bounds."""
        cdef Py_ssize_t column
        cdef RowBytes rows = self.rows
        if self.elements == 0:
            return False
        if not self.typed:
            return find_out_of_bounds(rows.observations[row], self.low_array, self.high_array) >= 0
        if rows.num_envs == 0:
            return False
        if rows.observation_bytes.strides[1] == rows.row_nbytes:
            # The envs' rows lie end to end: one pass over them all.
            return self._values_outside(&rows.observation_bytes[row, 0, 0], rows.num_envs)
        for column in range(rows.num_envs):
            if self._values_outside(&rows.observation_bytes[row, column, 0], 1):
                return True
        return False

    cpdef bint finals_outside(self, Py_ssize_t t, const int64[:] columns, Py_ssize_t count) except -1:
        """Whether any terminal observation ``final_observations[t, columns[:count]]`` lies outside."""
        cdef Py_ssize_t k
        if self.elements == 0:
            return False
        if not self.typed:
            return find_out_of_bounds(
                self.rows.final_observations[t][np.asarray(columns[:count])], self.low_array, self.high_array
            ) >= 0
        for k in range(count):
            if self._values_outside(&self.rows.final_bytes[t, columns[k], 0], 1):
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


def _bad_mask(counted, Py_ssize_t num_envs):
    """The message for a row mask that is not a bool ``[num_envs]`` array."""
    return (
        f"`counted` must be None or a bool array of shape ({num_envs},); got "
        f"{type(counted).__name__} {getattr(counted, 'dtype', '')} {getattr(counted, 'shape', '')}".rstrip() + "."
    )


cdef inline bint _is_vector(object values, Py_ssize_t length, int type_number):
    """A C-contiguous native 1-D array of ``length`` entries of dtype ``type_number``."""
    return (
        cnp.PyArray_CheckExact(values)
        and cnp.PyArray_NDIM(<cnp.ndarray>values) == 1
        and cnp.PyArray_DIMS(<cnp.ndarray>values)[0] == length
        and cnp.PyArray_TYPE(<cnp.ndarray>values) == type_number
        and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>values)
        and cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>values)
    )



@cython.final
cdef class EpisodeBooks:
    """One step's rewards and end flags written, and the episode books kept.

    The storage has been checked by ``arguments.check_step_storage``. A record
    returns how many episodes ended (their columns at the front of
    ``done_columns``), or -1, writing nothing, when the completed-episode
    buffers have no room for them.
    """

    def __init__(
        self, rewards, terminations, truncations, step_episode_seeds, running_returns, running_lengths,
        running_seeds, completed_returns, completed_lengths, completed_env_indices, completed_end_steps,
        completed_seeds, done_columns, Py_ssize_t env_offset,
    ):
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
        self.num_envs = rewards.shape[1]
        self.completed_count = 0
        self.capacity = completed_returns.shape[0]
        self.rewards_now = np.zeros(self.num_envs, dtype=np.float64)
        self.flags_now = np.zeros(self.num_envs, dtype=np.uint8)

    cdef inline void _end_episode(self, Py_ssize_t t, Py_ssize_t column, Py_ssize_t n_done) noexcept nogil:
        """Book the episode of ``column`` that ended at step ``t`` as the ``n_done``-th of the step."""
        cdef Py_ssize_t slot = self.completed_count
        self.completed_returns[slot] = self.running_returns[column]
        self.completed_lengths[slot] = self.running_lengths[column]
        self.completed_env_indices[slot] = self.env_offset + column
        self.completed_end_steps[slot] = t
        self.completed_seeds[slot] = self.running_seeds[column]
        self.completed_count = slot + 1
        self.running_returns[column] = 0.0
        self.running_lengths[column] = 0
        self.done_columns[n_done] = column

    cdef Py_ssize_t _count_ended_row(self, Py_ssize_t t) noexcept nogil:
        cdef Py_ssize_t column, n = 0
        for column in range(self.num_envs):
            if self.terminations[t, column] or self.truncations[t, column]:
                n += 1
        return n

    cpdef Py_ssize_t record_scratch(self, Py_ssize_t t) except -2:
        """Record step ``t`` from ``rewards_now`` and ``flags_now`` (bit 1: terminated, bit 2: truncated)."""
        cdef Py_ssize_t column, n_done = 0
        cdef double reward
        cdef bint terminated, truncated
        cdef double[::1] rewards_now = self.rewards_now
        cdef unsigned char[::1] flags_now = self.flags_now
        if self.completed_count + self.num_envs > self.capacity:
            # Only near the end of the buffers can this step's episodes overflow them.
            for column in range(self.num_envs):
                if flags_now[column]:
                    n_done += 1
            if self.completed_count + n_done > self.capacity:
                return -1
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

    cpdef Py_ssize_t record_rows(self, Py_ssize_t t, object counted) except -2:
        """Record step ``t`` from the rewards and flags already in row ``t``; a column where
        ``counted`` (``None``: all, or bool ``[num_envs]``) is False adds neither reward nor length."""
        cdef Py_ssize_t column, n_done = 0
        # The mask's bytes read in place (checked by the caller): a view object per row would
        # cost more than the row's books.
        cdef const unsigned char* counted_data = NULL
        cdef Py_ssize_t counted_stride = 0
        cdef bint all_counted = counted is None
        if not all_counted:
            # Checked here too: the bytes below are read without bounds, so a wrong mask must
            # stop with an error, not read past its end.
            if not (
                type(counted) is np.ndarray and cnp.PyArray_NDIM(<cnp.ndarray>counted) == 1
                and cnp.PyArray_DIM(<cnp.ndarray>counted, 0) == self.num_envs
                and cnp.PyArray_TYPE(<cnp.ndarray>counted) == cnp.NPY_BOOL
            ):
                raise TypeError(_bad_mask(counted, self.num_envs))
            counted_data = <const unsigned char*>cnp.PyArray_DATA(<cnp.ndarray>counted)
            counted_stride = cnp.PyArray_STRIDES(<cnp.ndarray>counted)[0]
        if self.completed_count + self.num_envs > self.capacity:
            if self.completed_count + self._count_ended_row(t) > self.capacity:
                return -1
        with nogil:
            for column in range(self.num_envs):
                self.step_episode_seeds[t, column] = self.running_seeds[column]
                if all_counted or counted_data[column * counted_stride]:
                    self.running_returns[column] += self.rewards[t, column]
                    self.running_lengths[column] += 1
                if self.terminations[t, column] or self.truncations[t, column]:
                    self._end_episode(t, column, n_done)
                    n_done += 1
        return n_done

    cpdef int forget_seeds(self, Py_ssize_t count) except -1:
        """The seeds of the next episodes of ``done_columns[:count]`` are unknown (-1)."""
        cdef Py_ssize_t k
        for k in range(count):
            self.running_seeds[self.done_columns[k]] = -1
        return 0


@cython.final
cdef class VectorRowBooks:
    """The books of the rows a vector env returns, written straight from its arrays.

    ``reset_steps`` ``[horizon, num_envs]`` bool, ``counted`` contiguous
    ``[num_envs]`` bool (kept across rollouts), ``step_seconds`` ``None`` or
    ``[num_envs]`` float64, all checked by ``arguments.check_vector_row_arguments``.
    ``counted`` is the source's mask of the row being booked, owned by the caller:
    a column where it is False took a step that belongs to no episode, is marked
    in ``reset_steps`` and adds neither reward nor length.
    """

    def __init__(self, EpisodeBooks books not None, reset_steps, counted, step_seconds):
        self.books = books
        self.reset_steps = reset_steps.view(np.uint8)
        self.counted = counted.view(np.uint8)
        self.timed = step_seconds is not None
        if self.timed:
            self.step_seconds = step_seconds
        self.num_envs = books.num_envs
        self.unit_strides = self.num_envs > 0 and (
            books.rewards.strides[1] == sizeof(double)
            and books.terminations.strides[1] == 1
            and books.truncations.strides[1] == 1
            and books.step_episode_seeds.strides[1] == sizeof(int64)
            and books.running_returns.strides[0] == sizeof(double)
            and books.running_lengths.strides[0] == sizeof(int64)
            and books.running_seeds.strides[0] == sizeof(int64)
            and self.reset_steps.strides[1] == 1
            and (not self.timed or self.step_seconds.strides[0] == sizeof(double))
        )

    cpdef int reward_kind(self, object rewards, object terminations, object truncations) except -1:
        """1 (float64 rewards) or 2 (float32) when both flags are contiguous native bool vectors and
        the rewards such a float vector, one entry per env; 0 otherwise."""
        cdef Py_ssize_t n = self.num_envs
        if not _is_vector(terminations, n, cnp.NPY_BOOL) or not _is_vector(truncations, n, cnp.NPY_BOOL):
            return 0
        if _is_vector(rewards, n, cnp.NPY_DOUBLE):
            return 1
        if _is_vector(rewards, n, cnp.NPY_FLOAT):
            return 2
        return 0

    cpdef bint ended_uncounted(self, object terminations, object truncations) except -1:
        """Whether a column reports an end in a row the mask does not count (flags checked by ``reward_kind``)."""
        if self.num_envs == 0:
            return False
        return _ended_uncounted(
            <const unsigned char*>cnp.PyArray_DATA(<cnp.ndarray>terminations),
            <const unsigned char*>cnp.PyArray_DATA(<cnp.ndarray>truncations),
            &self.counted[0], self.num_envs,
        )

    cpdef bint room_for(self, object terminations, object truncations) except -1:
        """Whether the completed-episode buffers hold this row's ended episodes."""
        cdef EpisodeBooks books = self.books
        cdef const unsigned char* terminated = <const unsigned char*>cnp.PyArray_DATA(<cnp.ndarray>terminations)
        cdef const unsigned char* truncated = <const unsigned char*>cnp.PyArray_DATA(<cnp.ndarray>truncations)
        cdef Py_ssize_t column, n_done = 0
        if books.completed_count + self.num_envs <= books.capacity:
            return True
        for column in range(self.num_envs):
            if terminated[column] or truncated[column]:
                n_done += 1
        return books.completed_count + n_done <= books.capacity

    cpdef Py_ssize_t book(self, Py_ssize_t t, object rewards, object terminations, object truncations, double share) except -1:
        """Write row ``t``'s rewards, flags, seeds and ``reset_steps``, add ``share`` seconds to each
        env, and book the ended episodes (checked by ``reward_kind`` and ``room_for``); return how many ended."""
        cdef EpisodeBooks books = self.books
        cdef Py_ssize_t n = self.num_envs, column, n_done = 0
        cdef const double* reward64 = NULL
        cdef const float* reward32 = NULL
        cdef const unsigned char* terminated = <const unsigned char*>cnp.PyArray_DATA(<cnp.ndarray>terminations)
        cdef const unsigned char* truncated = <const unsigned char*>cnp.PyArray_DATA(<cnp.ndarray>truncations)
        cdef double reward
        cdef bint ended, counted_now
        if cnp.PyArray_TYPE(<cnp.ndarray>rewards) == cnp.NPY_DOUBLE:
            reward64 = <const double*>cnp.PyArray_DATA(<cnp.ndarray>rewards)
        else:
            reward32 = <const float*>cnp.PyArray_DATA(<cnp.ndarray>rewards)
        if self.unit_strides:
            return self._book_contiguous(t, reward64, reward32, terminated, truncated, share)
        # Row t of each field as a local view: the loop then keeps its pointers in registers.
        cdef double[:] rewards_row = books.rewards[t]
        cdef unsigned char[:] terminations_row = books.terminations[t]
        cdef unsigned char[:] truncations_row = books.truncations[t]
        cdef int64[:] seeds_row = books.step_episode_seeds[t]
        cdef unsigned char[:] reset_row = self.reset_steps[t]
        cdef double[:] running_returns = books.running_returns
        cdef int64[:] running_lengths = books.running_lengths
        cdef int64[:] running_seeds = books.running_seeds
        cdef unsigned char[::1] counted = self.counted
        with nogil:
            for column in range(n):
                reward = reward64[column] if reward64 != NULL else <double>reward32[column]
                ended = terminated[column] != 0 or truncated[column] != 0
                rewards_row[column] = reward
                terminations_row[column] = terminated[column] != 0
                truncations_row[column] = truncated[column] != 0
                seeds_row[column] = running_seeds[column]
                counted_now = counted[column] != 0
                reset_row[column] = not counted_now
                if counted_now:
                    running_returns[column] += reward
                    running_lengths[column] += 1
                if ended:
                    books._end_episode(t, column, n_done)
                    n_done += 1
            if self.timed:
                for column in range(n):
                    self.step_seconds[column] += share
        return n_done

    cdef Py_ssize_t _book_contiguous(
        self, Py_ssize_t t, const double* reward64, const float* reward32, const unsigned char* terminated,
        const unsigned char* truncated, double share,
    ) except -1:
        """``book`` when every row and book is contiguous (the storage's own layout): one simple
        pass per field, each of which compiles to vector code, and a pass over the ended columns
        only when there are any."""
        cdef EpisodeBooks books = self.books
        cdef Py_ssize_t n = self.num_envs, column, n_done = 0
        cdef double* rewards_row = &books.rewards[t, 0]
        cdef double* running_returns = &books.running_returns[0]
        cdef int64* running_lengths = &books.running_lengths[0]
        cdef unsigned char* counted = &self.counted[0]
        cdef unsigned char* reset_row = &self.reset_steps[t, 0]
        cdef unsigned char* terminations_row = &books.terminations[t, 0]
        cdef unsigned char* truncations_row = &books.truncations[t, 0]
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
            memcpy(&books.step_episode_seeds[t, 0], &books.running_seeds[0], n * sizeof(int64))
            # A column the mask does not count is marked, and its reward counts in no episode.
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
            if any_ended:
                n_done = _book_ended(books, t, terminated, truncated, n)
            if self.timed:
                step_seconds = &self.step_seconds[0]
                for column in range(n):
                    step_seconds[column] += share
        return n_done

    cpdef int count_unended(self, object terminations, object truncations) except -1:
        """Set the mask to the columns whose flags report no end (flags checked by ``reward_kind``)."""
        cdef const unsigned char* terminated = <const unsigned char*>cnp.PyArray_DATA(<cnp.ndarray>terminations)
        cdef const unsigned char* truncated = <const unsigned char*>cnp.PyArray_DATA(<cnp.ndarray>truncations)
        cdef Py_ssize_t column
        if self.num_envs == 0:
            return 0
        cdef unsigned char* counted = &self.counted[0]
        # With the GIL held: releasing it would cost more than this one pass over the flags.
        for column in range(self.num_envs):
            counted[column] = (terminated[column] | truncated[column]) == 0
        return 0


cdef bint _ended_uncounted(
    const unsigned char* terminated, const unsigned char* truncated, const unsigned char* counted, Py_ssize_t n
) noexcept nogil:
    """Whether a column ended in a step its mask does not count.

    A branch-free reduction, which compiles to vector code: the common answer is no."""
    cdef Py_ssize_t column
    cdef unsigned char found = 0
    for column in range(n):
        found |= ((terminated[column] | truncated[column]) != 0) & (counted[column] == 0)
    return found != 0


cdef Py_ssize_t _book_ended(
    EpisodeBooks books, Py_ssize_t t, const unsigned char* terminated, const unsigned char* truncated, Py_ssize_t n
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
                books._end_episode(t, column, n_done)
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
