"""Grouping values that compare alike by a test of the caller's, where they cannot be hashed.

Spaces and reset-option dicts (which may hold arrays) have no hash that agrees with the
equality that matters, so they are grouped by comparing each with the first of every group.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

__all__ = ["group_alike"]

Value = TypeVar("Value")


def group_alike(keyed: Iterable[tuple[Any, Value]], same: Callable[[Value, Value], bool]) -> list[tuple[Value, list]]:
    """The ``(key, value)`` pairs grouped by ``same``: for each group, in the order first seen, its
    first value and the keys of its members in order."""
    groups: list[tuple[Value, list]] = []
    for key, value in keyed:
        for reference, keys in groups:
            if same(reference, value):
                keys.append(key)
                break
        else:
            groups.append((value, [key]))
    return groups
