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
import sys
import types
from typing import Any

import numpy as np

from .generators import generator_kinds

__all__ = ["held_generators", "rollout_copy", "uncopyable_state"]

#: Objects looked at when searching a policy for generators: enough for any network and its
#: attributes; a policy reaching further has its remaining generators copied with it.
_MAX_OBJECTS = 200_000


def _reachable(policy: Any):
    """Every object reachable from ``policy`` through attributes, containers, closures and
    ``functools.partial`` (arrays and tensors are not searched), each once."""
    seen, pending = set(), [policy]
    torch = sys.modules.get("torch")
    leaves = (np.ndarray, type, types.ModuleType, str, bytes, int, float, complex, bool, type(None))
    if torch is not None:
        leaves = leaves + (torch.Tensor,)
    while pending and len(seen) < _MAX_OBJECTS:
        obj = pending.pop()
        if id(obj) in seen or isinstance(obj, leaves):
            continue
        seen.add(id(obj))
        yield obj
        if isinstance(obj, dict):
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
        elif not isinstance(obj, _IMMUTABLE):
            pending.extend(getattr(obj, "__dict__", {}).values())
            pending.extend(getattr(obj, name) for name in getattr(type(obj), "__slots__", ()) if hasattr(obj, name))


def held_generators(policy: Any) -> list[Any]:
    """The recognised random generators reachable from ``policy`` (see :func:`_reachable`)."""
    kinds = tuple(generator_kinds())
    return [obj for obj in _reachable(policy) if type(obj) in kinds]


#: What a function may read from its globals or closure and still be copied faithfully with
#: the policy: nothing a learner changes in place.
_IMMUTABLE = (types.ModuleType, type, types.BuiltinFunctionType, str, bytes, int, float, complex, bool, type(None), np.dtype)


def uncopyable_state(policy: Any) -> str | None:
    """Where ``policy`` reads state that ``copy.deepcopy`` leaves shared, described for an error
    message; ``None`` if nowhere. Functions are copied as they are: what one reads from its
    module's globals or its closure (a network, a dict) is the live object, not a copy."""
    checked: set[int] = set()
    functions = [obj for obj in _reachable(policy) if isinstance(obj, types.FunctionType)]
    while functions:
        function = functions.pop()
        if id(function) in checked:
            continue
        checked.add(id(function))
        for name, value, where in _read_by(function):
            if isinstance(value, types.FunctionType):
                functions.append(value)
            elif not _immutable(value):
                return (
                    f"the function `{function.__qualname__}` reads `{name}` (a {type(value).__name__}) from its {where}"
                )
    return None


def _read_by(function: types.FunctionType):
    """``(name, value, "module's globals" | "closure")`` for what ``function`` reads (nested
    functions and lambdas in its body included)."""
    code_objects, names = [function.__code__], set()
    while code_objects:
        code = code_objects.pop()
        names.update(code.co_names)
        code_objects.extend(const for const in code.co_consts if isinstance(const, types.CodeType))
    for name in sorted(names):
        if name in function.__globals__:
            yield name, function.__globals__[name], "module's globals"
    for name, cell in zip(function.__code__.co_freevars, function.__closure__ or ()):
        if _filled(cell):
            yield name, cell.cell_contents, "closure"


def _immutable(value: Any) -> bool:
    if isinstance(value, (tuple, frozenset)):
        return all(_immutable(item) for item in value)
    return isinstance(value, _IMMUTABLE)


def _filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def rollout_copy(policy: Any) -> Any:
    """A deep copy of ``policy`` that shares the random generators it holds (see the module)."""
    return copy.deepcopy(policy, {id(generator): generator for generator in held_generators(policy)})
