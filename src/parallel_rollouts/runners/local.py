"""The policy in this process, driving a per-step stepper one row at a time."""

from __future__ import annotations

from ..data.batch_memory import BatchMemory
from ..policy.loop import RolloutLoop
from ..steppers.base import RolloutStepper
from .base import ReplacedWorkers, RolloutResult, RolloutRunner, stepped_result

__all__ = ["LocalRunner"]


class LocalRunner(RolloutRunner):
    """For each row: policy -> checked actions -> ``stepper.step(t)`` (``serial``, ``sync``, ``async``)."""

    def __init__(self, stepper: RolloutStepper, memory: BatchMemory, loop: RolloutLoop, live_policy=None) -> None:
        self.live_policy = live_policy
        self.stepper = stepper
        self.layout = stepper.layout
        self._memory = memory
        self._loop = loop
        self._replaced = ReplacedWorkers(stepper)

    def _collect(self) -> RolloutResult:
        memory, loop = self._memory, self._loop
        storage = memory.begin()
        self._guarded(self.stepper.begin, storage)
        # Envs of a worker replaced before this rollout's row 0 (or during the one before) start
        # fresh episodes there: a recurrent policy's state restarts with them.
        loop.restart_envs(self._replaced.take())
        try:
            loop.run(storage, self.stepper.step_function(), self._rows(memory.policy_rows), self._break)
        except BaseException:
            if not self.broken:
                # The policy (or its output) failed before step `steps_done` ran:
                # the envs are intact, so drop the rollout and stay usable.
                memory.abandon(loop.steps_done)
                try:
                    self.stepper.abandon(loop.steps_done)
                except BaseException as abandon_error:
                    # The caller sees the policy's error (its chain intact); the
                    # abandon failure is what later calls report.
                    self._break(abandon_error)
                loop.restart_envs(self._replaced.take())
            raise
        episodes = self._guarded(self.stepper.finish)
        writer = loop.output_writer
        result = stepped_result(self.stepper, memory, episodes, bool(writer.has_values), bool(writer.has_log_probs))
        result.recurrent = loop.recurrent_record
        # Envs of a worker replaced during this rollout start fresh episodes at the next one's row 0.
        loop.restart_envs(self._replaced.take())
        return result

    def _use_policy(self, policy) -> None:
        self._loop.policy = policy

    def take_warnings(self) -> list:
        return self.stepper.take_warnings()

    def _close(self) -> None:
        self._memory.release()
        self.stepper.close()
