"""The ``serial`` and ``sync`` steppers: every env in this process.

Groups of envs (``EnvGroup``, or one ``VectorEnvGroup`` per vector env a factory
returned) are stepped through one :class:`~parallel_rollouts.groups.GroupChain`.

``sync`` steps all envs as one :class:`~parallel_rollouts.groups.EnvGroup`, so the
compiled core handles the whole ``[num_envs]`` row of each step in one call: the fast path
for cheap envs. ``serial`` is the readable reference: every env is its own group of one,
stepped one after another, with exactly the step semantics the other backends run, so a
difference between ``serial`` and a grouped backend points at grouping, never at semantics.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from gymnasium import Env

from ..groups import GroupChain, build_groups, make_all, resolve_layout, spaces_per_env
from ..config.layout import RolloutLayout
from ..config.spec import RolloutSpec
from ..data.storage import CompletedEpisodes, RolloutStorage
from .base import EnvStepper

__all__ = ["GROUPINGS", "InProcessStepper", "close_envs"]

logger = logging.getLogger("parallel_rollouts")

#: How each in-process backend groups ``num_envs`` envs: ``(start, stop)`` per group.
GROUPINGS = {
    "serial": lambda num_envs: [(index, index + 1) for index in range(num_envs)],
    "sync": lambda num_envs: [(0, num_envs)],
}


class InProcessStepper(EnvStepper):
    """Envs in this process, split into groups by ``group_bounds`` (a vector env is one group)."""

    def __init__(self, layout: RolloutLayout, envs: Sequence[Env], group_bounds: Sequence[tuple[int, int]]) -> None:
        self._envs = list(envs)
        self.layout = layout
        self._num_envs = layout.num_envs
        self._groups = GroupChain(build_groups(self._envs, 0, group_bounds, layout))
        self._groups.reset_all()

    @classmethod
    def build(cls, spec: RolloutSpec, grouping: str) -> InProcessStepper:
        """Make every env, resolve the layout from env 0's spaces, and reset every env."""
        envs = make_all(spec.env_fns, 0)
        try:
            layout = resolve_layout(spec, spaces_per_env(envs))
            return cls(layout, envs, GROUPINGS[grouping](len(envs)))
        except BaseException:
            close_envs(envs)
            raise

    @property
    def num_envs(self) -> int:
        return self._num_envs

    def begin(self, storage: RolloutStorage) -> None:
        self._groups.begin(storage)

    def step(self, t: int) -> None:
        self._groups.step(t)

    def step_function(self):
        return self._groups.step_function()

    def abandon(self, t: int) -> None:
        self._groups.abandon(t)

    def finish(self) -> CompletedEpisodes:
        return self._groups.finish()

    def close(self) -> None:
        close_envs(self._envs)


def close_envs(envs: Sequence[Env]) -> None:
    for index, env in enumerate(envs):
        try:
            env.close()
        except Exception:
            logger.warning("env %d raised while closing; ignored", index, exc_info=True)
