"""From the collector's arguments to a runner (and, for a per-step runner, its stepper)."""

from __future__ import annotations

from typing import Any

from ..data.batch_memory import BatchMemory
from ..data.policy_inputs import policy_input_mode
from ..policy.loop import build_loop
from ..config.spec import RolloutSpec
from .base import RolloutRunner
from .options import CollectorOptions

__all__ = ["build_runner"]


def build_runner(spec: RolloutSpec, policy: Any, options: CollectorOptions) -> RolloutRunner:
    """The runner of ``options.backend`` (and placement), over the envs of ``spec``; ``options``
    were parsed at the front door and are not checked again."""
    runner = _runner(spec, policy, options)
    runner.max_policy_lag = options.max_policy_lag
    return runner


def _runner(spec: RolloutSpec, policy: Any, options: CollectorOptions) -> RolloutRunner:
    backend, reuse_buffers, pipelined = options.backend, options.reuse_buffers, options.pipelined
    if backend == "ray":
        from .ray import RayRunner

        return RayRunner(spec, policy, options=options.workers, ray_options=options.ray, reuse_buffers=reuse_buffers)
    if options.policy_placement == "workers":
        from .rollout_workers import RolloutWorkersRunner

        return RolloutWorkersRunner.build(spec, policy, reuse_buffers=reuse_buffers, options=options.workers)
    if options.in_this_process:
        from ..steppers.in_process import InProcessStepper

        stepper = InProcessStepper.build(spec, backend)
    else:
        from ..steppers.processes import ProcessStepper

        # A pipelined runner has no share of the envs here: the front door's parse said so.
        stepper = ProcessStepper.build(spec, options=options.workers)
    try:
        layout = stepper.layout
        memory = BatchMemory(
            layout.allocate_storage, reuse_buffers, stepper.working_storage, stepper.batch_segments,
            layout.batches_recycled, policy_inputs=policy_input_mode(policy, layout.policy_inputs),
        )
        if pipelined:
            from .pipelined import PipelinedRunner

            return PipelinedRunner(stepper, memory, policy)
        from .local import LocalRunner

        return LocalRunner(stepper, memory, build_loop(layout, policy, 0, layout.num_envs), policy)
    except BaseException:
        stepper.close()
        raise
