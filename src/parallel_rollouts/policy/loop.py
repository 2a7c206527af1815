"""The per-step loop of one rollout, written once for the collector and for remote actors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import numpy as np

from .output import PolicyOutputWriter, RandomActionSampler
from ..config.layout import RolloutLayout
from ..data.policy_inputs import policy_rows_of
from ..data.spaces import SpaceLayout
from ..data.storage import RolloutStorage

__all__ = ["RolloutLoop", "build_loop"]


class RolloutLoop:
    """For ``t`` in ``range(horizon)``: policy -> checked actions -> ``step(t)``.

    ``steps_done`` says how far the last :meth:`run` got, so that a caller can
    drop a rollout cleanly when the policy raises part-way.
    """

    def __init__(self, observation_layout: SpaceLayout, output_writer: PolicyOutputWriter, policy: Callable[[Any], Any]) -> None:
        self._observation_layout = observation_layout
        self._nested = observation_layout.is_nested
        self.output_writer = output_writer
        self.policy = policy
        self.steps_done = 0

    def run(
        self,
        storage: RolloutStorage,
        step: Callable[[int], None],
        policy_rows: Optional[Callable[[int], list[np.ndarray]]] = None,
        on_step_error: Optional[Callable[[BaseException], None]] = None,
    ) -> None:
        """Run the rollout; ``policy_rows(t)`` gives the policy's rows of step ``t``.

        By default the policy gets private read-only copies of ``storage`` row ``t``
        (:mod:`~parallel_rollouts.data.policy_inputs`); a runner that must do more for each
        row supplies its own. Whatever ``policy_rows`` returns is handed to the policy as
        it is: arrays through which no route (NumPy or PyTorch) writes the batch.
        ``on_step_error(error)`` hears of an exception raised by ``step`` (not by the
        policy) before it propagates: only a step can leave the envs part-way.
        ``policy`` and ``output_writer`` are read once per run: a policy swapped in (a
        worker's updated copy) takes effect at the next run.
        """
        if policy_rows is None:
            observations = storage.observations
            policy_rows = lambda t: policy_rows_of(observations, t)  # noqa: E731
        # The body of act(), inlined: one Python frame less on every row.
        write, policy, nested, unflatten = self.output_writer.write, self.policy, self._nested, self._observation_layout.unflatten
        self.output_writer.reset_rollout()
        self.steps_done = 0
        for t in range(storage.horizon):
            rows = policy_rows(t)
            write(t, policy(unflatten(rows) if nested else rows[0]), storage)
            try:
                step(t)
            except BaseException as error:
                if on_step_error is not None:
                    on_step_error(error)
                raise
            self.steps_done = t + 1

    def act(self, t: int, storage: RolloutStorage, rows: list[np.ndarray] | None = None) -> None:
        """Call the policy on ``rows`` (default: private read-only copies of row ``t``); write its
        checked output into row ``t``. The policy cannot corrupt the batch through ``rows``.
        """
        if rows is None:
            rows = policy_rows_of(storage.observations, t)
        observations = self._observation_layout.unflatten(rows) if self._nested else rows[0]
        self.output_writer.write(t, self.policy(observations), storage)


def build_loop(layout: RolloutLayout, policy: Callable[[Any], Any] | None, start: int, stop: int) -> RolloutLoop:
    """The loop of envs ``start .. stop - 1``: ``policy`` (``None``: each env samples from its own
    seeded copy of the action space) and a writer that checks its output for those envs."""
    if policy is None:
        policy = RandomActionSampler(layout.action_layout, layout.root_seed, range(start, stop))
    writer = PolicyOutputWriter(layout.action_layout, stop - start, layout.core)
    return RolloutLoop(layout.observation_layout, writer, policy)
