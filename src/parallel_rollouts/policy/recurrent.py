"""Recurrent policies: the state each env's policy carries from row to row, owned by the loop.

A policy is recurrent when it has a callable ``initial_state(num_envs)``. The loop then calls
it as ``policy(observations, state, episode_starts)`` and expects ``(output, next_state)``.
:class:`StateCarrier` keeps the state of the loop's envs between rows and between collects,
resets an env's rows to the initial state before the policy sees the first row of an episode,
checks every state the policy returns, and records what the batch holds of it
(:class:`~parallel_rollouts.data.recurrent_record.RecurrentRecord`).

An episode starts at row ``t`` of an env when its episode ended at row ``t - 1``
(``terminations | truncations``), when row ``t - 1`` was not valid (``reset_steps``: a reset
step of a next-step vector env, or a row where a multi-agent env's agent was not live), at the
very first row, and at the first row after the env's worker was
replaced. Everything this needs is in the storage when the policy is called, whichever
backend steps the envs, so every backend resets the same rows.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from ..data.recurrent_record import RecurrentRecord
from ..data.state_tree import StateTree, leaf_to_numpy
from ..data.storage import RolloutStorage
from ..errors import ActionError

__all__ = ["RecurrentPolicy", "StateCarrier", "is_recurrent"]


def _own_copy(leaf: Any) -> Any:
    """A copy of a state leaf that shares no memory with it (a tensor: on its device, no graph)."""
    return leaf.copy() if isinstance(leaf, np.ndarray) else leaf.detach().clone()


def is_recurrent(policy: Any) -> bool:
    """Whether ``policy`` declares a state: it has a callable ``initial_state`` attribute."""
    return policy is not None and callable(getattr(policy, "initial_state", None))


class RecurrentPolicy:
    """A recurrent policy made of two plain functions.

    ``step(observations, state, episode_starts) -> (output, next_state)``: ``observations``
    as a feed-forward policy gets them (``[n, ...]`` for the ``n`` envs of this call),
    ``state`` a nested dict / tuple / list of NumPy arrays or PyTorch tensors, each ``[n, ...]``,
    already reset to the initial state for the envs whose episode starts at this row,
    ``episode_starts`` a bool NumPy array ``[n]`` saying which those are (for information).
    ``output`` is what a feed-forward policy returns (the actions, or a
    :class:`~parallel_rollouts.PolicyOutput`); ``next_state`` has the nesting, leaf types,
    shapes and dtypes of ``state``.

    ``initial_state(num_envs)`` returns the state of ``num_envs`` envs at an episode start.
    It is called once per ``collect()`` with the number of envs of each policy call's slice
    (all envs, or a worker's, actor's or pipelined half's).

    Any object with a callable ``initial_state`` attribute and that call signature is a
    recurrent policy too (a ``torch.nn.Module`` with an ``initial_state`` method); this
    wrapper is for functions. To run in rollout workers or Ray actors it must pickle
    (top-level functions, or cloudpickle-able closures).

    >>> import numpy as np
    >>> def step(observations, state, episode_starts):
    ...     count = state["count"] + 1
    ...     return np.zeros(len(observations), dtype=np.int64), {"count": count}
    >>> policy = RecurrentPolicy(step, lambda n: {"count": np.zeros(n, dtype=np.int64)})
    >>> policy.initial_state(3)["count"].shape
    (3,)
    """

    def __init__(self, step: Callable[[Any, Any, np.ndarray], Any], initial_state: Callable[[int], Any]) -> None:
        if not callable(step):
            raise TypeError(f"`step` must be callable; got {step!r}.")
        if not callable(initial_state):
            raise TypeError(f"`initial_state` must be callable (num_envs -> state); got {initial_state!r}.")
        self.step = step
        self._initial_state = initial_state

    def initial_state(self, num_envs: int) -> Any:
        return self._initial_state(num_envs)

    def __call__(self, observations: Any, state: Any, episode_starts: np.ndarray) -> Any:
        return self.step(observations, state, episode_starts)

    def __repr__(self) -> str:
        return f"RecurrentPolicy({self.step!r}, {self._initial_state!r})"


class StateCarrier:
    """The state of envs ``env_start .. env_start + num_envs - 1`` across rows and collects.

    Per rollout: :meth:`begin`, then for each row ``t`` :meth:`call` (which first settles row
    ``t - 1``: final states, resets for row ``t``), then :meth:`finish` for the record. A rollout
    dropped part-way leaves the carrier at the row the policy failed at, already reset, which
    is where the next rollout starts.
    """

    def __init__(self, num_envs: int, env_start: int, store_states: bool) -> None:
        self._num_envs = num_envs
        self._where = f"envs {env_start}..{env_start + num_envs - 1}"
        self._store_states = store_states
        self._tree: StateTree | None = None
        #: The state for the next row to run (already reset), as the policy returned it.
        self._leaves: list[Any] | None = None
        #: Which envs start an episode at that row.
        self._row_starts = np.ones(num_envs, dtype=np.bool_)
        #: The state the policy returned at the last row called.
        self._next: list[Any] | None = None
        #: The row of the last call that returned (``-1``: none in this rollout).
        self._called_row = -1
        self._initial: list[Any] = []
        self._fresh = np.zeros(num_envs, dtype=np.bool_)
        self._has_tensors = False
        self._record: RecurrentRecord | None = None
        self._storage: RolloutStorage | None = None

    def restart(self, env_indices) -> None:
        """These envs (indices within this carrier) restart fresh episodes at the next rollout's row 0
        (their worker was replaced)."""
        self._fresh[np.asarray(env_indices, dtype=np.int64)] = True

    def begin(self, policy: Any, storage: RolloutStorage) -> None:
        """Start a rollout into ``storage`` (this carrier's columns) with ``policy``'s initial state."""
        where = f"the policy's `initial_state({self._num_envs})` for {self._where}: the state"
        tree, initial = StateTree.of(policy.initial_state(self._num_envs), self._num_envs, where)
        if self._tree is not None and not tree.same_nesting(self._tree):
            raise ActionError(
                f"the policy's `initial_state({self._num_envs})` for {self._where} changed its nesting, leaf "
                f"shapes or dtypes from [{self._tree.describe()}] to [{tree.describe()}]; the state carried "
                "between collects must keep them."
            )
        # The carrier's own copy, without a learned initial state's graph: neither a policy that
        # changes the state it is handed in place nor an optimizer stepping the parameter in
        # place reaches the initial state of this collect's later episode starts.
        self._tree, self._initial = tree, [_own_copy(leaf) for leaf in initial]
        self._has_tensors = any(tree.leaf_is_tensor)
        horizon = storage.horizon
        if self._leaves is None:
            self._leaves = [_own_copy(leaf) for leaf in self._initial]
            self._row_starts = np.ones(self._num_envs, dtype=np.bool_)
            self._fresh[:] = False
        else:
            # Envs whose episode starts at row 0 (it ended at the last collect's last row, or
            # their worker was replaced) take this collect's initial state, which a learned
            # initial state may have changed since.
            self._row_starts = self._row_starts | self._fresh
            self._fresh = np.zeros(self._num_envs, dtype=np.bool_)
            if np.count_nonzero(self._row_starts):
                self._leaves = self._reset(self._leaves, self._row_starts)
        n = self._num_envs
        self._storage = storage
        self._next = None
        self._called_row = -1
        self._record = RecurrentRecord(
            tree=tree,
            initial_state=[leaf_to_numpy(leaf) for leaf in self._leaves],
            episode_starts=np.empty((horizon, n), dtype=np.bool_),
            final_states=[np.zeros((horizon, n) + shape, dtype) for shape, dtype in zip(tree.leaf_shapes, tree.leaf_dtypes)],
            bootstrap_states=[],
            bootstrap_starts=np.zeros(n, dtype=np.bool_),
            states=(
                [np.empty((horizon, n) + shape, dtype) for shape, dtype in zip(tree.leaf_shapes, tree.leaf_dtypes)]
                if self._store_states else None
            ),
        )
        self._record.episode_starts[0] = self._row_starts

    def call(self, policy: Any, t: int, observations: Any) -> Any:
        """Call ``policy`` on row ``t``; its output (the next state is kept)."""
        if t:
            self._settle(t - 1)
        record = self._record
        if record.states is not None:
            for stored, leaf in zip(record.states, self._leaves):
                stored[t] = leaf if type(leaf) is np.ndarray else leaf_to_numpy(leaf)
        returned = policy(observations, self._tree.unflatten(self._leaves), self._row_starts.copy())
        if type(returned) is not tuple or len(returned) != 2:
            got = f"a tuple of {len(returned)}" if isinstance(returned, tuple) else f"a {type(returned).__name__}"
            raise ActionError(
                f"the recurrent policy for {self._where} returned {got} at row {t}; expected a 2-tuple "
                "(output, next_state)."
            )
        output, next_state = returned
        tree = self._tree
        if tree.flat_dict_keys is not None and type(next_state) is dict and tuple(next_state) == tree.flat_dict_keys:
            leaves = [next_state[key] for key in tree.flat_dict_keys]
        elif tree.structure is None:
            leaves = [next_state]
        else:
            leaves = None
        # The common case checked in one pass; anything else gets the leaf-by-leaf check and its error.
        matches = leaves is not None
        if matches:
            for leaf, initial in zip(leaves, self._initial):
                if type(leaf) is not type(initial) or leaf.shape != initial.shape or leaf.dtype != initial.dtype:
                    matches = False
                    break
        if not matches:
            where = f"the next state the policy returned for {self._where} at row {t}: the state"
            leaves = tree.flatten(next_state, self._num_envs, where, self._initial)
        if self._has_tensors:
            for index, leaf in enumerate(leaves):
                if type(leaf) is not np.ndarray and leaf.requires_grad:
                    # A state returned with its graph would chain every row's graph to the next.
                    leaves[index] = leaf.detach()
        self._next = leaves
        self._called_row = t
        return output

    def abandon(self, steps_done: int) -> None:
        """The rollout was dropped with ``steps_done`` rows stepped: when the last row called was
        stepped too (a pipelined part one row ahead of the part that failed), move on to the
        state of the row the envs stand at."""
        if self._record is not None and self._next is not None and steps_done == self._called_row + 1:
            self._settle(self._called_row, last=True)
        self._record = self._storage = None

    def finish(self) -> RecurrentRecord:
        """End the rollout: settle its last row; the record (the bootstrap row's state reset)."""
        record = self._record
        self._settle(record.episode_starts.shape[0] - 1, last=True)
        record.bootstrap_states = [leaf_to_numpy(leaf) for leaf in self._leaves]
        record.bootstrap_starts = self._row_starts.copy()
        self._record = self._storage = None
        return record

    def _settle(self, t: int, last: bool = False) -> None:
        """Row ``t`` was stepped: keep the state at its episode ends; reset for row ``t + 1``."""
        storage, record, leaves = self._storage, self._record, self._next
        ended, starts = storage.episode_ends_and_starts(t)
        # count_nonzero: a tenth of ndarray.any()'s cost on a row of flags.
        if np.count_nonzero(starts):
            if np.count_nonzero(ended):
                for stored, leaf in zip(record.final_states, leaves):
                    # Indexing copies: a tensor's NumPy view is enough here.
                    values = leaf if type(leaf) is np.ndarray else leaf.detach().cpu().numpy()
                    stored[t][ended] = values[ended]
            leaves = self._reset(leaves, starts)
        self._leaves = leaves
        self._row_starts = starts
        self._next = None
        if not last:
            record.episode_starts[t + 1] = starts

    def _reset(self, leaves: list[Any], starts: np.ndarray) -> list[Any]:
        """``leaves`` with the rows of ``starts`` set to the initial state (new arrays: the
        policy may keep the ones it returned)."""
        reset = []
        for leaf, initial in zip(leaves, self._initial):
            if type(leaf) is np.ndarray:
                leaf = np.where(starts.reshape((-1,) + (1,) * (leaf.ndim - 1)), initial, leaf)
            else:
                # torch.where, not NumPy's on the tensors' views: the new state then has memory
                # from PyTorch's allocator, aligned as its kernels like (NumPy's made the GRU of
                # the benchmark ~10% slower on the next row).
                torch = sys.modules["torch"]
                mask = torch.from_numpy(starts.reshape((-1,) + (1,) * (leaf.dim() - 1)))
                if leaf.device.type != "cpu":
                    mask, initial = mask.to(leaf.device), initial.to(leaf.device)
                leaf = torch.where(mask, initial, leaf.detach())
            reset.append(leaf)
        return reset
