"""The copy of the policy a background rollout runs (``max_policy_lag=1``).

While the next batch is collected, the caller's learner changes the policy itself (an
optimizer steps its weights in place), so the rollout runs a copy taken when the last batch
was handed out: ``copy.deepcopy``, except for the random generators the policy holds. Those
stay shared: the copy draws from the policy's own generators, so their streams carry on from
batch to batch exactly as in a loop that collects and learns in turns (a copied generator
would restart every batch from the same state, and every batch would draw the same noise).
The learner must then not draw from the policy's own generators; the process-wide ones
(PyTorch's default generator, ``numpy.random``) are shared with the learner anyway, so a
policy that samples from them gives batches that depend on how the two threads interleave.
"""

from __future__ import annotations

import copy
import functools
import types
from typing import Any

import numpy as np

from .generators import generator_kinds

__all__ = ["held_generators", "rollout_copy"]

#: Objects looked at when searching a policy for generators: enough for any network and its
#: attributes; a policy reaching further has its remaining generators copied with it.
_MAX_OBJECTS = 200_000


def held_generators(policy: Any) -> list[Any]:
    """The recognised random generators reachable from ``policy`` through attributes,
    containers, closures and ``functools.partial`` (arrays and tensors are not searched)."""
    kinds = tuple(generator_kinds())
    found, seen, pending = [], set(), [policy]
    torch = __import__("sys").modules.get("torch")
    leaves = (np.ndarray, type, types.ModuleType, str, bytes, int, float, complex, bool, type(None))
    if torch is not None:
        leaves = leaves + (torch.Tensor,)
    while pending and len(seen) < _MAX_OBJECTS:
        obj = pending.pop()
        if id(obj) in seen or isinstance(obj, leaves):
            continue
        seen.add(id(obj))
        if type(obj) in kinds:
            found.append(obj)
        elif isinstance(obj, dict):
            pending.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            pending.extend(obj)
        elif isinstance(obj, functools.partial):
            pending.extend((obj.func, *obj.args, *obj.keywords.values()))
        elif isinstance(obj, (types.FunctionType, types.MethodType)):
            function = getattr(obj, "__func__", obj)
            pending.extend(cell.cell_contents for cell in function.__closure__ or () if _filled(cell))
            if isinstance(obj, types.MethodType):
                pending.append(obj.__self__)
        else:
            pending.extend(getattr(obj, "__dict__", {}).values())
            pending.extend(getattr(obj, name) for name in getattr(type(obj), "__slots__", ()) if hasattr(obj, name))
    return found


def _filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def rollout_copy(policy: Any) -> Any:
    """A deep copy of ``policy`` that shares the random generators it holds (see the module)."""
    return copy.deepcopy(policy, {id(generator): generator for generator in held_generators(policy)})
