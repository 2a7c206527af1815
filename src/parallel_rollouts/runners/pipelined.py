"""Pipelined stepping: the policy runs on one half of the envs while workers step the other.

The envs are split into two parts along worker boundaries (part A: the first half of the
workers, part B: the rest). Per row ``t``::

    main process:  policy(A, t)  policy(B, t)  [wait A, t]  policy(A, t+1)  [wait B, t] ...
    A's workers:                 step(A, t) ...............
    B's workers:                               step(B, t) ...............

so the main process's policy call on one part overlaps the other part's step. Each env
still sees exactly the actions the policy chose from its own row ``t``, so the batch is
the full ``[T, N]`` batch ``sync`` returns for a policy that treats each row on its own;
the policy is called twice per row, on half the rows each time.

It pays when a policy call costs about as much as a step of the envs and its cost grows
with the number of rows (a wide network on the CPU); a policy whose cost is a fixed
overhead per call (a small network, a GPU launch) pays that overhead twice per row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..data.batch_memory import BatchMemory
from ..data.recurrent_record import RecurrentRecord
from ..errors import ConfigurationError
from ..policy.loop import RolloutLoop, build_loop
from ..steppers.processes import ProcessStepper
from ..data.storage import RolloutStorage
from .base import ReplacedWorkers, RolloutResult, RolloutRunner, stepped_result
from ..policy.slice_merge import merged_output_fields

__all__ = ["PipelinedRunner"]


@dataclass
class _Part:
    workers: list
    start: int
    stop: int
    loop: RolloutLoop
    steps_done: int = 0
    pending: bool = False
    columns: RolloutStorage | None = field(default=None, repr=False)


class PipelinedRunner(RolloutRunner):
    """Runs the policy in this process on alternating halves of the envs (``pipelined=True``)."""

    def __init__(self, stepper: ProcessStepper, memory: BatchMemory, policy: Any) -> None:
        workers = stepper.pool.workers
        if len(workers) < 2:
            raise ConfigurationError(
                "`pipelined=True` overlaps the policy on one half of the workers with the other half "
                f"stepping, so it needs num_workers >= 2; got {len(workers)}."
            )
        layout = stepper.layout
        self.live_policy = policy
        self.stepper = stepper
        self.layout = layout
        self._memory = memory
        self._replaced = ReplacedWorkers(stepper)
        half = len(workers) // 2
        self._parts = []
        for part_workers in (workers[:half], workers[half:]):
            start, stop = part_workers[0].start, part_workers[-1].stop
            self._parts.append(_Part(part_workers, start, stop, build_loop(layout, policy, start, stop)))

    @property
    def pool(self):
        return self.stepper.pool

    def _collect(self) -> RolloutResult:
        memory, stepper, parts = self._memory, self.stepper, self._parts
        storage = memory.begin()
        self._guarded(stepper.begin, storage)
        self._restart(self._replaced.take())
        for part in parts:
            part.columns = storage.columns(part.start, part.stop)
            part.steps_done, part.pending = 0, False
        policy_rows = self._rows(memory.policy_rows)
        try:
            for part in parts:
                part.loop.begin_rows(part.columns)
            for t in range(storage.horizon):
                for part in parts:
                    self._wait(part)
                    part.loop.act(t, part.columns, policy_rows(t, part.start, part.stop))
                    self._guarded(stepper.step_begin, t, part.workers)
                    part.pending = True
            for part in parts:
                self._wait(part)
            has_values, has_log_probs = self._optional_fields()
            for part in parts:
                part.loop.finish_rows()
        except BaseException:
            if not self.broken:
                self._drop_rollout()
                self._restart(self._replaced.take())
            raise
        finally:
            # Views of this batch held here would keep its memory from being recycled once
            # the caller drops it (BatchMemory counts references).
            for part in parts:
                part.columns = None
        episodes = self._guarded(stepper.finish)
        result = stepped_result(stepper, memory, episodes, has_values, has_log_probs)
        if self._carrying:
            result.recurrent = RecurrentRecord.merge(
                [(part.start, part.stop, part.loop.recurrent_record) for part in parts], self.layout.num_envs
            )
        self._restart(self._replaced.take())
        return result

    @property
    def _carrying(self) -> bool:
        """Whether the parts keep a recurrent policy's state (from its first rollout on)."""
        return any(part.loop.carries_state for part in self._parts)

    def _restart(self, env_indices: np.ndarray) -> None:
        """A recurrent policy's state restarts for these envs (their worker was replaced) at the next row 0."""
        if not len(env_indices):
            return
        for part in self._parts:
            inside = env_indices[(env_indices >= part.start) & (env_indices < part.stop)]
            part.loop.restart_envs(inside - part.start)

    def _wait(self, part: _Part) -> None:
        if part.pending:
            part.pending = False
            self._guarded(self.stepper.step_end, part.workers)
            part.steps_done += 1

    def _optional_fields(self) -> tuple[bool, bool]:
        writers = [part.loop.output_writer for part in self._parts]
        return merged_output_fields(
            [(writer.has_values, writer.has_log_probs) for writer in writers],
            [(part.start, part.stop) for part in self._parts],
        )

    def _drop_rollout(self) -> None:
        """The policy failed: finish the steps in flight, then drop the rollout.

        Each part stops at its own row (one part may be a step ahead); every env keeps
        its own continuous trajectory and the next rollout starts from where it stands.
        """
        try:
            for part in self._parts:
                self._wait(part)
                # A recurrent policy's state follows each part's envs to the row they stand at.
                part.loop.abandon_rows(part.steps_done)
            self._memory.abandon(max(part.steps_done for part in self._parts))
            for part in self._parts:
                self.stepper.abandon_part(part.steps_done, part.workers)
        except BaseException as error:
            # The caller sees the policy's error; this one is what later calls report.
            self._break(error)

    def _use_policy(self, policy) -> None:
        for part in self._parts:
            part.loop.policy = policy

    def take_warnings(self) -> list:
        return self.stepper.take_warnings()

    def _close(self) -> None:
        self._memory.release()
        for part in self._parts:
            part.columns = None
        self.stepper.close()
