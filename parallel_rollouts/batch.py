"""RolloutBatch: what one ``collect()`` returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .spaces import SpaceLayout

__all__ = ["RolloutBatch"]


@dataclass(frozen=True)
class RolloutBatch:
    """One rollout of ``horizon`` steps of ``num_envs`` envs, as NumPy arrays.

    Leading dims are ``[time, env]`` (written ``[T, N]`` below). Observation and
    action fields mirror their space: a Box gives one array, a Dict space a dict
    of arrays, a Tuple space a tuple of arrays, each ``[T, N, *leaf_shape]``.

    Attributes
    ----------
    observations:
        ``[T, N, ...]``: the observation the action at ``[t, env]`` was chosen
        from. After an episode ends at ``[t, env]``, row ``t + 1`` already holds
        the next episode's first observation.
    actions:
        ``[T, N, ...]`` in the action space's dtype.
    rewards:
        ``[T, N]`` float64.
    terminations, truncations:
        ``[T, N]`` bool: the episode ended at ``[t, env]`` by reaching a terminal
        state / by a time limit or other truncation. ``dones`` is their union.
    values, log_probs:
        ``[T, N]`` float32 when the policy returned them
        (:class:`~parallel_rollouts.PolicyOutput`), otherwise ``None``.
    final_observations, final_observation_mask:
        Where ``final_observation_mask[t, env]`` is true (exactly where an
        episode ended), ``final_observations[t, env]`` is the terminal
        observation returned by that step; elsewhere it is zero. Bootstrap a
        truncated episode from it.
    bootstrap_observations:
        ``[N, ...]``: the observation after the last step, the one the next
        ``collect()`` starts from.
    step_episode_seeds:
        ``[T, N]`` int64: the reset seed of the episode the step at ``[t, env]``
        belongs to.
    episode_returns, episode_lengths, episode_env_indices, episode_end_steps, episode_seeds:
        One entry per episode that ended in this rollout, ordered by end step
        then env index: its undiscounted return and length (counted from its
        reset, which may lie in an earlier rollout), its env, the ``t`` it ended
        at, and its reset seed.
    infos:
        ``{key: [T, N] float64}`` for each requested ``info_keys`` entry, taken
        from the info dict of the step at ``[t, env]``.
    seed:
        The collector's root seed, so the run can be reproduced.
    lost_env_indices:
        int64 env indices whose rows in this batch are not valid because the
        worker hosting them died and was restarted (``backend="ray"`` with
        ``max_restarts``); empty otherwise. Mask those columns out.
    valid:
        ``[T, N]`` bool: false only on the reset steps of a Gymnasium vector env
        with next-step autoreset (the step after an episode's end, whose action
        the env ignored; see ``docs/batch-contract.md``). All true for env
        factories and for same-step or disabled autoreset. Mask the loss with it.
    """

    observations: Any
    actions: Any
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    values: np.ndarray | None
    log_probs: np.ndarray | None
    final_observations: Any
    final_observation_mask: np.ndarray
    bootstrap_observations: Any
    step_episode_seeds: np.ndarray
    episode_returns: np.ndarray
    episode_lengths: np.ndarray
    episode_env_indices: np.ndarray
    episode_end_steps: np.ndarray
    episode_seeds: np.ndarray
    infos: dict[str, np.ndarray]
    seed: int
    lost_env_indices: np.ndarray
    valid: np.ndarray

    @property
    def dones(self) -> np.ndarray:
        """``[T, N]`` bool: ``terminations | truncations``."""
        return self.terminations | self.truncations

    @property
    def horizon(self) -> int:
        return self.rewards.shape[0]

    @property
    def num_envs(self) -> int:
        return self.rewards.shape[1]

    @property
    def num_transitions(self) -> int:
        return self.rewards.size

    @classmethod
    def from_result(cls, result, observation_layout: SpaceLayout, action_layout: SpaceLayout, seed: int) -> RolloutBatch:
        """Assemble the batch from a runner's :class:`~parallel_rollouts.runners.base.RolloutResult`."""
        storage, episodes = result.storage, result.episodes
        has_values, has_log_probs = result.has_values, result.has_log_probs
        horizon = storage.horizon
        return cls(
            observations=observation_layout.unflatten([leaf[:horizon] for leaf in storage.observations]),
            actions=action_layout.unflatten(list(storage.actions)),
            rewards=storage.rewards,
            terminations=storage.terminations,
            truncations=storage.truncations,
            values=storage.values if has_values else None,
            log_probs=storage.log_probs if has_log_probs else None,
            final_observations=observation_layout.unflatten(list(storage.final_observations)),
            final_observation_mask=storage.terminations | storage.truncations,
            bootstrap_observations=observation_layout.unflatten(
                [leaf[horizon] for leaf in storage.observations]
            ),
            step_episode_seeds=storage.step_episode_seeds,
            episode_returns=episodes.returns,
            episode_lengths=episodes.lengths,
            episode_env_indices=episodes.env_indices,
            episode_end_steps=episodes.end_steps,
            episode_seeds=episodes.seeds,
            infos=dict(storage.infos),
            seed=seed,
            lost_env_indices=result.lost_env_indices,
            valid=~storage.reset_steps,
        )
