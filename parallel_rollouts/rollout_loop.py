"""The per-step loop of one rollout, written once for the collector and for remote actors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .policy import PolicyOutputWriter
from .spaces import SpaceLayout
from .storage import RolloutStorage

__all__ = ["RolloutLoop"]


def _read_only(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view


class RolloutLoop:
    """For ``t`` in ``range(horizon)``: policy -> checked actions -> ``step(t)``.

    ``steps_done`` says how far the last :meth:`run` got, so that a caller can
    drop a rollout cleanly when the policy raises part-way.
    """

    def __init__(self, observation_layout: SpaceLayout, output_writer: PolicyOutputWriter, policy: Callable[[Any], Any]) -> None:
        self._observation_layout = observation_layout
        self.output_writer = output_writer
        self.policy = policy
        self.steps_done = 0

    def run(self, storage: RolloutStorage, step: Callable[[int], None]) -> None:
        act = self.act
        self.output_writer.reset_rollout()
        self.steps_done = 0
        for t in range(storage.horizon):
            act(t, storage)
            step(t)
            self.steps_done = t + 1

    def act(self, t: int, storage: RolloutStorage) -> None:
        """Call the policy on row ``t`` and write its checked output into row ``t``."""
        # The policy sees read-only views of row t: it cannot corrupt the batch.
        observations = self._observation_layout.unflatten([_read_only(leaf[t]) for leaf in storage.observations])
        self.output_writer.write(t, self.policy(observations), storage)
