"""Actions stored with the dtype they were given, for :class:`~parallel_rollouts.ParallelVectorEnv`.

``SyncVectorEnv`` hands each env a row of the caller's own array: float64
actions for a float32 ``Box`` reach the env as float64, int32 actions for a
``Discrete`` as ``np.int32``. Storage typed by the space would round or
convert them on the way, so the vector env's action storage holds bytes
instead: each env's row of each leaf is a 16-byte header naming the dtype
(``numpy.dtype.str``, e.g. ``b"<f8"``) followed by room for the leaf's
elements at the widest itemsize the action check accepts for that leaf
(8 bytes for integer leaves, 16 for float ``Box`` leaves, whose actions
may be ``longdouble``). The writer in the main process and the reader next to
the envs (in this process or an async worker) view those bytes with that dtype.

The header is rewritten only when the dtype changes, and a reader rebuilds its
views only then: a loop that passes the same dtype every step pays one compare
per leaf.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .spaces import Leaf, SpaceLayout

__all__ = ["TypedActionReader", "TypedActionWriter", "allocate_typed_actions"]

HEADER_BYTES = 16


def _widest_itemsize(leaf: Leaf) -> int:
    # Integer leaves accept integer and bool actions only (see action_checks).
    return max(np.dtype(np.longdouble).itemsize, 8) if leaf.dtype.kind == "f" else 8


def _row_bytes(leaf: Leaf) -> int:
    size = int(np.prod(leaf.shape, dtype=np.int64))
    return HEADER_BYTES + size * _widest_itemsize(leaf)


def allocate_typed_actions(layout: SpaceLayout, leading: tuple[int, ...], allocator: Callable) -> list[np.ndarray]:
    """One uint8 array per leaf of shape ``leading + (header + widest row bytes,)``."""
    return [allocator(leading + (_row_bytes(leaf),), dtype=np.uint8) for leaf in layout.leaves]


def _header(dtype: np.dtype) -> np.ndarray:
    text = dtype.str.encode("ascii")
    return np.frombuffer(text.ljust(HEADER_BYTES, b" "), dtype=np.uint8)


def _values_view(rows: np.ndarray, leaf: Leaf, dtype: np.dtype) -> np.ndarray:
    """The ``[envs] + leaf shape`` array of ``dtype`` inside ``rows`` (``[envs, row bytes]`` uint8)."""
    size = int(np.prod(leaf.shape, dtype=np.int64))
    values = rows[:, HEADER_BYTES : HEADER_BYTES + size * dtype.itemsize]
    return values.view(dtype).reshape((rows.shape[0],) + leaf.shape)


class TypedActionWriter:
    """Writes checked action leaves (``[num_envs] + leaf shape``, any accepted dtype) into byte rows."""

    def __init__(self, layout: SpaceLayout, rows: list[np.ndarray]) -> None:
        self._leaves = layout.leaves
        self._rows = rows
        self._dtypes: list[np.dtype | None] = [None] * len(rows)
        self._views: list[np.ndarray | None] = [None] * len(rows)

    def dtypes(self) -> list[np.dtype | None]:
        """The dtype each leaf's rows hold now (``None``: nothing written yet)."""
        return list(self._dtypes)

    def write(self, leaf_actions: list[np.ndarray], envs: np.ndarray | None = None) -> None:
        """Write every env's row (or those of ``envs``, env indices, one per action row).

        A leaf whose dtype changes is retyped for every env: rows not written now then hold
        nothing meaningful until they are written again.
        """
        for index, array in enumerate(leaf_actions):
            dtype, written = array.dtype, self._dtypes[index]
            # (`dtype != None` is false for float64: NumPy reads None as the default dtype.)
            if written is None or dtype != written:
                rows = self._rows[index]
                rows[:, :HEADER_BYTES] = _header(dtype)
                self._views[index] = _values_view(rows, self._leaves[index], dtype)
                self._dtypes[index] = dtype
            if envs is None:
                self._views[index][...] = array
            else:
                self._views[index][envs] = array


class TypedActionReader:
    """Reads the actions a :class:`TypedActionWriter` wrote: per leaf, one array view over this reader's envs."""

    def __init__(self, layout: SpaceLayout, rows: list[np.ndarray]) -> None:
        self._leaves = layout.leaves
        self._rows = rows
        self._headers: list[bytes] = [b""] * len(rows)
        self._views: list[np.ndarray | None] = [None] * len(rows)

    def read(self) -> list[np.ndarray]:
        """Per leaf, the ``[envs] + leaf shape`` array as written (a view: the next write overwrites it)."""
        views = self._views
        for index, rows in enumerate(self._rows):
            header = rows[0, :HEADER_BYTES].tobytes()
            if header != self._headers[index]:
                dtype = np.dtype(header.rstrip(b" ").decode("ascii"))
                views[index] = _values_view(rows, self._leaves[index], dtype)
                self._headers[index] = header
        return views
