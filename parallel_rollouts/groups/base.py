"""The one interface of every group: what a stepper, a worker or an actor drives.

Three kinds implement it: :class:`~parallel_rollouts.groups.single_envs.EnvGroup` (single
envs, the collector's step semantics), :class:`~parallel_rollouts.groups.vector_source.VectorEnvGroup`
(a Gymnasium vector env as a source of rollouts) and
:class:`~parallel_rollouts.groups.gymnasium_envs.GymnasiumGroup` (single envs stepped as
Gymnasium's vector envs step them, for :class:`~parallel_rollouts.ParallelVectorEnv`);
:class:`~parallel_rollouts.groups.chain.GroupChain` chains groups over consecutive columns.
Each is built from its envs, its first global env index and the collector's
:class:`~parallel_rollouts.layout.RolloutLayout`, and nothing else.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from ..storage import CompletedEpisodes, RolloutStorage

__all__ = ["RolloutGroup"]


@runtime_checkable
class RolloutGroup(Protocol):
    """A contiguous run of env columns, stepped into a column slice of rollout storage."""

    #: Env columns this group covers.
    num_envs: int
    #: Global index of its first env column.
    env_offset: int

    def reset_all(self) -> None:
        """First reset of every env (once, before the first rollout)."""

    def begin(self, storage: RolloutStorage) -> None:
        """Start a rollout into ``storage``, this group's column slice of the batch."""

    def step(self, t: int) -> Any:
        """Step every env with the actions of ``storage.actions[t]`` and write row ``t`` (``t + 1``)."""

    def finish(self) -> CompletedEpisodes | None:
        """End the rollout; the episodes that ended in it."""

    def abandon(self, t: int) -> None:
        """Drop the rollout after ``t`` completed steps."""

    def close(self) -> list[tuple[int, BaseException]]:
        """Close every env; ``(env_index, error)`` for each whose ``close`` raised."""
