"""The one interface of every group: what a stepper, a worker or an actor drives.

:class:`~parallel_rollouts.groups.single_envs.EnvGroup` (single envs, the collector's step
semantics), :class:`~parallel_rollouts.groups.vector_source.VectorEnvGroup` (a Gymnasium vector
env as a source of rollouts) and :class:`~parallel_rollouts.groups.agents.AgentEnvGroup` (a
PettingZoo env, one column per agent), the last two sharing their rollout life in
:class:`~parallel_rollouts.groups.source_group.SourceGroup`, implement it, as do
:class:`~parallel_rollouts.groups.gymnasium_envs.GymnasiumGroup` (single envs stepped as
Gymnasium's vector envs step them, for :class:`~parallel_rollouts.ParallelVectorEnv`) and its
multi-agent twin;
:class:`~parallel_rollouts.groups.chain.GroupChain` chains groups over consecutive columns.
Each is built from its envs, its first global env index and the collector's
:class:`~parallel_rollouts.config.layout.RolloutLayout`; ``EnvGroup`` and ``VectorEnvGroup``
also take the incarnation (which picks their episode seed stream), ``GymnasiumGroup`` the
autoreset mode.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from ..errors import CollectorClosedError
from ..data.storage import CompletedEpisodes, RolloutStorage

__all__ = ["RolloutGroup", "refused_step"]


def refused_step(row: int | None, t: int, first_env: int, last_env: int) -> Exception:
    """The error for a step (or the end of a rollout) at ``t`` when the envs stand at ``row``.

    ``row`` is None when a step of these envs was interrupted part-way: their state is
    unknown, so nothing can continue from it.
    """
    if row is None:
        return CollectorClosedError(
            f"a step of envs {first_env}..{last_env} was interrupted part-way; their state is unknown, "
            "so no rollout can continue from it. Close this collector and create a new one."
        )
    return RuntimeError(f"step {t} requested, but the envs stand at row {row}.")


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
