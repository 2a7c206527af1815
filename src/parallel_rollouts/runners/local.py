"""The policy in this process, driving a per-step stepper one row at a time."""

from __future__ import annotations

from ..data.batch_memory import BatchMemory
from ..policy.loop import RolloutLoop
from ..steppers.base import EnvStepper
from .base import RolloutResult, RolloutRunner, lost_part_way, replaced_since, restarted_envs, stepped_result

__all__ = ["LocalRunner"]


class LocalRunner(RolloutRunner):
    """For each row: policy -> checked actions -> ``stepper.step(t)`` (``serial``, ``sync``, ``async``)."""

    def __init__(self, stepper: EnvStepper, memory: BatchMemory, loop: RolloutLoop) -> None:
        self.stepper = stepper
        self.layout = stepper.layout
        self._memory = memory
        self._loop = loop

    def _collect(self) -> RolloutResult:
        memory, loop = self._memory, self._loop
        storage = memory.begin()
        self._guarded(self.stepper.begin, storage)
        # Envs of a worker replaced before this rollout start fresh episodes at its row 0: a
        # recurrent policy's state restarts with them (nothing to do for any other policy).
        replaced_before = restarted_envs(self.stepper)
        loop.restart_envs(replaced_before)
        try:
            loop.run(storage, self.stepper.step_function(), memory.policy_rows, self._break)
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
                if loop.carries_state:
                    loop.restart_envs(lost_part_way(self.stepper))
            raise
        episodes = self._guarded(self.stepper.finish)
        writer = loop.output_writer
        result = stepped_result(self.stepper, memory, episodes, bool(writer.has_values), bool(writer.has_log_probs))
        result.recurrent = loop.recurrent_record
        if loop.carries_state:
            # Envs of a worker replaced during this rollout start fresh episodes at the next one's row 0.
            loop.restart_envs(replaced_since(self.stepper, replaced_before))
        return result

    def take_warnings(self) -> list:
        return self.stepper.take_warnings()

    def _close(self) -> None:
        self._memory.release()
        self.stepper.close()
