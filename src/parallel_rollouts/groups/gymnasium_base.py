"""What the two groups behind :class:`~parallel_rollouts.ParallelVectorEnv` share.

:class:`~parallel_rollouts.groups.gymnasium_envs.GymnasiumGroup` (single envs) and
:class:`~parallel_rollouts.groups.gymnasium_agents.AgentGymnasiumGroup` (multi-agent envs, one
column per agent) answer the same requests the same way; only a step, a reset, ``call`` and
``set_attr`` differ. :class:`GymnasiumGroupBase` holds the rest once: the group interface's
``finish``, ``abandon`` and ``close``, the dispatch of the requests other than a step, the slicing
of whole-vector arguments to the group's own columns, and the splitting of a row of actions.

A subclass sets ``envs``, ``env_offset``, ``num_envs`` (its columns) and ``_action_layout``, and
defines ``reset``, ``call`` and ``set_attr``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .single_envs import close_each

__all__ = ["GymnasiumGroupBase"]


class GymnasiumGroupBase:
    """The part of the group interface and of the request handling both Gymnasium vector groups share."""

    envs: list
    env_offset: int
    num_envs: int

    def finish(self):
        raise RuntimeError("a Gymnasium vector step has no rollout to finish.")

    def abandon(self, t: int) -> None:
        """Nothing to drop: every step is complete when it returns."""

    def close(self) -> list[tuple[int, BaseException]]:
        return close_each(self.envs, self.env_offset)

    # -- requests other than a step ----------------------------------------------------------

    def handle(self, request: tuple) -> Any:
        kind, *arguments = request
        if kind == "reset":
            return self.reset(*arguments)
        if kind == "call":
            return self.call(*arguments)
        if kind == "set_attr":
            return self.set_attr(*arguments)
        raise ValueError(f"unknown request {kind!r}")

    def _mine(self, values: Sequence) -> Sequence:
        """This group's columns of a whole-vector argument."""
        return values[self.env_offset : self.env_offset + self.num_envs]

    def _split_actions(self, leaf_rows: list[np.ndarray]) -> list:
        """One action per column, as ``gymnasium.vector.utils.iterate`` hands them out."""
        per_leaf = [list(row) for row in leaf_rows]
        if not self._action_layout.is_nested:
            return per_leaf[0]
        unflatten = self._action_layout.unflatten
        return [unflatten([values[column] for values in per_leaf]) for column in range(self.num_envs)]
