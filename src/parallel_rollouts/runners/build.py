"""From the collector's arguments to a runner (and, for a per-step runner, its stepper)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..data.batch_memory import BatchMemory
from ..errors import ConfigurationError
from ..data.policy_inputs import policy_input_mode
from ..policy.loop import build_loop
from ..config.spec import RolloutSpec
from ..config.worker_options import WorkerOptions
from .base import RolloutRunner

__all__ = ["POLICY_PLACEMENTS", "build_runner"]

POLICY_PLACEMENTS = ("main", "workers")


def check_placement(backend: str, policy_placement: str | None, pipelined: bool) -> str:
    """The policy placement to use; rejects combinations that do not exist."""
    if policy_placement is None:
        policy_placement = "workers" if backend == "ray" else "main"
    if policy_placement not in POLICY_PLACEMENTS:
        raise ConfigurationError(
            f"`policy_placement` must be one of {POLICY_PLACEMENTS!r}; got {policy_placement!r}."
        )
    if policy_placement == "workers" and backend not in ("async", "ray"):
        raise ConfigurationError(
            f"`policy_placement='workers'` needs worker processes: backend 'async' (or 'ray'); got backend={backend!r}."
        )
    if policy_placement == "main" and backend == "ray":
        raise ConfigurationError("backend='ray' always runs the policy in its actors; omit `policy_placement`.")
    if not isinstance(pipelined, bool):
        raise ConfigurationError(f"`pipelined` must be True or False; got {pipelined!r}.")
    if pipelined and (backend != "async" or policy_placement != "main"):
        raise ConfigurationError(
            "`pipelined=True` overlaps the policy in the main process with worker processes stepping, so it "
            f"applies to backend='async' with policy_placement='main' only; got backend={backend!r}, "
            f"policy_placement={policy_placement!r}."
        )
    return policy_placement


def build_runner(
    backend: str,
    spec: RolloutSpec,
    policy: Any,
    *,
    reuse_buffers: bool,
    policy_placement: str,
    pipelined: bool,
    options: WorkerOptions,
    ray_options: dict | None,
) -> RolloutRunner:
    """The runner of ``backend`` (and placement): ``options`` already parsed at the front door."""
    if backend == "ray":
        from .ray import RayOptions, RayRunner

        parsed = RayOptions.parse(ray_options)
        if parsed.max_restarts:
            # Given as ``ray_options['max_restarts']``: the front door refuses it given twice.
            options = replace(options, max_restarts=parsed.max_restarts)
        return RayRunner(spec, policy, options=options, ray_options=parsed, reuse_buffers=reuse_buffers)
    if policy_placement == "workers":
        from .rollout_workers import RolloutWorkersRunner

        return RolloutWorkersRunner.build(spec, policy, reuse_buffers=reuse_buffers, options=options)
    if backend == "async":
        from ..steppers.processes import ProcessStepper

        # A pipelined runner has no share of the envs here: the front door's parse said so.
        stepper = ProcessStepper.build(spec, options=options)
    else:
        from ..steppers.in_process import InProcessStepper

        stepper = InProcessStepper.build(spec, backend)
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
