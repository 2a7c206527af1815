"""The ``serial`` and ``sync`` steppers: every env in this process.

``sync`` steps all envs as one :class:`~parallel_rollouts.env_group.EnvGroup`, so the
compiled core handles the whole ``[num_envs]`` row of each step in one call: the fast path
for cheap envs. ``serial`` is the readable reference: every env is its own group of one,
stepped one after another, with exactly the step semantics the other backends run, so a
difference between ``serial`` and a grouped backend points at grouping, never at semantics.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from gymnasium import Env

from ..env_group import EnvGroup, make_env
from ..errors import WorkerError
from ..spec import RolloutSpec
from ..storage import CompletedEpisodes, RolloutStorage
from .base import EnvStepper

__all__ = ["GROUPINGS", "InProcessStepper", "close_envs"]

logger = logging.getLogger("parallel_rollouts")

#: How each in-process backend groups ``num_envs`` envs: ``(start, stop)`` per group.
GROUPINGS = {
    "serial": lambda num_envs: [(index, index + 1) for index in range(num_envs)],
    "sync": lambda num_envs: [(0, num_envs)],
}


class InProcessStepper(EnvStepper):
    """Envs in this process, split into :class:`EnvGroup` s by ``group_bounds``."""

    def __init__(self, spec: RolloutSpec, envs: Sequence[Env], group_bounds: Sequence[tuple[int, int]]) -> None:
        self._envs = list(envs)
        self._bounds = list(group_bounds)
        self._groups = [
            EnvGroup(
                self._envs[start:stop],
                start,
                spec.root_seed,
                spec.observation_layout,
                spec.action_layout,
                spec.info_keys,
                spec.core,
            )
            for start, stop in group_bounds
        ]
        for group in self._groups:
            group.reset_all()

    @classmethod
    def build(cls, spec: RolloutSpec, grouping: str) -> InProcessStepper:
        """Make every env, adopt env 0's spaces, and reset every env."""
        envs: list[Env] = []
        try:
            for index in range(spec.num_envs):
                envs.append(make_env(spec.env_fns[index], index))
            spec.adopt_spaces(envs[0].observation_space, envs[0].action_space)
            return cls(spec, envs, GROUPINGS[grouping](spec.num_envs))
        except BaseException:
            close_envs(envs)
            raise

    @property
    def num_envs(self) -> int:
        return len(self._envs)

    def begin(self, storage: RolloutStorage) -> None:
        for group, (start, stop) in zip(self._groups, self._bounds):
            group.begin(storage.columns(start, stop))

    def step(self, t: int) -> None:
        # Every group steps even after one fails, so that all envs failing in
        # the same step are reported together, as one WorkerError.
        errors: list[WorkerError] = []
        for group in self._groups:
            try:
                group.step(t)
            except WorkerError as error:
                errors.append(error)
        if errors:
            failures = [failure for error in errors for failure in error.failures]
            raise WorkerError.from_failures(failures) from errors[0].__cause__

    def abandon(self, t: int) -> None:
        for group in self._groups:
            group.abandon(t)

    def finish(self) -> CompletedEpisodes:
        return CompletedEpisodes.merge([group.finish() for group in self._groups])

    def close(self) -> None:
        close_envs(self._envs)


def close_envs(envs: Sequence[Env]) -> None:
    for index, env in enumerate(envs):
        try:
            env.close()
        except Exception:
            logger.warning("env %d raised while closing; ignored", index, exc_info=True)
