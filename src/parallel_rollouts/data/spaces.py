"""Gymnasium space -> fixed-shape storage layout.

A space becomes a list of *leaves*, one per Box / Discrete / MultiDiscrete /
MultiBinary found in it, in a fixed depth-first order (Dict keys in the space's
own order, Tuple entries by position). Storage holds one array per leaf with
leading dims ``[rows, env]``; :meth:`SpaceLayout.unflatten` rebuilds the same
nesting of dicts and tuples the space has, so a batch mirrors the space.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

from ..errors import SpaceError

__all__ = ["Leaf", "SpaceLayout"]

_LEAF_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


@dataclass(frozen=True)
class Leaf:
    """One fixed-shape array inside a (possibly nested) space."""

    path: tuple[Any, ...]
    space: spaces.Space
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def name(self) -> str:
        """The leaf's path as it is written in error messages, e.g. ``"['camera'][0]"``."""
        return "".join(f"[{part!r}]" for part in self.path) or "<root>"


def _collect_leaves(space: spaces.Space, path: tuple[Any, ...], leaves: list[Leaf]) -> None:
    if isinstance(space, _LEAF_SPACES):
        shape = tuple(space.shape)
        if 0 in shape:
            where = "".join(f"[{part!r}]" for part in path)
            raise SpaceError(
                f"{space!r}{' at ' + where if where else ''} has shape {shape!r}, which holds no values; "
                "give it at least one element, or leave it out of the space."
            )
        leaves.append(Leaf(path, space, shape, np.dtype(space.dtype)))
    elif isinstance(space, spaces.Dict):
        for key, subspace in space.spaces.items():
            _collect_leaves(subspace, path + (key,), leaves)
    elif isinstance(space, spaces.Tuple):
        for index, subspace in enumerate(space.spaces):
            _collect_leaves(subspace, path + (index,), leaves)
    else:
        where = "".join(f"[{part!r}]" for part in path)
        raise SpaceError(
            f"{type(space).__name__} spaces are not supported{' at ' + where if where else ''}: "
            "storage must have a fixed shape. Supported: Box, Discrete, MultiDiscrete, "
            f"MultiBinary, and Dict/Tuple nestings of them.{_unsupported_leaf_fix(space, path)}"
        )


def _unsupported_leaf_fix(space: spaces.Space, path: tuple[Any, ...]) -> str:
    """How to get rid of an unsupported entry: drop its key, or (MiniGrid's mission text) keep only the image."""
    if not path or not isinstance(path[0], str):
        return ""
    fix = (
        f" Drop that entry with a wrapper: gymnasium.wrappers.FilterObservation(env, filter_keys=[...]) listing "
        f"the keys to keep (all but {path[0]!r})"
    )
    if type(space).__name__ == "MissionSpace":
        fix += ", or keep only the image with minigrid.wrappers.ImgObsWrapper(env)"
    return fix + "."


class SpaceLayout:
    """The leaves of a space and how to move between nested values and leaf lists."""

    def __init__(self, space: spaces.Space, role: str) -> None:
        if not isinstance(space, spaces.Space):
            raise SpaceError(f"the {role} space must be a gymnasium.spaces.Space; got {space!r}.")
        self.space = space
        self.role = role
        leaves: list[Leaf] = []
        try:
            _collect_leaves(space, (), leaves)
        except SpaceError as error:
            raise SpaceError(f"the {role} space is not storable: {error}") from None
        if not leaves:
            raise SpaceError(f"the {role} space {space!r} contains no Box/Discrete/MultiDiscrete/MultiBinary.")
        self.leaves: tuple[Leaf, ...] = tuple(leaves)
        self.is_nested = not isinstance(space, _LEAF_SPACES)
        self.flatten: Callable[[Any], list] = self._build_flattener(space)
        self._bounds = [_leaf_bounds(leaf) for leaf in self.leaves]

    # -- nested value <-> list of leaf values -------------------------------------------------

    def _build_flattener(self, space: spaces.Space) -> Callable[[Any], list]:
        """Return a function taking one nested value to the list of its leaf values."""
        if not self.is_nested:
            return lambda value: [value]
        paths = [leaf.path for leaf in self.leaves]
        role = self.role

        def flatten(value: Any) -> list:
            values = []
            for path in paths:
                node = value
                for part in path:
                    try:
                        node = node[part]
                    except (KeyError, IndexError, TypeError) as error:
                        where = "".join(f"[{p!r}]" for p in path)
                        raise SpaceError(
                            f"the {role} value has no entry {where} that the {role} space declares "
                            f"({type(error).__name__}: {error})."
                        ) from None
                values.append(node)
            return values

        return flatten

    def unflatten(self, leaf_values: list) -> Any:
        """Rebuild the space's nesting from one value per leaf."""
        if not self.is_nested:
            return leaf_values[0]
        iterator = iter(leaf_values)
        return self._rebuild(self.space, iterator)

    def _rebuild(self, space: spaces.Space, iterator) -> Any:
        if isinstance(space, spaces.Dict):
            return {key: self._rebuild(subspace, iterator) for key, subspace in space.spaces.items()}
        if isinstance(space, spaces.Tuple):
            return tuple(self._rebuild(subspace, iterator) for subspace in space.spaces)
        return next(iterator)

    # -- storage ---------------------------------------------------------------------------

    def allocate(self, leading: tuple[int, ...], allocator: Callable = np.empty) -> list[np.ndarray]:
        """One array per leaf of shape ``leading + leaf.shape``."""
        return [allocator(leading + leaf.shape, dtype=leaf.dtype) for leaf in self.leaves]

    # -- validation ----------------------------------------------------------------------

    def bounds(self, leaf_index: int) -> tuple[np.ndarray, np.ndarray]:
        """Inclusive ``(low, high)`` of every element of the leaf, flat float64 arrays.

        The per-step cores check values against these
        (``core.find_out_of_bounds``); NaN is always outside.
        """
        return self._bounds[leaf_index]

    def covers_whole_dtype(self, leaf_index: int) -> bool:
        """True when no value of the leaf's dtype can fall outside the leaf (no check needed)."""
        leaf = self.leaves[leaf_index]
        if not isinstance(leaf.space, spaces.Box) or leaf.dtype.kind not in "ui":
            return False
        info = np.iinfo(leaf.dtype)
        return bool(np.all(leaf.space.low <= info.min) and np.all(leaf.space.high >= info.max))


def _leaf_bounds(leaf: Leaf) -> tuple[np.ndarray, np.ndarray]:
    space = leaf.space
    size = int(np.prod(leaf.shape, dtype=np.int64))
    if isinstance(space, spaces.Box):
        low, high = space.low, space.high
    elif isinstance(space, spaces.Discrete):
        low, high = space.start, space.start + space.n - 1
    elif isinstance(space, spaces.MultiDiscrete):
        low, high = space.start, space.start + space.nvec - 1
    else:  # MultiBinary
        low, high = 0, 1
    low = np.ascontiguousarray(np.broadcast_to(np.asarray(low, dtype=np.float64), leaf.shape)).reshape(size)
    high = np.ascontiguousarray(np.broadcast_to(np.asarray(high, dtype=np.float64), leaf.shape)).reshape(size)
    return low, high


def _same_space(reference: spaces.Space, other: spaces.Space) -> bool:
    """Space equality that tolerates NumPy's array-valued attributes."""
    try:
        return bool(reference == other)
    except ValueError:
        return False


def check_env_spaces(
    env_index: int,
    observation_space: spaces.Space,
    action_space: spaces.Space,
    reference_observation_space: spaces.Space,
    reference_action_space: spaces.Space,
) -> None:
    """Raise :class:`SpaceError` unless env ``env_index`` declares the reference (env 0's) spaces."""
    for role, space, reference in (
        ("observation", observation_space, reference_observation_space),
        ("action", action_space, reference_action_space),
    ):
        if not _same_space(reference, space):
            raise SpaceError(
                f"env {env_index} declares the {role} space {space!r}, but env 0 declares "
                f"{reference!r}; every env must declare the same spaces."
            )

