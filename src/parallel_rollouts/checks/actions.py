"""The one rule deciding whether a batch of actions fits an action space.

Both front ends check actions with :class:`ActionBatchChecker` before anything
is written or stepped: the collector (the policy's actions) and
:class:`~parallel_rollouts.ParallelVectorEnv` (the user's ``step`` argument).
Per leaf of the space, the batch must

- have shape ``[num_envs] + the leaf's shape``;
- have integer (or bool) values when the leaf holds integers (``Discrete``,
  ``MultiDiscrete``, ``MultiBinary``, an integer ``Box``), and a numeric dtype
  otherwise;
- lie within the leaf's inclusive bounds (``Discrete``'s ``start .. start + n - 1``,
  a ``Box``'s ``low``/``high``, which for an integer ``Box`` lie within its dtype);
  NaN is never inside.

The one choice a front end makes is ``float_box_bounds``: the collector refuses
a float ``Box`` action outside ``low``/``high`` (it is stored in the batch and
trained on), while a Gymnasium vector env hands it to the env as
``SyncVectorEnv`` does, leaving clipping to the env; NaN is refused by both.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np
from gymnasium import spaces

from ..errors import ActionError, SpaceError
from ..data.spaces import SpaceLayout

__all__ = ["ActionBatchChecker", "as_action_array", "to_numpy"]

_FLOAT_BOX_BOUNDS = ("enforce", "pass")


def to_numpy(value: Any) -> Any:
    """Turn a PyTorch tensor (on any device) into a NumPy array; pass anything else through.

    ``bfloat16``, which NumPy lacks, becomes float32 (exactly). A tensor on the
    ``meta`` device holds no values and raises :class:`ActionError`.
    """
    if not (type(value).__module__.startswith("torch") and hasattr(value, "detach")):
        return value
    tensor = value.detach()
    if tensor.device.type == "meta":
        raise ActionError(
            "the policy returned a tensor on the 'meta' device, which holds shapes but no values; "
            "compute the output on a real device (e.g. 'cpu' or 'cuda')."
        )
    if str(tensor.dtype) == "torch.bfloat16":
        tensor = tensor.float()
    try:
        return tensor.cpu().numpy()
    except TypeError as error:
        raise ActionError(
            f"the policy returned a tensor of dtype {tensor.dtype}, which NumPy cannot hold ({error}); "
            "convert it (e.g. `.float()` or `.long()`)."
        ) from None


def as_action_array(value: Any, field: str, expected: str) -> np.ndarray:
    """``value`` as a NumPy array (a PyTorch tensor on any device included), or :class:`ActionError`."""
    try:
        return np.asarray(to_numpy(value))
    except ActionError as error:
        raise ActionError(f"{field}: {error}") from None
    except (ValueError, TypeError) as error:
        raise ActionError(
            f"{field} cannot be made into one array ({type(value).__name__}: {error}); "
            f"give an array of shape {expected}, not a ragged or mixed nesting of lists."
        ) from None


class ActionBatchChecker:
    """Checks one step's actions for ``num_envs`` envs; returns one array per leaf, unconverted.

    ``source`` starts every message (``"the policy's"``, ``"the"``).
    ``float_box_bounds`` is ``"enforce"`` (a float ``Box`` action must lie
    within ``low``/``high``) or ``"pass"`` (any float but NaN is accepted, as
    Gymnasium's vector envs accept it). The arrays returned keep the dtype they
    were given: converting them is the caller's choice.
    """

    def __init__(
        self,
        layout: SpaceLayout,
        num_envs: int,
        core: ModuleType,
        source: str,
        float_box_bounds: str = "enforce",
        column_agents: Sequence = (),
        first_env: int = 0,
    ) -> None:
        if float_box_bounds not in _FLOAT_BOX_BOUNDS:
            raise ValueError(f"`float_box_bounds` must be one of {_FLOAT_BOX_BOUNDS!r}; got {float_box_bounds!r}.")
        self._layout = layout
        self._num_envs = num_envs
        self._core = core
        self._source = source
        # The agent behind each row, for multi-agent envs (messages name it beside the env), and
        # the batch column of row 0 (a slice's rows are named by their columns in the batch).
        self._column_agents = tuple(column_agents)
        self._first_env = first_env
        # What each leaf's check needs, worked out once rather than per step.
        self._leaf_checks: list = []
        for leaf_index, leaf in enumerate(layout.leaves):
            low, high = layout.bounds(leaf_index)
            passes_float_bounds = isinstance(leaf.space, spaces.Box) and leaf.dtype.kind == "f"
            if float_box_bounds == "pass" and passes_float_bounds:
                # Unbounded, NaN still outside: find_out_of_bounds then finds only NaN.
                low, high = np.full_like(low, -np.inf), np.full_like(high, np.inf)
            where = f" at {leaf.name}" if layout.is_nested else ""
            self._leaf_checks.append((leaf, where, (num_envs,) + leaf.shape, (low, high)))
        # The common case, checked without the general path: one leaf, and the policy
        # returns a NumPy array of the right shape with a dtype the leaf takes as it is.
        self._single_leaf = None
        if not layout.is_nested:
            leaf, _, expected_shape, (low, high) = self._leaf_checks[0]
            kinds = "iub" if leaf.dtype.kind in "iub" else "iubf"
            self._single_leaf = (expected_shape, kinds, low, high)

    def check(self, actions: Any) -> list[np.ndarray]:
        """One array per leaf of shape ``[num_envs] + leaf shape``, or :class:`ActionError` naming the culprit."""
        single = self._single_leaf
        if single is not None and type(actions) is np.ndarray:
            expected_shape, kinds, low, high = single
            if actions.shape == expected_shape and actions.dtype.kind in kinds:
                if self._core.find_out_of_bounds(actions, low, high) < 0:
                    return [actions]
        return self._check_general(actions)

    def _check_general(self, actions: Any) -> list[np.ndarray]:
        source = self._source
        try:
            leaf_values = self._layout.flatten(actions)
        except SpaceError as error:
            raise ActionError(f"{source} actions do not match the action space: {error}") from None
        checked = []
        for (leaf, where, expected_shape, (low, high)), value in zip(self._leaf_checks, leaf_values):
            array = as_action_array(value, f"{source} actions{where}", repr(expected_shape))
            if array.shape != expected_shape:
                raise ActionError(
                    f"{source} actions{where} have shape {array.shape!r}; expected "
                    f"{expected_shape!r} ([num_envs={self._num_envs}] + the action space's shape "
                    f"{leaf.shape!r})."
                )
            if leaf.dtype.kind in "iub" and array.dtype.kind not in "iub":
                env = _first_non_integer_row(array)
                raise ActionError(
                    f"{source} actions{where} have dtype {array.dtype}; the action space "
                    f"{leaf.space!r} needs integers ({self._env_name(env)} got {array[env].tolist()!r}). "
                    "Convert them (e.g. `.astype(np.int64)`)."
                )
            if array.dtype.kind not in "iubf":
                raise ActionError(
                    f"{source} actions{where} have dtype {array.dtype}; expected a numeric dtype "
                    f"convertible to {leaf.dtype}."
                )
            env = self._core.find_out_of_bounds(array, low, high)
            if env >= 0:
                hint = " Clip continuous actions to the space's bounds." if isinstance(leaf.space, spaces.Box) else ""
                if np.isinf(high).all():
                    hint = " NaN is no action; find where it came from."
                raise ActionError(
                    f"{source} action{where} for {self._env_name(env)} is outside the action space "
                    f"{leaf.space!r}: got {array[env].tolist()!r}.{hint}"
                )
            checked.append(array)
        return checked

    def _env_name(self, env: int) -> str:
        return _named_env(env, self._column_agents, self._first_env)


def _named_env(row: int, column_agents: tuple, first_env: int) -> str:
    agent = column_agents[row] if row < len(column_agents) else None
    env = first_env + row
    return f"env {env}" if agent is None else f"env {env} (agent {agent!r})"


def _first_non_integer_row(array: np.ndarray) -> int:
    """The first env whose action is not a whole number (env 0 when every one is): the one to name."""
    try:
        flat = array.reshape(array.shape[0], -1)
        whole = np.isfinite(flat) & (np.mod(flat, 1) == 0)
    except TypeError:
        return 0
    rows = np.flatnonzero(~whole.all(axis=1))
    return int(rows[0]) if rows.size else 0
