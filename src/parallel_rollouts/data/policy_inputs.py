"""What the policy is called with: its own read-only copy of each observation row.

No view of the batch can be handed to a policy safely. ``setflags(write=False)`` is undone
by whoever holds the view; a view through a read-only buffer still reaches the writeable
array behind it (the memoryview's ``obj``); and ``torch.from_numpy`` / ``torch.as_tensor``
share a read-only array's memory and only warn, so an in-place tensor operation would write
the batch. So each row of each leaf is copied, once, into a ``bytes`` object, and the policy
gets an array over it: every object reachable from the row (its ``base``, the buffer's
exporter) is immutable, turning the write flag back on raises ``ValueError``, and what a
torch policy writes in place lands in that copy alone, never in the batch or in a row
handed out before. A row is never reused: a policy may keep it and it never changes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["policy_rows_of", "read_only_copy"]


def read_only_copy(row: np.ndarray) -> np.ndarray:
    """A copy of ``row`` whose memory belongs to a ``bytes`` object: one memcpy, never writeable."""
    data = row.tobytes()
    if len(data) < 2:
        # CPython shares one ``bytes`` object per single byte (and the empty one): a policy
        # writing through torch must reach a copy of its own, never the interpreter's.
        data += b"\0\0"
    return np.ndarray(row.shape, row.dtype, data)


def policy_rows_of(leaves: Sequence[np.ndarray], t: int, start: int = 0, stop: int | None = None) -> list[np.ndarray]:
    """Row ``t`` of every leaf (``[time, env, ...]``) for env columns ``start:stop``, as private copies."""
    if start == 0 and stop is None:
        # One leaf (a Box or Discrete space) without a comprehension's frame: this runs every row.
        return [read_only_copy(leaves[0][t])] if len(leaves) == 1 else [read_only_copy(leaf[t]) for leaf in leaves]
    return [read_only_copy(leaf[t, start:stop]) for leaf in leaves]
