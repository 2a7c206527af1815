"""The serial backend: the readable reference.

Every env is its own :class:`~parallel_rollouts.backends.stepping.EnvGroup`
of one, stepped one after another. It runs exactly the step semantics the
other backends run, so a difference between ``serial`` and a grouped backend
points at grouping, never at semantics.
"""

from __future__ import annotations

from .base import InProcessBackend

__all__ = ["SerialBackend"]


class SerialBackend(InProcessBackend):
    @staticmethod
    def group_bounds(num_envs: int) -> list[tuple[int, int]]:
        return [(index, index + 1) for index in range(num_envs)]
