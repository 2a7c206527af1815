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
from typing import Any

import numpy as np

from .spaces import SpaceLayout
from .sparse_memory import sparse_zeros
from .typed_actions import allocate_typed_actions

__all__ = ["CompletedEpisodes", "RolloutStorage", "storage_bytes"]

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
    #: ``[horizon, num_envs]`` bool, true on the rows that are no transition: the reset steps of
    #: vector envs with next-step autoreset (see :mod:`~parallel_rollouts.groups.vector_source`) and
    #: the rows of a multi-agent env's agents that are not live (:mod:`~parallel_rollouts.groups.agents`).
    #: Allocated zeroed and written only by those groups, whose columns it covers in full every step.
    reset_steps: np.ndarray
    #: ``[1, num_envs]`` float64: seconds each env spent in ``step`` / in ``reset``
    #: during this rollout (one row, so that a column slice is a view like every
    #: other field). Zeroed by the batch memory at the start of each rollout; the
    #: groups add to them.
    env_step_seconds: np.ndarray
    env_reset_seconds: np.ndarray

    def __post_init__(self) -> None:
        # The one place every array's shape and dtype is checked, whoever made it
        # (NumPy, a shared-memory carver, a column slice): the cores then check
        # only that the arrays they are handed agree with each other.
        steps = self.rewards.shape
        if self.rewards.ndim != 2 or self.rewards.dtype != np.float64:
            raise ValueError(f"`rewards` must be [horizon, num_envs] float64; got {self.rewards.shape!r} {self.rewards.dtype}.")
        horizon, num_envs = steps
        expected = {
            "terminations": (self.terminations, steps, np.bool_),
            "truncations": (self.truncations, steps, np.bool_),
            "step_episode_seeds": (self.step_episode_seeds, steps, np.int64),
            "values": (self.values, steps, np.float32),
            "log_probs": (self.log_probs, steps, np.float32),
            "reset_steps": (self.reset_steps, steps, np.bool_),
            "env_step_seconds": (self.env_step_seconds, (1, num_envs), np.float64),
            "env_reset_seconds": (self.env_reset_seconds, (1, num_envs), np.float64),
        }
        expected.update({f"infos[{key!r}]": (array, steps, np.float64) for key, array in self.infos.items()})
        if len(self.observations) != len(self.final_observations) or not self.observations:
            raise ValueError("`observations` and `final_observations` must have one array per leaf, the same leaves.")
        for index, (observations, finals) in enumerate(zip(self.observations, self.final_observations)):
            leaf_shape = observations.shape[2:]
            expected[f"observations[{index}]"] = (observations, (horizon + 1, num_envs) + leaf_shape, finals.dtype)
            expected[f"final_observations[{index}]"] = (finals, steps + leaf_shape, observations.dtype)
        for index, actions in enumerate(self.actions):
            expected[f"actions[{index}]"] = (actions, steps + actions.shape[2:], actions.dtype)
        for field, (array, shape, dtype) in expected.items():
            if not isinstance(array, np.ndarray) or array.shape != shape or array.dtype != np.dtype(dtype):
                got = f"{array.shape!r} {array.dtype}" if isinstance(array, np.ndarray) else type(array).__name__
                raise ValueError(f"storage `{field}` must be {shape!r} {np.dtype(dtype)}; got {got}.")

    @classmethod
    def allocate(
        cls,
        observation_layout: SpaceLayout,
        action_layout: SpaceLayout,
        horizon: int,
        num_envs: int,
        info_keys: Sequence[str] = (),
        allocator: Allocator = np.empty,
        zeroed: Allocator = sparse_zeros,
        typed_actions: bool = False,
    ) -> RolloutStorage:
        """Allocate storage; ``final_observations`` comes from ``zeroed``, the rest from ``allocator``.

        With ``typed_actions`` each action leaf holds bytes, each row a dtype and values of that
        dtype (:mod:`~parallel_rollouts.data.typed_actions`), instead of values of the space's dtype.
        """
        steps = (horizon, num_envs)
        return cls(
            observations=observation_layout.allocate((horizon + 1, num_envs), allocator),
            final_observations=observation_layout.allocate(steps, zeroed),
            actions=(
                allocate_typed_actions(action_layout, steps, allocator)
                if typed_actions
                else action_layout.allocate(steps, allocator)
            ),
            rewards=allocator(steps, dtype=np.float64),
            terminations=allocator(steps, dtype=np.bool_),
            truncations=allocator(steps, dtype=np.bool_),
            step_episode_seeds=allocator(steps, dtype=np.int64),
            values=allocator(steps, dtype=np.float32),
            log_probs=allocator(steps, dtype=np.float32),
            infos={key: allocator(steps, dtype=np.float64) for key in info_keys},
            reset_steps=zeroed(steps, dtype=np.bool_),
            env_step_seconds=zeroed((1, num_envs), dtype=np.float64),
            env_reset_seconds=zeroed((1, num_envs), dtype=np.float64),
        )

    @property
    def horizon(self) -> int:
        return self.rewards.shape[0]

    def episode_ends_and_starts(self, rows: Any, columns: Any = slice(None)) -> tuple[np.ndarray, np.ndarray]:
        """For ``rows`` (an index or slice) of ``columns``: where an episode ended (terminated or
        truncated), and where the row after begins one, the one rule of ``episode_starts``: an
        episode ended there, or the row was no transition (a ``NEXT_STEP`` reset step, an agent
        not live), after which the policy's state starts afresh."""
        ended = self.terminations[rows, columns] | self.truncations[rows, columns]
        return ended, ended | self.reset_steps[rows, columns]

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

    def copy_to(self, target: RolloutStorage, observation_rows_copied: int = 0) -> None:
        """Copy this rollout into ``target`` (same layout).

        ``final_observations`` are copied only where an episode ended, so rows
        left over from an earlier rollout never leak through; ``target``'s other
        final-observation rows must already be zero (fresh from ``np.zeros``, or
        cleared by :class:`~parallel_rollouts.data.batch_memory.BatchMemory`), so the
        cost follows the number of episode ends, not the size of the array.
        The first ``observation_rows_copied`` observation rows are taken as
        already copied (the async backend copies each row as the policy reads it).
        """
        ended = self.terminations | self.truncations
        for field in fields(self):
            source, destination = getattr(self, field.name), getattr(target, field.name)
            if field.name == "final_observations":
                if ended.any():
                    for source_leaf, destination_leaf in zip(source, destination):
                        destination_leaf[ended] = source_leaf[ended]
            elif field.name == "observations":
                for source_leaf, destination_leaf in zip(source, destination):
                    np.copyto(destination_leaf[observation_rows_copied:], source_leaf[observation_rows_copied:])
            elif isinstance(source, list):
                for source_leaf, destination_leaf in zip(source, destination):
                    np.copyto(destination_leaf, source_leaf)
            elif isinstance(source, dict):
                for key in source:
                    np.copyto(destination[key], source[key])
            else:
                np.copyto(destination, source)

    def columns(self, start: int, stop: int) -> RolloutStorage:
        """The envs ``start:stop`` of every array, as views (every env: this storage itself)."""
        if start == 0 and stop == self.rewards.shape[1]:
            return self
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

    @classmethod
    def buffers_like(cls, previous: CompletedEpisodes | None, capacity: int) -> CompletedEpisodes:
        """Buffers for ``capacity`` episodes: ``previous`` again when it holds that many.

        A group's buffers are read out by :meth:`head`, a copy, so the next rollout may write
        them again; they are then not allocated, and the pages a rollout writes not faulted
        in, afresh on every rollout (5 MiB of them for a vector env of 1,024 sub-envs at
        horizon 128).
        """
        if previous is not None and previous.returns.shape[0] == capacity:
            return previous
        return cls.empty_buffers(capacity)

    def head(self, count: int) -> CompletedEpisodes:
        """A copy of the first ``count`` entries."""
        return CompletedEpisodes(*(getattr(self, f.name)[:count].copy() for f in fields(self)))

    @classmethod
    def merge(cls, parts: Sequence[CompletedEpisodes]) -> CompletedEpisodes:
        """Concatenate and order by time step, then env index, whatever the grouping of envs.

        No parts (every worker of a rollout was lost and replaced) is no episode booked.
        """
        if not parts:
            return cls.empty_buffers(0)
        if len(parts) == 1:
            # One group books its episodes in that order already (by step, then column), so no
            # sort. The batch's arrays must be its own and writable: a group's `finish()` hands
            # over fresh copies, taken as they are; anything else (a Ray actor's come back
            # read-only, views) is copied.
            return cls(*(_own_writable(getattr(parts[0], f.name)) for f in fields(cls)))
        joined = cls(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(cls)))
        order = np.lexsort((joined.env_indices, joined.end_steps))
        return cls(*(getattr(joined, f.name)[order] for f in fields(cls)))


def storage_bytes(
    observation_layout: SpaceLayout,
    action_layout: SpaceLayout,
    horizon: int,
    num_envs: int,
    info_keys: Sequence[str] = (),
    typed_actions: bool = False,
) -> tuple[int, int]:
    """Bytes one :class:`RolloutStorage` takes: ``(dense, sparse)``.

    ``dense`` is what :meth:`RolloutStorage.allocate` takes from its ``allocator``
    (every row is written); ``sparse`` is what it takes from ``zeroed``, whose pages
    are only touched where written (final observations, reset steps). Counted
    from the allocation itself, with arrays that take no memory.
    """
    counts = {"dense": 0, "sparse": 0}

    def virtual(kind: str) -> Allocator:
        def allocate(shape, dtype=np.float64) -> np.ndarray:
            array = np.broadcast_to(np.zeros((), dtype=dtype), shape)
            counts[kind] += int(np.prod(shape, dtype=np.int64)) * array.dtype.itemsize
            return array

        return allocate

    RolloutStorage.allocate(
        observation_layout, action_layout, horizon, num_envs, info_keys, virtual("dense"), virtual("sparse"),
        typed_actions,
    )
    return counts["dense"], counts["sparse"]


def _own_writable(array: np.ndarray) -> np.ndarray:
    """``array`` itself when it owns its writable memory, else a copy that does."""
    if type(array) is np.ndarray and array.flags.owndata and array.flags.writeable:
        return array
    return np.array(array)
