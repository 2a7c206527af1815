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
    view.setflags(write=False)  # cheaper than going through `view.flags`, once per leaf and row
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

        By default the policy gets views of ``storage`` row ``t``; a runner whose
        storage is not the caller's batch supplies rows that are.
        """
        rows_of = policy_observations or _storage_rows
        act = self.act
        self.output_writer.reset_rollout()
        self.steps_done = 0
        for t in range(storage.horizon):
            act(t, storage, rows_of(storage, t))
            step(t)
            self.steps_done = t + 1

    def act(self, t: int, storage: RolloutStorage, rows: list[np.ndarray] | None = None) -> None:
        """Call the policy on ``rows`` (default: views of row ``t``); write its checked output into row ``t``."""
        if rows is None:
            rows = _storage_rows(storage, t)
        # The policy sees read-only arrays: it cannot corrupt the batch.
        observations = self._observation_layout.unflatten([_read_only(row) for row in rows])
        self.output_writer.write(t, self.policy(observations), storage)
