"""The sync backend: every env in this process, stepped as one group.

One :class:`~parallel_rollouts.backends.stepping.EnvGroup` covers all envs, so
the compiled core handles the whole ``[num_envs]`` row of each step in one call.
This is the fast path for cheap envs.
"""

from __future__ import annotations

from .base import InProcessBackend

__all__ = ["SyncBackend"]


class SyncBackend(InProcessBackend):
    @staticmethod
    def group_bounds(num_envs: int) -> list[tuple[int, int]]:
        return [(0, num_envs)]
