"""The per-step loop of one rollout, written once for the collector and for remote actors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import numpy as np

from .output import PolicyOutputWriter, RandomActionSampler
from .recurrent import StateCarrier, is_recurrent
from ..config.layout import RolloutLayout
from ..data.policy_inputs import mirror_rows_of, policy_input_mode, policy_rows_of
from ..data.recurrent_record import RecurrentRecord
from ..data.spaces import SpaceLayout
from ..data.storage import RolloutStorage

__all__ = ["RolloutLoop", "build_loop"]


class RolloutLoop:
    """For ``t`` in ``range(horizon)``: policy -> checked actions -> ``step(t)``.

    ``steps_done`` says how far the last :meth:`run` got, so that a caller can
    drop a rollout cleanly when the policy raises part-way.

    A recurrent policy (:func:`~parallel_rollouts.policy.recurrent.is_recurrent`) is called
    with the state of envs ``env_start ..`` that the loop's
    :class:`~parallel_rollouts.policy.recurrent.StateCarrier` keeps from row to row and from
    run to run; :attr:`recurrent_record` is then what the last completed run recorded of it.
    """

    def __init__(
        self,
        observation_layout: SpaceLayout,
        output_writer: PolicyOutputWriter,
        policy: Callable[..., Any],
        env_start: int = 0,
        store_states: bool = False,
        copy_inputs: bool = True,
    ) -> None:
        self._observation_layout = observation_layout
        #: Whether the policy gets its own copy of each row (``policy_inputs="copies"``) or a
        #: read-only view of the batch's (``"views"``, and the sampler, which only reads them).
        self.copy_inputs = copy_inputs
        self._nested = observation_layout.is_nested
        self.output_writer = output_writer
        self.policy = policy
        self.steps_done = 0
        self.recurrent_record: RecurrentRecord | None = None
        self._env_start = env_start
        self._store_states = store_states
        self._carrier: StateCarrier | None = None

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
            policy_rows = self.rows_of(storage)
        self.output_writer.reset_rollout()
        self.steps_done = 0
        if not is_recurrent(self.policy):
            self._run_rows(storage, step, policy_rows, on_step_error, None)
            return
        self.recurrent_record = None
        carrier = self.carrier(storage.rewards.shape[1])
        carrier.begin(self.policy, storage)
        try:
            self._run_rows(storage, step, policy_rows, on_step_error, carrier)
        except BaseException:
            # Dropped (the policy raised, or an interrupt landed between rows): the state follows
            # the envs to the row they stand at, where the next rollout starts.
            carrier.abandon(self.steps_done)
            raise
        self.recurrent_record = carrier.finish()

    def _run_rows(self, storage, step, policy_rows, on_step_error, carrier: StateCarrier | None) -> None:
        """The rows of :meth:`run`: the policy (through ``carrier``, which keeps a recurrent
        policy's state, where there is one), then ``step(t)``, for every row."""
        # The body of act(), inlined: one Python frame less on every row.
        write, policy, nested, unflatten = self.output_writer.write, self.policy, self._nested, self._observation_layout.unflatten
        call_with_state = None if carrier is None else carrier.call
        for t in range(storage.horizon):
            rows = policy_rows(t)
            observations = unflatten(rows) if nested else rows[0]
            write(t, policy(observations) if call_with_state is None else call_with_state(policy, t, observations), storage)
            try:
                step(t)
            except BaseException as error:
                if on_step_error is not None:
                    on_step_error(error)
                raise
            self.steps_done = t + 1

    def carrier(self, num_envs: int) -> StateCarrier:
        """The state carrier of this loop's envs (made at the first recurrent rollout)."""
        if self._carrier is None:
            self._carrier = StateCarrier(num_envs, self._env_start, self._store_states)
        return self._carrier

    @property
    def carries_state(self) -> bool:
        """Whether this loop keeps a recurrent policy's state (from its first recurrent run on)."""
        return self._carrier is not None

    def restart_envs(self, env_indices) -> None:
        """These envs (indices within the loop) start fresh episodes at the next run's row 0."""
        if self._carrier is not None and len(env_indices):
            self._carrier.restart(env_indices)

    def begin_rows(self, storage: RolloutStorage) -> None:
        """Before the first :meth:`act` of a rollout driven row by row (the pipelined runner)."""
        self.output_writer.reset_rollout()
        self.recurrent_record = None
        if is_recurrent(self.policy):
            self.carrier(storage.rewards.shape[1]).begin(self.policy, storage)

    def finish_rows(self) -> None:
        """After the last step of a rollout driven row by row: :attr:`recurrent_record`."""
        if is_recurrent(self.policy):
            self.recurrent_record = self._carrier.finish()

    def abandon_rows(self, steps_done: int) -> None:
        """A rollout driven row by row was dropped after ``steps_done`` steps of this loop's envs."""
        if self._carrier is not None:
            self._carrier.abandon(steps_done)

    def rows_of(self, storage: RolloutStorage, read_only_observations=None) -> Callable[[int], list[np.ndarray]]:
        """``t`` -> row ``t`` of ``storage``'s observations as this loop hands it to the policy:
        private read-only copies, or read-only views with ``policy_inputs="views"``; rows of
        ``read_only_observations`` (the same memory mapped read-only) when given and the loop
        copies, since nothing the policy does reaches the storage through them."""
        if read_only_observations is not None and self.copy_inputs:
            return lambda t: mirror_rows_of(read_only_observations, storage.observations, t)
        observations, copies = storage.observations, self.copy_inputs
        return lambda t: policy_rows_of(observations, t, copies=copies)

    def act(self, t: int, storage: RolloutStorage, rows: list[np.ndarray] | None = None) -> None:
        """Call the policy on ``rows`` (default: row ``t`` as the loop hands it out, private
        read-only copies unless ``policy_inputs="views"``); write its checked output into row ``t``.
        A recurrent policy's rollout is begun with :meth:`begin_rows`.
        """
        if rows is None:
            rows = policy_rows_of(storage.observations, t, copies=self.copy_inputs)
        observations = self._observation_layout.unflatten(rows) if self._nested else rows[0]
        if self._carrier is not None and is_recurrent(self.policy):
            output = self._carrier.call(self.policy, t, observations)
        else:
            output = self.policy(observations)
        self.output_writer.write(t, output, storage)


def build_loop(layout: RolloutLayout, policy: Callable[[Any], Any] | None, start: int, stop: int) -> RolloutLoop:
    """The loop of envs ``start .. stop - 1``: ``policy`` (``None``: each env samples from its own
    seeded copy of the action space) and a writer that checks its output for those envs."""
    # A loop's rows are copies unless they may be views, or the storage a run reads comes with a
    # read-only mirror (a rollout worker's segment: RolloutLoop.rows_of); an actor's batch has none.
    copy_inputs = policy_input_mode(policy, layout.policy_inputs) != "views"
    if policy is None:
        policy = RandomActionSampler(layout.action_layout, layout.root_seed, range(start, stop))
    writer = PolicyOutputWriter(layout.action_layout, stop - start, layout.core, layout.column_agents[start:stop], start)
    return RolloutLoop(layout.observation_layout, writer, policy, start, layout.store_states, copy_inputs)
