"""What the policy is called with: rows it can read and never write.

No plain view of the batch can be handed to a policy safely. ``setflags(write=False)`` is
undone by whoever holds the view; a view through a read-only buffer still reaches the
writeable array behind it (the memoryview's ``obj``); and ``torch.from_numpy`` /
``torch.as_tensor`` share a read-only array's memory and only warn, so an in-place tensor
operation would write the batch. Three ways out, :data:`POLICY_INPUTS`:

- ``"protected"`` (the default): for a leaf whose rows are large (frames), rows of a second,
  read-only mapping of the batch's observation memory
  (:mod:`~parallel_rollouts.data.read_only_mirror`). No copy; NumPy refuses a write, and a
  write that bypasses NumPy (an in-place PyTorch operation) stops the process with a
  segmentation fault before anything reaches the batch. A leaf with small rows (CartPole's),
  and any leaf where the system cannot map memory twice, is copied as with ``"copies"``.
- ``"copies"``: each row of each leaf copied, once, into a ``bytes`` object, and the policy
  gets an array over it: every object reachable from the row is immutable, turning the write
  flag back on raises ``ValueError``, and what a torch policy writes in place lands in that
  copy alone. On 84x84x4 frames that copy is about as much as the rest of a step.
- ``"views"``: read-only views of the batch's own rows, with the risks
  :data:`POLICY_INPUTS` states.

A copied row the policy keeps never changes. A kept row of the mirror is the batch's memory:
it holds the batch as a view would, so the batch is not recycled while it lives, but it
changes when that memory is written (the caller writing the batch in place; the next collect
with ``reuse_buffers=True``; in a rollout worker, the batch's memory reused once the caller
dropped it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ConfigurationError

__all__ = [
    "POLICY_INPUTS", "check_policy_inputs", "mirror_rows_of", "policy_input_mode", "policy_rows_of", "read_only_copy", "read_only_view",
]

#: What the policy is called with. ``"protected"`` (the default): rows of a read-only mapping
#: of the batch, which nothing the policy does can turn into a write of the batch (a write
#: through PyTorch is a segmentation fault). ``"copies"``: each row copied for that call alone,
#: which a policy may even write in place. ``"views"``: read-only views of the batch's rows,
#: with no copy and no protection; a policy that writes its input anyway
#: (``torch.from_numpy`` or ``torch.as_tensor`` followed by an in-place operation, or turning
#: the write flag back on) changes the batch, and a row it keeps changes when the batch's
#: memory is written again (the next collect with ``reuse_buffers=True``, a recycled batch,
#: a worker's shared columns).
POLICY_INPUTS = ("protected", "copies", "views")


def check_policy_inputs(value: Any) -> str:
    """``value`` if it is one of :data:`POLICY_INPUTS`; else a :class:`ConfigurationError` naming them."""
    if value not in POLICY_INPUTS:
        raise ConfigurationError(
            f"`policy_inputs` must be one of {POLICY_INPUTS!r}; got {value!r}. 'protected' (the "
            "default) gives the policy read-only rows of the batch that no write reaches; 'copies' "
            "gives it its own copy of each row, which it may write in place; 'views' gives it plain "
            "read-only views, which a policy that writes its input can change."
        )
    return value


def read_only_copy(row: np.ndarray) -> np.ndarray:
    """A copy of ``row`` whose memory belongs to a ``bytes`` object: one memcpy, never writeable."""
    data = row.tobytes()
    if len(data) < 2:
        # CPython shares one ``bytes`` object per single byte (and the empty one): a policy
        # writing through torch must reach a copy of its own, never the interpreter's.
        data += b"\0\0"
    return np.ndarray(row.shape, row.dtype, data)


def policy_input_mode(policy: Any, policy_inputs: str) -> str:
    """What the rows handed to ``policy`` are: ``policy_inputs``, or ``"views"`` for the default
    sampler (``policy=None``), which never reads them."""
    return "views" if policy is None else policy_inputs


def read_only_view(row: np.ndarray) -> np.ndarray:
    """A view of ``row`` whose write flag is off (``policy_inputs="views"``): no copy, no guarantee."""
    view = row.view()
    view.flags.writeable = False
    return view


def policy_rows_of(
    leaves: Sequence[np.ndarray], t: int, start: int = 0, stop: int | None = None, copies: bool = True
) -> list[np.ndarray]:
    """Row ``t`` of every leaf (``[time, env, ...]``) for env columns ``start:stop``: private
    copies, or with ``copies=False`` read-only views (see :data:`POLICY_INPUTS`)."""
    row_of = read_only_copy if copies else read_only_view
    if start == 0 and stop is None:
        # One leaf (a Box or Discrete space) without a comprehension's frame: this runs every row.
        return [row_of(leaves[0][t])] if len(leaves) == 1 else [row_of(leaf[t]) for leaf in leaves]
    return [row_of(leaf[t, start:stop]) for leaf in leaves]


def mirror_rows_of(
    mirror: Sequence[np.ndarray | None], leaves: Sequence[np.ndarray], t: int, start: int = 0, stop: int | None = None
) -> list[np.ndarray]:
    """Row ``t`` for env columns ``start:stop`` of every leaf: of its read-only mirror
    (:mod:`~parallel_rollouts.data.read_only_mirror`) as it is, since it is read-only all the way
    down; a read-only copy of the storage's row for a leaf without one (``None``)."""
    if start == 0 and stop is None:
        if len(mirror) == 1 and mirror[0] is not None:
            return [mirror[0][t]]
        return [read_only_copy(leaf[t]) if rows is None else rows[t] for rows, leaf in zip(mirror, leaves)]
    return [read_only_copy(leaf[t, start:stop]) if rows is None else rows[t, start:stop] for rows, leaf in zip(mirror, leaves)]
