"""The one rule for storing an env's observation in a leaf of another dtype.

:data:`CONVERSION_RULE` says the rule in the words ``check`` reports and the docs
quote. A conversion into a float leaf may round (float64 into float32, as
Gymnasium allows; :func:`may_round` says when) but never changes a value in any
other way: a float never goes into an integer or bool leaf, and an integer goes
into an integer leaf only when it fits. Both cores
take every observation that is not already an exact row (same dtype, same
shape, C-contiguous) through :func:`convert_row`; when it refuses a value,
:func:`explain_rejected_row` says why, for the error message. Sources that hand
over whole batches (a vector env's observations, rewards and end flags) store
them with :func:`store_rows`, under the same rule.

Actions are stricter by default: a float action for an integer leaf is refused
(a policy that returns floats for a ``Discrete`` space has usually lost its
``argmax`` or its sampling). A front door that must take floats that stand for
integers, as Stable-Baselines3's ``DummyVecEnv`` does for a ``MultiBinary``
space, converts them with :func:`whole_floats_as`: every value a whole number
that fits the leaf's dtype, so that the conversion changes no value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "CONVERSION_RULE", "conversion_effect", "convert_row", "explain_rejected_row", "may_round", "store_rows",
    "whole_floats_as",
]

_NUMERIC_KINDS = "biuf"

#: The rule for an observation whose dtype is not its space's, as ``check`` reports it and the docs
#: quote it (a test keeps the two equal).
CONVERSION_RULE = (
    "the collector stores an observation of another dtype as the space's dtype: into a float leaf any "
    "number, rounded to the leaf's precision (float64 into float32, or an integer of more digits than the "
    "float holds, may change values), into an integer or bool leaf an integer only when it fits, and a float "
    "never; a conversion that may round is warned about once per env and leaf (ObservationRoundingWarning)"
)


def may_round(source: np.dtype, target: np.dtype) -> bool:
    """Whether storing values of dtype ``source`` into a leaf of dtype ``target`` can change one.

    Only a float leaf takes values that it may not hold exactly: a float of more
    precision or range (float64 into float32), or an integer with more bits than
    the float's mantissa (int32 into float32, int64 into float64). An integer
    leaf takes only integers that fit, which it holds exactly.
    """
    source, target = np.dtype(source), np.dtype(target)
    if target.kind != "f" or source == target:
        return False
    if source.kind == "f":
        return not np.can_cast(source, target, casting="safe")
    if source.kind in "iu":
        value_bits = source.itemsize * 8 - (1 if source.kind == "i" else 0)
        return value_bits > np.finfo(target).nmant + 1
    return False  # bool: 0 and 1


def conversion_effect(source: np.dtype, target: np.dtype) -> str:
    """What the collector does with values of dtype ``source`` for a leaf of dtype ``target``, in words."""
    source, target = np.dtype(source), np.dtype(target)
    if source == target:
        return f"stored as {target}"
    if target.kind == "f":
        if may_round(source, target):
            return f"stored as {target}, rounded to its precision: values may change"
        return f"stored as {target} without change"
    if source.kind == "f":
        return f"refused: a float is never stored into a {target} leaf"
    return f"stored as {target} when each value fits, refused otherwise"


def _as_array(source: Any) -> np.ndarray | None:
    try:
        return np.asarray(source)
    except (ValueError, TypeError):  # ragged nesting, objects NumPy cannot hold
        return None


def _integers_fit(array: np.ndarray, dtype: np.dtype) -> bool:
    if np.can_cast(array.dtype, dtype, casting="safe") or array.size == 0:
        return True
    if dtype.kind == "b":
        return bool(((array == 0) | (array == 1)).all())
    info = np.iinfo(dtype)
    return int(array.min()) >= info.min and int(array.max()) <= info.max


def convert_row(source: Any, row_shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:
    """``source`` as an array of ``row_shape`` that can be stored as ``dtype`` without change, else ``None``.

    The array returned may still have another dtype; NumPy assignment into the
    storage does the (now value-preserving, up to float rounding) cast.
    """
    array = _as_array(source)
    if array is None or array.shape != row_shape or array.dtype.kind not in _NUMERIC_KINDS:
        return None
    if array.dtype == dtype:
        return array
    source_kind, target_kind = array.dtype.kind, dtype.kind
    if target_kind == "f":
        return array
    if source_kind == "f":
        return None
    return array if _integers_fit(array, dtype) else None


def store_rows(target: np.ndarray, source: Any) -> int:
    """Store ``source`` into ``target`` (``[n, *row_shape]``) under the rule of :func:`convert_row`.

    Returns ``-1`` when every row was stored. Otherwise nothing is stored and
    the index of the first row the rule refuses is returned (``0`` when
    ``source`` as a whole has the wrong shape or cannot be made an array), for
    the caller to name that env.
    """
    array = convert_row(source, target.shape, target.dtype)
    if array is not None:
        target[...] = array
        return -1
    array = _as_array(source)
    if array is None or array.shape != target.shape:
        return 0
    row_shape = target.shape[1:]
    for index in range(target.shape[0]):
        if convert_row(array[index], row_shape, target.dtype) is None:
            return index
    return 0  # not reached: a block is refused only for a row it refuses


def explain_rejected_row(source: Any, row_shape: tuple[int, ...], dtype: np.dtype) -> str:
    """Why :func:`convert_row` refused ``source``: what was expected, what was received."""
    array = _as_array(source)
    if array is None:
        return (
            f"a value NumPy cannot turn into one array ({type(source).__name__} {source!r}); "
            f"expected shape {row_shape!r} of numbers"
        )
    if array.shape != row_shape:
        return f"shape {array.shape!r} (dtype {array.dtype}); expected shape {row_shape!r} (dtype {dtype})"
    if array.dtype.kind not in _NUMERIC_KINDS:
        return (
            f"non-numeric elements (dtype {array.dtype}, e.g. {array.reshape(-1)[:1].tolist()!r}); "
            f"expected numbers storable as {dtype}"
        )
    if array.dtype.kind == "f":
        return (
            f"floats (dtype {array.dtype}) for an integer leaf of dtype {dtype}: storing them would "
            "truncate them. Return integers (e.g. images scaled to 0..255 and cast with "
            f"`.astype(np.{dtype})`) or declare a float Box"
        )
    flat = array.reshape(-1)
    if dtype.kind == "b":
        bad = flat[(flat != 0) & (flat != 1)]
        return f"integer {bad[0].item()!r} for a bool leaf; only 0 and 1 are stored unchanged"
    info = np.iinfo(dtype)
    bad = flat[(flat < info.min) | (flat > info.max)]
    return (
        f"integer {bad[0].item()!r} (dtype {array.dtype}), which does not fit the leaf's dtype "
        f"{dtype} (range {info.min}..{info.max}); storing it would change it"
    )


def whole_floats_as(array: np.ndarray, dtype: np.dtype) -> np.ndarray | None:
    """A float ``array`` as integer ``dtype`` when every value is a whole number that fits it, else ``None``.

    ``0.0`` and ``1.0`` become ``0`` and ``1``; ``0.5``, ``1.5``, NaN, an infinity or a
    value past the dtype's range give ``None``, for the caller's check to refuse.
    """
    dtype = np.dtype(dtype)
    if array.dtype.kind != "f" or dtype.kind not in "iub":
        return None
    if array.size == 0:
        return array.astype(dtype)
    if not (np.isfinite(array).all() and (np.mod(array, 1) == 0).all()):
        return None
    if dtype.kind == "b":
        return array.astype(dtype) if bool(((array == 0) | (array == 1)).all()) else None
    info = np.iinfo(dtype)
    if array.min() < info.min or array.max() > info.max:
        return None
    return array.astype(dtype)
