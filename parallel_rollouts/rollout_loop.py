"""The per-step loop of one rollout, written once for the collector and for remote actors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import numpy as np

from .policy import PolicyOutputWriter
from .spaces import SpaceLayout
from .storage import RolloutStorage

__all__ = ["RolloutLoop"]


def _read_only(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view


def _storage_rows(storage: RolloutStorage, t: int) -> list[np.ndarray]:
    return [leaf[t] for leaf in storage.observations]


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

    def run(
        self,
        storage: RolloutStorage,
        step: Callable[[int], None],
        policy_observations: Optional[Callable[[RolloutStorage, int], list[np.ndarray]]] = None,
    ) -> None:
        """Run the rollout; ``policy_observations(storage, t)`` gives the policy's rows.

        By default the policy gets views of ``storage`` row ``t``; a backend whose
        storage is not the caller's batch supplies rows that are.
        """
        unflatten = self._observation_layout.unflatten
        write = self.output_writer.write
        policy = self.policy
        rows_of = policy_observations or _storage_rows
        self.output_writer.reset_rollout()
        self.steps_done = 0
        for t in range(storage.horizon):
            # The policy sees read-only arrays: it cannot corrupt the batch.
            observations = unflatten([_read_only(row) for row in rows_of(storage, t)])
            write(t, policy(observations), storage)
            step(t)
            self.steps_done = t + 1
