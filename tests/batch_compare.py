"""Bit-for-bit comparison of two RolloutBatch objects."""

from __future__ import annotations

import dataclasses

import numpy as np

from parallel_rollouts import RolloutBatch
from parallel_rollouts.data.batch import TIMING_FIELDS


def _leaves(value, path=""):
    if isinstance(value, dict):
        for key in value:
            yield from _leaves(value[key], f"{path}[{key!r}]")
    elif isinstance(value, (tuple, list)):
        for index, item in enumerate(value):
            yield from _leaves(item, f"{path}[{index}]")
    else:
        yield path, value


def assert_batches_identical(first: RolloutBatch, second: RolloutBatch) -> None:
    """Every field equal in value, dtype, shape and nesting (NaN equal to NaN); the clock's
    fields in dtype and shape only."""
    for field in dataclasses.fields(RolloutBatch):
        a, b = getattr(first, field.name), getattr(second, field.name)
        if field.name in TIMING_FIELDS:
            assert a.dtype == b.dtype == np.float64 and a.shape == b.shape == (first.num_columns,), field.name
            continue
        if a is None or b is None:
            assert a is None and b is None, f"{field.name}: {a!r} vs {b!r}"
            continue
        if isinstance(a, (int, str)) or field.name == "column_agents":  # column_agents: a tuple of names
            assert a == b, f"{field.name}: {a!r} != {b!r}"
            continue
        if field.name == "infos":
            assert a.keys() == b.keys(), f"infos keys {a.keys()} != {b.keys()}"
        leaves_a, leaves_b = list(_leaves(a)), list(_leaves(b))
        assert [p for p, _ in leaves_a] == [p for p, _ in leaves_b], f"{field.name}: nesting differs"
        for (path, x), (_, y) in zip(leaves_a, leaves_b):
            assert isinstance(x, np.ndarray) and isinstance(y, np.ndarray), f"{field.name}{path} is not an array"
            assert x.dtype == y.dtype, f"{field.name}{path}: dtype {x.dtype} != {y.dtype}"
            assert x.shape == y.shape, f"{field.name}{path}: shape {x.shape} != {y.shape}"
            assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), f"{field.name}{path}: values differ"
