"""A recurrent policy's state: a nested dict / tuple / list of arrays, flattened and rebuilt.

A state is any nesting of ``dict`` (keys in their order), ``tuple`` (named tuples
included) and ``list`` whose leaves are NumPy arrays or PyTorch tensors, each with the
env dimension first. :class:`StateTree` records the nesting of one such state and the
shape and dtype of each leaf, so that every later state can be flattened against it and
refused, leaf by leaf, when it does not match. Leaves are named by their path
(``['h']``, ``[0]``, ``['lstm'][1]``), as observation leaves are.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ActionError

__all__ = ["StateTree", "leaf_to_numpy"]

_LEAF = None


def _is_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def leaf_to_numpy(leaf: Any) -> np.ndarray:
    """A NumPy array of ``leaf``'s values that shares nothing with it (a tensor's on any device)."""
    if isinstance(leaf, np.ndarray):
        return leaf.copy()
    return leaf.detach().cpu().numpy().copy()


@dataclass(frozen=True)
class StateTree:
    """The nesting of a state and the shape and dtype (NumPy's) of each leaf.

    ``structure`` is ``None`` for a single leaf, else ``(kind, keys, children)`` with
    ``kind`` the container type and ``keys`` a dict's keys (``None`` for sequences).
    ``leaf_shapes`` exclude the env dimension.
    """

    structure: Any
    paths: tuple[str, ...]
    leaf_shapes: tuple[tuple[int, ...], ...]
    leaf_dtypes: tuple[np.dtype, ...]
    #: Per leaf: a PyTorch tensor (True) or a NumPy array (False).
    leaf_is_tensor: tuple[bool, ...]

    #: The keys when the state is a dict whose every value is a leaf (the common state), else ``None``.
    flat_dict_keys: tuple | None = None

    @classmethod
    def of(cls, state: Any, num_envs: int, where: str) -> tuple[StateTree, list[Any]]:
        """The tree of ``state`` and its leaves; every leaf must be an array or tensor of ``num_envs`` rows."""
        leaves: list[Any] = []
        paths: list[str] = []
        structure = _describe(state, "", leaves, paths, where)
        if not leaves:
            raise ActionError(f"{where} holds no array or tensor; a state needs at least one leaf.")
        shapes, dtypes, tensors = [], [], []
        for path, leaf in zip(paths, leaves):
            shape = tuple(leaf.shape)
            if not shape or shape[0] != num_envs:
                raise ActionError(
                    f"{where}{path} has shape {shape!r}; expected the env dimension first: ({num_envs}, ...)."
                )
            tensor = not isinstance(leaf, np.ndarray)
            dtype = leaf_to_numpy(leaf[:0]).dtype if tensor else leaf.dtype
            if dtype.kind not in "biuf":
                raise ActionError(f"{where}{path} has dtype {dtype}; a state holds numbers (bool, int or float).")
            shapes.append(shape[1:])
            dtypes.append(dtype)
            tensors.append(tensor)
        flat_dict_keys = None
        if structure is not _LEAF and structure[0] is dict and all(child is _LEAF for child in structure[2]):
            flat_dict_keys = structure[1]
        return cls(structure, tuple(paths), tuple(shapes), tuple(dtypes), tuple(tensors), flat_dict_keys), leaves

    def flatten(self, state: Any, num_envs: int, where: str, reference: list[Any]) -> list[Any]:
        """The leaves of ``state``, which must have this nesting and, leaf by leaf, the type
        (array or tensor), shape and dtype of ``reference`` (a state of this tree)."""
        if self.structure is _LEAF:
            leaves = [state]
        elif self.flat_dict_keys is not None and type(state) is dict and tuple(state) == self.flat_dict_keys:
            # The common state, a dict of leaves: no walk.
            leaves = [state[key] for key in self.flat_dict_keys]
        else:
            leaves = []
            _flatten_as(self.structure, state, "", leaves, where)
        for path, leaf, expected in zip(self.paths, leaves, reference):
            is_array = isinstance(leaf, np.ndarray)
            if is_array != isinstance(expected, np.ndarray) or not (is_array or _is_tensor(leaf)):
                if not (is_array or _is_tensor(leaf)):
                    raise ActionError(
                        f"{where}{path} is a {type(leaf).__name__}; a state leaf must be a NumPy array or a PyTorch tensor."
                    )
                raise ActionError(
                    f"{where}{path} is a {type(leaf).__name__}; expected a {type(expected).__name__}, as in "
                    "`initial_state()`: keep each leaf's type from call to call."
                )
            if leaf.shape != expected.shape:
                raise ActionError(
                    f"{where}{path} has shape {tuple(leaf.shape)!r}; expected {tuple(expected.shape)!r} "
                    f"(the env dimension first, {num_envs} rows here, then the leaf's shape in `initial_state()`)."
                )
            if leaf.dtype != expected.dtype:
                raise ActionError(
                    f"{where}{path} has dtype {leaf.dtype}; expected {expected.dtype}, as in `initial_state()`: "
                    "keep each leaf's dtype from call to call."
                )
        return leaves

    def unflatten(self, leaves: list[Any]) -> Any:
        """The state of this nesting with ``leaves`` (any arrays) in place of its own."""
        if self.structure is _LEAF:
            return leaves[0]
        if self.flat_dict_keys is not None:
            return dict(zip(self.flat_dict_keys, leaves))
        return _build(self.structure, iter(leaves))

    def describe(self) -> str:
        """Each leaf's path, kind, shape after the env dimension and dtype, for error messages."""
        return ", ".join(
            f"state{path} {'tensor' if tensor else 'array'} (n, {', '.join(map(str, shape))}) {dtype}".replace("(n, )", "(n,)")
            for path, shape, dtype, tensor in zip(self.paths, self.leaf_shapes, self.leaf_dtypes, self.leaf_is_tensor)
        )

    def same_nesting(self, other: StateTree) -> bool:
        return (self.structure, self.paths, self.leaf_shapes, self.leaf_dtypes, self.leaf_is_tensor) == (
            other.structure, other.paths, other.leaf_shapes, other.leaf_dtypes, other.leaf_is_tensor,
        )


def _describe(value: Any, path: str, leaves: list, paths: list, where: str) -> Any:
    if isinstance(value, dict):
        keys = tuple(value)
        return (dict, keys, tuple(_describe(value[key], f"{path}[{key!r}]", leaves, paths, where) for key in keys))
    if isinstance(value, (tuple, list)):
        children = tuple(_describe(item, f"{path}[{index}]", leaves, paths, where) for index, item in enumerate(value))
        return (type(value), None, children)
    if isinstance(value, np.ndarray) or _is_tensor(value):
        leaves.append(value)
        paths.append(path)
        return _LEAF
    raise ActionError(
        f"{where}{path} is {type(value).__name__} {_short(value)}; a state is a dict, tuple or list of NumPy "
        "arrays or PyTorch tensors, each with the env dimension first."
    )


def _flatten_as(structure: Any, value: Any, path: str, leaves: list, where: str) -> None:
    if structure is _LEAF:
        leaves.append(value)
        return
    kind, keys, children = structure
    if kind is dict:
        if not isinstance(value, dict) or tuple(value) != keys:
            got = f"a dict with keys {list(value)!r}" if isinstance(value, dict) else f"a {type(value).__name__}"
            raise ActionError(f"{where}{path} is {got}; expected a dict with keys {list(keys)!r}, as in `initial_state()`.")
        for key, child in zip(keys, children):
            _flatten_as(child, value[key], f"{path}[{key!r}]", leaves, where)
        return
    if not isinstance(value, (tuple, list)) or len(value) != len(children):
        got = f"a {type(value).__name__} of {len(value)}" if isinstance(value, (tuple, list)) else f"a {type(value).__name__}"
        raise ActionError(
            f"{where}{path} is {got}; expected a {kind.__name__} of {len(children)}, as in `initial_state()`."
        )
    for index, (item, child) in enumerate(zip(value, children)):
        _flatten_as(child, item, f"{path}[{index}]", leaves, where)


def _build(structure: Any, leaves) -> Any:
    if structure is _LEAF:
        return next(leaves)
    kind, keys, children = structure
    if kind is dict:
        return {key: _build(child, leaves) for key, child in zip(keys, children)}
    items = [_build(child, leaves) for child in children]
    if kind is list:
        return items
    if kind is tuple:
        return tuple(items)
    # A named tuple (or another tuple or list type): rebuilt as its own type.
    return kind._make(items) if hasattr(kind, "_make") else kind(items)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
