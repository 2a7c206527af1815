"""Preallocated ``[time, env, ...]`` storage that one rollout is written into.

The observation leaves have ``horizon + 1`` rows: row ``t`` is the observation
the action of step ``t`` was chosen from, and row ``horizon`` is the bootstrap
observation after the last step. Everything else has ``horizon`` rows. A
column slice (:meth:`RolloutStorage.columns`) is the part one group of envs
writes; it shares memory with the whole.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

import numpy as np

from .spaces import SpaceLayout

__all__ = ["CompletedEpisodes", "RolloutStorage"]

Allocator = Callable[..., np.ndarray]


@dataclass
class RolloutStorage:
    observations: list[np.ndarray]
    final_observations: list[np.ndarray]
    actions: list[np.ndarray]
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    step_episode_seeds: np.ndarray
    values: np.ndarray
    log_probs: np.ndarray
    infos: dict[str, np.ndarray]
    #: ``[horizon, num_envs]`` bool, true on the reset steps of vector envs with
    #: next-step autoreset (see ``backends.vector_source``). Allocated zeroed and
    #: written only by those groups, whose columns it covers in full every step.
    reset_steps: np.ndarray

    @classmethod
    def allocate(
        cls,
        observation_layout: SpaceLayout,
        action_layout: SpaceLayout,
        horizon: int,
        num_envs: int,
        info_keys: Sequence[str] = (),
        allocator: Allocator = np.empty,
        zeroed: Allocator = np.zeros,
    ) -> RolloutStorage:
        """Allocate storage; ``final_observations`` comes from ``zeroed``, the rest from ``allocator``."""
        steps = (horizon, num_envs)
        return cls(
            observations=observation_layout.allocate((horizon + 1, num_envs), allocator),
            final_observations=observation_layout.allocate(steps, zeroed),
            actions=action_layout.allocate(steps, allocator),
            rewards=allocator(steps, dtype=np.float64),
            terminations=allocator(steps, dtype=np.bool_),
            truncations=allocator(steps, dtype=np.bool_),
            step_episode_seeds=allocator(steps, dtype=np.int64),
            values=allocator(steps, dtype=np.float32),
            log_probs=allocator(steps, dtype=np.float32),
            infos={key: allocator(steps, dtype=np.float64) for key in info_keys},
            reset_steps=zeroed(steps, dtype=np.bool_),
        )

    @property
    def horizon(self) -> int:
        return self.rewards.shape[0]

    def map(self, function: Callable[[np.ndarray], np.ndarray]) -> RolloutStorage:
        """A storage whose every array is ``function(array)``."""
        changed = {}
        for field in fields(self):
            value = getattr(self, field.name)
            if isinstance(value, list):
                changed[field.name] = [function(array) for array in value]
            elif isinstance(value, dict):
                changed[field.name] = {key: function(array) for key, array in value.items()}
            else:
                changed[field.name] = function(value)
        return RolloutStorage(**changed)

    def copy_to(self, target: RolloutStorage) -> None:
        """Copy this rollout into ``target`` (same layout).

        ``final_observations`` are copied only where an episode ended and zeroed
        elsewhere, so rows left over from an earlier rollout never leak through.
        """
        ended = self.terminations | self.truncations
        for field in fields(self):
            source, destination = getattr(self, field.name), getattr(target, field.name)
            if field.name == "final_observations":
                for source_leaf, destination_leaf in zip(source, destination):
                    destination_leaf.fill(0)
                    destination_leaf[ended] = source_leaf[ended]
            elif isinstance(source, list):
                for source_leaf, destination_leaf in zip(source, destination):
                    np.copyto(destination_leaf, source_leaf)
            elif isinstance(source, dict):
                for key in source:
                    np.copyto(destination[key], source[key])
            else:
                np.copyto(destination, source)

    def columns(self, start: int, stop: int) -> RolloutStorage:
        """The envs ``start:stop`` of every array, as views."""
        return self.map(lambda array: array[:, start:stop])


@dataclass
class CompletedEpisodes:
    """Episodes that ended during one rollout, one entry each."""

    returns: np.ndarray
    lengths: np.ndarray
    env_indices: np.ndarray
    end_steps: np.ndarray
    seeds: np.ndarray

    @classmethod
    def empty_buffers(cls, capacity: int) -> CompletedEpisodes:
        return cls(
            returns=np.empty(capacity, dtype=np.float64),
            lengths=np.empty(capacity, dtype=np.int64),
            env_indices=np.empty(capacity, dtype=np.int64),
            end_steps=np.empty(capacity, dtype=np.int64),
            seeds=np.empty(capacity, dtype=np.int64),
        )

    def head(self, count: int) -> CompletedEpisodes:
        """A copy of the first ``count`` entries."""
        return CompletedEpisodes(*(getattr(self, f.name)[:count].copy() for f in fields(self)))

    @classmethod
    def merge(cls, parts: Sequence[CompletedEpisodes]) -> CompletedEpisodes:
        """Concatenate and order by time step, then env index, whatever the grouping of envs."""
        joined = cls(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(cls)))
        order = np.lexsort((joined.env_indices, joined.end_steps))
        return cls(*(getattr(joined, f.name)[order] for f in fields(cls)))
