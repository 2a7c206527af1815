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
import dis
import functools
import importlib.util
import sys
import types
from typing import Any

import numpy as np

from .generators import generator_kinds

__all__ = ["held_generators", "rollout_copy", "uncopyable_state"]

#: Objects looked at when searching a policy for generators: enough for any network and its
#: attributes; a policy reaching further has its remaining generators copied with it.
_MAX_OBJECTS = 200_000


def _reachable(policy: Any, arrays: bool = False):
    """Every object reachable from ``policy`` through attributes, containers, closures and
    ``functools.partial``, each once (arrays and tensors are not searched; with ``arrays`` they
    are yielded, as soon as one is met)."""
    seen, pending = set(), [policy]
    torch = sys.modules.get("torch")
    leaves = (np.ndarray, type, types.ModuleType, str, bytes, int, float, complex, bool, type(None))
    if torch is not None:
        leaves = leaves + (torch.Tensor,)
    while pending and len(seen) < _MAX_OBJECTS:
        obj = pending.pop()
        if arrays and _is_array(obj):
            yield obj
            continue
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
    message; ``None`` if nowhere.

    ``copy.deepcopy`` copies a function as it is, and a class with it: what a function reads
    from its module's globals, its closure, its default arguments or a module's attributes is
    the live object, not a copy. So every function the policy reaches is read for such state:
    the functions in its object graph (a ``functools.partial``'s, a bound method's), the methods
    of the classes of the objects in it, and the functions those read in turn. The policy's own
    functions may read nothing mutable from their globals or closure (they are what the user
    wrote for this policy); methods, defaults and module attributes are held to what a learner
    changes in place: an object that holds arrays or tensors, so that a class's bookkeeping
    (a registry of hooks, a cache) is no reason to refuse a policy.
    """
    return _Inspection().run(policy)


class _Inspection:
    """One search of a policy's functions for live state (see :func:`uncopyable_state`)."""

    def __init__(self) -> None:
        self._checked: set[int] = set()
        self._holds_arrays: dict[int, bool] = {}
        self._pending: list[tuple[types.FunctionType, bool]] = []

    def run(self, policy: Any) -> str | None:
        for obj in _reachable(policy):
            if isinstance(obj, types.FunctionType):
                self._pending.append((obj, True))
            elif isinstance(obj, types.MethodType):
                self._pending.append((obj.__func__, False))
            elif not isinstance(obj, (types.BuiltinFunctionType, functools.partial, dict, list, tuple, set, frozenset)):
                self._pending.extend((function, False) for function in _methods_of(type(obj)))
                problem = self._class_problem(type(obj))
                if problem is not None:
                    return problem
        while self._pending:
            function, strict = self._pending.pop()
            if id(function) in self._checked:
                continue
            self._checked.add(id(function))
            problem = self._function_problem(function, strict)
            if problem is not None:
                return problem
        return None

    def _class_problem(self, cls: type) -> str | None:
        """A network held by the class itself (``class Policy: net = Net()``): ``copy.deepcopy``
        copies an instance's attributes, never its class's."""
        for base in cls.__mro__[:-1]:
            if id(base) in self._checked:
                continue
            self._checked.add(id(base))
            for name, member in vars(base).items():
                if not name.startswith("__") and self._live(member, strict=False):
                    return (
                        f"the class `{base.__qualname__}` holds `{name}` (a {type(member).__name__}) as a class "
                        "attribute, which a copy of an instance shares"
                    )
        return None

    def _function_problem(self, function: types.FunctionType, strict: bool) -> str | None:
        what = f"the function `{function.__qualname__}`"
        for argument, value in _defaults(function):
            if self._live(value, strict=False):
                return f"{what} holds a {type(value).__name__} as the default of its argument `{argument}`"
        for name, value, where in _read_by(function):
            if isinstance(value, types.FunctionType):
                if _same_package(function, value):
                    self._pending.append((value, strict))
            elif isinstance(value, types.ModuleType):
                problem = self._module_problem(what, function, name, value)
                if problem is not None:
                    return problem
            elif self._live(value, strict):
                return f"{what} reads `{name}` (a {type(value).__name__}) from its {where}"
        return None

    def _module_problem(self, what: str, function: types.FunctionType, name: str, module: types.ModuleType) -> str | None:
        """What ``function`` reads through ``module`` (``models.net``, ``models.sub.net``): the
        attributes named in its code, followed through modules a few levels deep."""
        names = _names_in(function.__code__)[1]
        pending, seen = [(name, module, 0)], set()
        while pending:
            path, module, depth = pending.pop()
            if id(module) in seen:
                continue
            seen.add(id(module))
            for attribute in sorted(names):
                value = getattr(module, attribute, None) if attribute in vars(module) else None
                if value is None:
                    continue
                if isinstance(value, types.ModuleType):
                    if depth < 3:
                        pending.append((f"{path}.{attribute}", value, depth + 1))
                elif isinstance(value, types.FunctionType):
                    if _same_package(function, value):
                        self._pending.append((value, False))
                elif self._live(value, strict=False):
                    return f"{what} reads `{path}.{attribute}` (a {type(value).__name__}) through the module `{module.__name__}`"
        return None

    def _live(self, value: Any, strict: bool) -> bool:
        """Whether ``value`` is state a copy of the policy would still share: anything mutable when
        ``strict``, otherwise only an object that holds arrays or tensors."""
        if _immutable(value) or isinstance(value, (types.FunctionType, types.MethodType, functools.partial)):
            return False
        if strict:
            return True
        key = id(value)
        if key not in self._holds_arrays:
            self._holds_arrays[key] = any(_is_array(obj) for obj in _reachable(value, arrays=True))
        return self._holds_arrays[key]


#: Methods a rollout never runs: the copy is made with ``copy.deepcopy`` and then only called.
_NOT_RUN_BY_A_ROLLOUT = frozenset({
    "__init__", "__new__", "__init_subclass__", "__class_getitem__", "__getstate__", "__setstate__",
    "__reduce__", "__reduce_ex__", "__copy__", "__deepcopy__", "__repr__", "__str__", "__del__",
})


def _same_package(reader: types.FunctionType, read: types.FunctionType) -> bool:
    """Whether ``read`` comes from the top-level package ``reader`` does: a helper of the policy's
    own code is followed, another library's internals are not (a test framework's or a logging
    configuration reaches most of the process, arrays included, and is no policy state)."""
    return (reader.__module__ or "").split(".")[0] == (read.__module__ or "").split(".")[0]


def _methods_of(cls: type) -> list[types.FunctionType]:
    """The functions a class and its bases define (methods, static and class methods, properties)
    that a rollout may run."""
    functions = []
    for base in cls.__mro__:
        if base is object:
            continue
        for name, member in vars(base).items():
            if name in _NOT_RUN_BY_A_ROLLOUT:
                continue
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            if isinstance(member, property):
                functions.extend(part for part in (member.fget, member.fset) if isinstance(part, types.FunctionType))
            elif isinstance(member, types.FunctionType):
                functions.append(member)
    return functions


def _defaults(function: types.FunctionType):
    """``(argument, value)`` for each default of ``function``'s arguments."""
    code = function.__code__
    positional = code.co_varnames[: code.co_argcount]
    defaults = function.__defaults__ or ()
    yield from zip(positional[len(positional) - len(defaults) :], defaults)
    yield from (function.__kwdefaults__ or {}).items()


def _names_in(code: types.CodeType) -> tuple[set[str], set[str]]:
    """The global names ``code`` loads and the attribute names it reads (nested functions and
    lambdas included): ``self.net`` reads the attribute ``net``, not the global."""
    code_objects, globals_read, attributes = [code], set(), set()
    while code_objects:
        code = code_objects.pop()
        for instruction in dis.get_instructions(code):
            if instruction.opname in _GLOBAL_LOADS:
                globals_read.add(instruction.argval)
            elif instruction.opname in _ATTRIBUTE_LOADS:
                attributes.add(instruction.argval)
        code_objects.extend(const for const in code.co_consts if isinstance(const, types.CodeType))
    return globals_read, attributes


def _imports_in(code: types.CodeType, package: str | None) -> set[str]:
    """The absolute names of the modules ``code`` imports (``from .models import net`` included,
    resolved against ``package``)."""
    code_objects, names = [code], set()
    while code_objects:
        code = code_objects.pop()
        level = 0
        for instruction in dis.get_instructions(code):
            if instruction.opname == "LOAD_CONST" and isinstance(instruction.argval, int):
                level = instruction.argval
            elif instruction.opname == "IMPORT_NAME":
                relative = "." * level + instruction.argval
                try:
                    names.add(importlib.util.resolve_name(relative, package) if level else instruction.argval)
                except (ImportError, ValueError):
                    pass  # a relative import outside a package fails when the function runs, not here
        code_objects.extend(const for const in code.co_consts if isinstance(const, types.CodeType))
    return names


_GLOBAL_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME"})
#: ``from package import module`` in a function's body reads ``module`` as an attribute.
_ATTRIBUTE_LOADS = frozenset({"LOAD_ATTR", "LOAD_METHOD", "IMPORT_FROM"})


def _read_by(function: types.FunctionType):
    """``(name, value, "module's globals" | "closure" | "imports")`` for what ``function`` reads
    (nested functions and lambdas in its body included; a module imported in its body is read
    as the module)."""
    globals_read = _names_in(function.__code__)[0]
    for name in sorted(globals_read):
        if name in function.__globals__:
            yield name, function.__globals__[name], "module's globals"
    for name in sorted(_imports_in(function.__code__, function.__globals__.get("__package__"))):
        if name in sys.modules:
            yield name, sys.modules[name], "imports"
    for name, cell in zip(function.__code__.co_freevars, function.__closure__ or ()):
        if _filled(cell):
            yield name, cell.cell_contents, "closure"


def _is_array(obj: Any) -> bool:
    if isinstance(obj, np.ndarray):
        return True
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def _immutable(value: Any) -> bool:
    if isinstance(value, (tuple, frozenset)):
        return all(_immutable(item) for item in value)
    return isinstance(value, _IMMUTABLE) or _is_scalar_constant(value)


def _is_scalar_constant(value: Any) -> bool:
    """A NumPy scalar, or one of PyTorch's dtypes and devices: values, never changed in place."""
    if isinstance(value, np.generic):
        return True
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, (torch.dtype, torch.device))


def _filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def rollout_copy(policy: Any) -> Any:
    """A deep copy of ``policy`` that shares the random generators it holds (see the module)."""
    return copy.deepcopy(policy, {id(generator): generator for generator in held_generators(policy)})
