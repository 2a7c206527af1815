"""Stable-Baselines3's per-env actions for Dict and Tuple action spaces, as one batch.

SB3's vec envs take ``actions[i]`` as env ``i``'s action whatever the space:
``DummyVecEnv`` indexes the batch by env, ``SubprocVecEnv`` zips it with its
workers. For a Box or Discrete space that is also the batched array
:class:`~parallel_rollouts.ParallelVectorEnv` takes; for a Dict or Tuple space
it is a list of per-env dicts or tuples (what ``[action_space.sample() for _ in
range(n)]`` gives), which this module stacks leaf by leaf into the batched
structure (a dict or tuple of ``[num_envs, ...]`` arrays). The values are
stacked without casting, so the action check that follows still sees a float
where an integer belongs, and refuses it.

SB3's policies for a ``MultiBinary`` space sample from a Bernoulli distribution
and hand over float32 actions that are exactly ``0.0`` or ``1.0``, which
``DummyVecEnv`` passes to the env. :func:`whole_float_actions` takes such
floats as the integers they are (the conversion rule's
:func:`~parallel_rollouts.checks.conversion.whole_floats_as`: no value
changes); a float that is not a whole number (``0.5``, ``1.5``) is left as it
is, for the action check to refuse with the env's index.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces

from ..checks.actions import to_numpy
from ..checks.conversion import whole_floats_as
from ..errors import ActionError, SpaceError
from ..data.spaces import SpaceLayout

__all__ = ["batch_per_env_actions", "whole_float_actions"]


def batch_per_env_actions(layout: SpaceLayout, actions: Any, num_envs: int) -> Any:
    """``actions`` as one batched structure if it holds one Dict/Tuple action per env; else unchanged.

    A dict for a Dict space is taken to be batched already (SB3 could not index
    it by env), as is anything that is not a sequence of ``num_envs`` dicts
    (Dict space) or tuples/lists (Tuple space).
    """
    if not layout.is_nested or not _holds_one_action_per_env(layout.space, actions, num_envs):
        return actions
    rows = []
    for index, action in enumerate(actions):
        try:
            rows.append(layout.flatten(action))
        except SpaceError as error:
            raise ActionError(f"the action of env {index} does not match the action space: {error}") from None
    batched = []
    for leaf, values in zip(layout.leaves, zip(*rows)):
        arrays = [np.asarray(to_numpy(value)) for value in values]
        for index, array in enumerate(arrays):
            if array.shape != leaf.shape:
                raise ActionError(
                    f"the action of env {index} at {leaf.name} has shape {array.shape!r}; the action space "
                    f"{leaf.space!r} needs {leaf.shape!r}."
                )
        batched.append(np.stack(arrays))
    return layout.unflatten(batched)


def _holds_one_action_per_env(space: spaces.Space, actions: Any, num_envs: int) -> bool:
    if not isinstance(actions, (list, tuple, np.ndarray)) or len(actions) != num_envs:
        return False
    if isinstance(space, spaces.Dict):
        return all(isinstance(action, Mapping) for action in actions)
    # A batched Tuple action holds arrays at its top level, never tuples.
    return all(isinstance(action, (tuple, list)) for action in actions)


def whole_float_actions(layout: SpaceLayout, actions: Any) -> Any:
    """``actions`` with every float leaf of whole numbers for an integer leaf turned into that leaf's dtype.

    Anything else is returned as it was given, for the action check to judge.
    """
    integer_leaves = [leaf.dtype.kind in "iub" for leaf in layout.leaves]
    if not any(integer_leaves):
        return actions
    if not layout.is_nested:
        return _whole_floats_or_as_given(actions, layout.leaves[0].dtype)
    try:
        values = layout.flatten(actions)
    except SpaceError:
        return actions  # the action check says what does not match
    converted = [
        _whole_floats_or_as_given(value, leaf.dtype) if integer else value
        for leaf, integer, value in zip(layout.leaves, integer_leaves, values)
    ]
    return layout.unflatten(converted)


def _whole_floats_or_as_given(value: Any, dtype: np.dtype) -> Any:
    array = to_numpy(value)
    if not isinstance(array, np.ndarray) or array.dtype.kind != "f":
        return value
    converted = whole_floats_as(array, dtype)
    return value if converted is None else converted
