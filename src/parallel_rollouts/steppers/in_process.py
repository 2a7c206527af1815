"""The ``serial`` and ``sync`` steppers, and ``ParallelVectorEnv``'s ``"sync"`` one: every env in this process.

Groups of envs (``EnvGroup``, or one ``VectorEnvGroup`` per vector env a factory
returned) are stepped through one :class:`~parallel_rollouts.groups.GroupChain`.

``sync`` steps all envs as one :class:`~parallel_rollouts.groups.EnvGroup`, so the
compiled core handles the whole ``[num_envs]`` row of each step in one call: the fast path
for cheap envs. ``serial`` is the readable reference: every env is its own group of one,
stepped one after another, with exactly the step semantics the other backends run, so a
difference between ``serial`` and a grouped backend points at grouping, never at semantics.

:class:`InProcessVectorStepper` steps a ``ParallelVectorEnv(backend="sync")``'s envs as one
Gymnasium group (:mod:`~parallel_rollouts.groups.gymnasium_envs`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
from gymnasium import Env

from ..checks.factories import not_an_env
from ..groups import GroupChain, build_groups, make_all, resolve_layout, spaces_per_env
from ..groups.agents import is_parallel_env
from ..groups.single_envs import close_each
from ..config.layout import RolloutLayout
from ..config.spec import RolloutSpec
from ..data.storage import CompletedEpisodes, RolloutStorage
from .base import OnFailure, OnFinished, RolloutStepper, VectorStepper

__all__ = ["GROUPINGS", "InProcessStepper", "InProcessVectorStepper", "close_envs"]

logger = logging.getLogger("parallel_rollouts")

#: How each in-process backend groups ``num_envs`` envs: ``(start, stop)`` per group.
GROUPINGS = {
    "serial": lambda num_envs: [(index, index + 1) for index in range(num_envs)],
    "sync": lambda num_envs: [(0, num_envs)],
}


class InProcessStepper(RolloutStepper):
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


class InProcessVectorStepper(VectorStepper):
    """A ``ParallelVectorEnv``'s envs in this process, as one group over storage of its own.

    Every call steps the envs at once: :meth:`start_step` is the step, and a ready-first
    :meth:`send_envs` is done (and reported) before it returns.
    """

    def __init__(self, spec: RolloutSpec, on_failure: OnFailure, on_finished: OnFinished) -> None:
        envs = make_all(spec.env_fns, 0)
        try:
            for index, env in enumerate(envs):
                if not isinstance(env, Env) and not is_parallel_env(env):
                    raise not_an_env(f"env_fns[{index}]", env, vector_envs=False)
            self.layout = resolve_layout(spec, spaces_per_env(envs))
            self._group = spec.group_builder(envs, 0, self.layout)
            self.storage = self.layout.allocate_storage()
            self._group.begin(self.storage)
        except BaseException:
            close_each(envs)
            raise
        self._on_failure = on_failure
        self._on_finished = on_finished
        #: The parts of the step :meth:`start_step` took, until :meth:`finish_step` hands them over.
        self._step_parts: list | None = None

    def start_step(self) -> None:
        try:
            self._step_parts = [self._group.step(0)]
        except BaseException as error:
            self._on_failure(error)
            raise

    def finish_step(self) -> list:
        parts, self._step_parts = self._step_parts, None
        return parts

    def handle(self, request: tuple) -> list:
        try:
            return [self._group.handle(request)]
        except BaseException as error:
            self._on_failure(error)
            raise

    def send_envs(self, env_ids: np.ndarray) -> None:
        env_ids = np.sort(env_ids)
        try:
            events = self._group.step(0, env_ids.tolist())
        except BaseException as error:
            self._on_failure(error)
            raise
        self._on_finished(env_ids, events)

    def wait_envs(self) -> None:
        # Every step sent was done before `send_envs` returned: nothing can be waited for.
        raise RuntimeError("ready-first stepping lost track of the envs in flight")

    def drain_envs(self) -> None:
        """Nothing in flight: every step is done when :meth:`send_envs` returns."""

    def close(self) -> None:
        self._step_parts = None
        for index, error in self._group.close():
            logger.warning("env %d raised while closing: %s", index, error)


def close_envs(envs: Sequence[Env]) -> None:
    for index, env in enumerate(envs):
        try:
            env.close()
        except Exception:
            logger.warning("env %d raised while closing; ignored", index, exc_info=True)
