"""What one rollout records of a recurrent policy's state, per slice of envs and merged.

A :class:`RecurrentRecord` holds NumPy leaves only (a state kept as PyTorch tensors is copied
out), so it pickles from a rollout worker or a Ray actor as it is and becomes the batch's
``initial_state``, ``episode_starts``, ``final_states``, ``bootstrap_states`` and ``states``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .state_tree import StateTree

__all__ = ["RecurrentRecord"]


@dataclass
class RecurrentRecord:
    """One rollout's state record for ``n`` envs and horizon ``T`` (leaves in ``tree``'s order).

    ``initial_state``: ``[n, ...]`` per leaf, the state the policy was given at row 0.
    ``episode_starts``: ``[T, n]`` bool. ``final_states``: ``[T, n, ...]`` per leaf, the
    policy's next state at each row where an episode ended, zero elsewhere.
    ``bootstrap_states``: ``[n, ...]``, the state for the row after the last (already reset
    where that row starts an episode); ``bootstrap_starts``: ``[n]`` bool, which envs start an
    episode at that row. ``states``: ``[T, n, ...]``, the state given at every row, or ``None``
    when not stored.
    """

    tree: StateTree
    initial_state: list[np.ndarray]
    episode_starts: np.ndarray
    final_states: list[np.ndarray]
    bootstrap_states: list[np.ndarray]
    bootstrap_starts: np.ndarray
    states: list[np.ndarray] | None

    @classmethod
    def merge(cls, parts: Sequence[tuple[int, int, RecurrentRecord | None]], num_envs: int) -> RecurrentRecord | None:
        """The record of all ``num_envs`` envs from each slice's ``(start, stop, record)``.

        A slice without a record (its worker or actor was lost with it) is zero there, its
        ``episode_starts`` false. ``None`` when no slice has one.
        """
        known = [record for _, _, record in parts if record is not None]
        if not known:
            return None
        if len(parts) == 1 and parts[0][0] == 0 and parts[0][1] == num_envs:
            return known[0]
        model = known[0]
        horizon = model.episode_starts.shape[0]
        store_states = model.states is not None

        def per_env(leaves_of, rows: tuple[int, ...]) -> list[np.ndarray]:
            merged = [np.zeros(rows + (num_envs,) + shape, dtype) for shape, dtype in zip(model.tree.leaf_shapes, model.tree.leaf_dtypes)]
            axis = len(rows)
            for start, stop, record in parts:
                if record is not None:
                    for target, leaf in zip(merged, leaves_of(record)):
                        target[(slice(None),) * axis + (slice(start, stop),)] = leaf
            return merged

        episode_starts = np.zeros((horizon, num_envs), dtype=np.bool_)
        bootstrap_starts = np.zeros(num_envs, dtype=np.bool_)
        for start, stop, record in parts:
            if record is not None:
                episode_starts[:, start:stop] = record.episode_starts
                bootstrap_starts[start:stop] = record.bootstrap_starts
        return cls(
            tree=model.tree,
            initial_state=per_env(lambda record: record.initial_state, ()),
            episode_starts=episode_starts,
            final_states=per_env(lambda record: record.final_states, (horizon,)),
            bootstrap_states=per_env(lambda record: record.bootstrap_states, ()),
            bootstrap_starts=bootstrap_starts,
            states=per_env(lambda record: record.states, (horizon,)) if store_states else None,
        )

    def batch_fields(self) -> dict:
        """The batch's state fields, each leaf list rebuilt into the policy's nesting."""
        unflatten = self.tree.unflatten
        return {
            "initial_state": unflatten(self.initial_state),
            "episode_starts": self.episode_starts,
            "final_states": unflatten(self.final_states),
            "bootstrap_states": unflatten(self.bootstrap_states),
            "states": None if self.states is None else unflatten(self.states),
        }
