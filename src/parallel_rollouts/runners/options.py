"""A collector's options, parsed and checked once, at construction, into one frozen object.

:meth:`CollectorOptions.parse` is the one place that checks every keyword of
:class:`~parallel_rollouts.ParallelRolloutCollector` (and so of ``make_collector``, which
forwards them) and derives what follows from them (the policy placement by default, the
batches kept for recycling, whether rollout workers yield to the learner). It raises before
any env or process exists. What follows reads the parsed values and checks nothing again: the
settings every group, worker and actor follows are held as a
:class:`~parallel_rollouts.config.spec.RolloutSpec` (declared there, once), and the runner is
built from the rest.

A new option is its check here (and a field: here when the runner or the collector reads it,
in the spec when the envs' side does), a parameter of the collector, and its reader.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..checks.observations import check_observation_check
from ..config.backends import BACKENDS, check_backend
from ..config.seeding import check_episode_seeds, draw_root_seed, validate_seed
from ..config.spec import RolloutSpec
from ..config.worker_options import WorkerOptions
from ..core.selector import load_core
from ..data.policy_inputs import check_policy_inputs
from ..errors import ConfigurationError
from ..policy.snapshot import rollout_copy, uncopyable_state

if TYPE_CHECKING:
    from .ray import RayOptions

__all__ = ["POLICY_PLACEMENTS", "CollectorOptions", "check_placement", "check_policy_lag"]

#: Every place a policy may run, in the order messages list them.
POLICY_PLACEMENTS = tuple(dict.fromkeys(place for backend in BACKENDS.values() for place in backend.policy_placements))


@dataclass(frozen=True)
class CollectorOptions:
    """Every option of a collector, checked; build it with :meth:`parse`."""

    backend: str
    #: The settings every group, worker and actor follows (seed, horizon, core, checks, what the
    #: policy reads, the batches recycled), without the env factories: :meth:`spec` adds them.
    rollout: RolloutSpec
    reuse_buffers: bool
    #: ``0`` or ``1``.
    max_policy_lag: int
    #: ``"main"`` or ``"workers"`` (the backend's default when not given).
    policy_placement: str
    pipelined: bool
    #: Worker processes' (or Ray actors') options; ``max_restarts`` from ``ray_options`` included.
    workers: WorkerOptions
    #: ``backend="ray"``: the actors' options; ``None`` otherwise.
    ray: RayOptions | None

    @property
    def in_this_process(self) -> bool:
        """Whether the envs step in this process (``serial``, ``sync``)."""
        return BACKENDS[self.backend].in_this_process

    @classmethod
    def parse(
        cls,
        *,
        num_factories: int,
        policy: Callable[[Any], Any] | None,
        backend: Any,
        horizon: Any,
        seed: Any,
        core: Any,
        info_keys: Any,
        reuse_buffers: Any,
        observation_check: Any,
        episode_seeds: Any,
        num_workers: Any,
        context: Any,
        step_timeout: Any,
        ray_options: Any,
        policy_placement: Any,
        pipelined: Any,
        max_restarts: Any,
        main_process_envs: Any,
        store_states: Any,
        max_policy_lag: Any,
        policy_inputs: Any,
    ) -> CollectorOptions:
        """Check each option (``num_factories``: the env factories), naming it, what it must be and
        what it got; raises :class:`ConfigurationError` (or ``CoreUnavailableError`` for ``core``)."""
        if policy is not None and not callable(policy):
            raise ConfigurationError(f"`policy` must be callable or None; got {policy!r}.")
        if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1:
            raise ConfigurationError(f"`horizon` must be an int >= 1; got {horizon!r}.")
        check_backend(backend, tuple(BACKENDS))
        if isinstance(info_keys, str) or not all(isinstance(key, str) for key in info_keys):
            raise ConfigurationError(f"`info_keys` must be a sequence of strings; got {info_keys!r}.")
        repeated = sorted({key for key in info_keys if list(info_keys).count(key) > 1})
        if repeated:
            raise ConfigurationError(f"`info_keys` names {repeated[0]!r} twice; list each key once.")
        policy_placement = check_placement(backend, policy_placement, pipelined)
        workers = WorkerOptions.parse(
            num_factories=num_factories, backend=backend, num_workers=num_workers, context=context,
            step_timeout=step_timeout, max_restarts=max_restarts, main_process_envs=main_process_envs,
            share_refused=_share_refused(policy_placement, pipelined),
        )
        if ray_options is not None and backend != "ray":
            raise ConfigurationError(f"`ray_options` applies to backend 'ray' only; got backend={backend!r}.")
        if max_restarts is not None and "max_restarts" in (ray_options or {}):
            raise ConfigurationError("`max_restarts` is given twice, as an argument and in `ray_options`; give it once.")
        if not isinstance(store_states, bool):
            raise ConfigurationError(f"`store_states` must be True or False; got {store_states!r}.")
        max_policy_lag = check_policy_lag(max_policy_lag, policy, policy_placement, reuse_buffers)
        root_seed = draw_root_seed() if seed is None else validate_seed(seed)
        core_name, _ = load_core(core)
        rollout = RolloutSpec(
            (), root_seed, horizon, tuple(info_keys), core_name,
            observation_check=check_observation_check(observation_check),
            episode_seeds=check_episode_seeds(episode_seeds),
            store_states=store_states,
            policy_inputs=check_policy_inputs(policy_inputs),
            # The batch the caller holds and the one being written, and with max_policy_lag=1 the
            # next one, already in flight.
            batches_recycled=2 + max_policy_lag,
            # Rollout workers lower their priority while the learner runs beside them.
            yield_to_learner=bool(max_policy_lag) and policy_placement == "workers",
        )
        ray = None
        if backend == "ray":
            # The Ray runner's module, imported only when it is chosen.
            from .ray import RayOptions

            ray = RayOptions.parse(ray_options)
            if ray.max_restarts:
                # Given as ``ray_options['max_restarts']``: refused above when given twice.
                workers = replace(workers, max_restarts=ray.max_restarts)
        return cls(backend, rollout, bool(reuse_buffers), max_policy_lag, policy_placement, pipelined, workers, ray)

    def spec(self, env_fns: Sequence[Callable[[], Any]]) -> RolloutSpec:
        """The rollout settings with the env factories: what the runner is built from."""
        return replace(self.rollout, env_fns=tuple(env_fns))


def check_placement(backend: str, policy_placement: str | None, pipelined: bool) -> str:
    """The policy placement to use (the backend's default when ``None``); rejects combinations that do not exist."""
    offered = BACKENDS[backend]
    if policy_placement is None:
        policy_placement = offered.policy_placements[0]
    if policy_placement not in POLICY_PLACEMENTS:
        raise ConfigurationError(
            f"`policy_placement` must be one of {POLICY_PLACEMENTS!r}; got {policy_placement!r}."
        )
    if policy_placement not in offered.policy_placements:
        if policy_placement == "workers":
            raise ConfigurationError(
                f"`policy_placement='workers'` needs worker processes: backend 'async' (or 'ray'); got backend={backend!r}."
            )
        raise ConfigurationError("backend='ray' always runs the policy in its actors; omit `policy_placement`.")
    if not isinstance(pipelined, bool):
        raise ConfigurationError(f"`pipelined` must be True or False; got {pipelined!r}.")
    if pipelined and (not offered.pipelined or policy_placement != "main"):
        raise ConfigurationError(
            "`pipelined=True` overlaps the policy in the main process with worker processes stepping, so it "
            f"applies to backend='async' with policy_placement='main' only; got backend={backend!r}, "
            f"policy_placement={policy_placement!r}."
        )
    return policy_placement


def _share_refused(policy_placement: str, pipelined: bool) -> str | None:
    """Why the mode chosen cannot give the main process a share of the envs (``None``: it can)."""
    if policy_placement == "workers":
        return (
            "`main_process_envs` applies to the per-step paths only; with policy_placement='workers' every env "
            "runs in a worker next to its copy of the policy"
        )
    if pipelined:
        return "`pipelined=True` runs the policy here while the workers step, so every env steps in a worker"
    return None


def check_policy_lag(max_policy_lag: Any, policy: Any, policy_placement: str, reuse_buffers: bool) -> int:
    """``max_policy_lag`` checked: 0 or 1, and a policy the background rollout can run a copy of."""
    if isinstance(max_policy_lag, bool) or max_policy_lag not in (0, 1):
        raise ConfigurationError(
            f"`max_policy_lag` must be 0 (collect, then return) or 1 (collect the next batch while the caller "
            f"learns from this one); got {max_policy_lag!r}. One runner collects one batch at a time, so a lag "
            "of 1 already keeps the envs stepping through every update; a larger one would only add staleness."
        )
    if max_policy_lag and reuse_buffers:
        raise ConfigurationError(
            "`max_policy_lag=1` collects the next batch while the caller holds this one, and `reuse_buffers=True` "
            "writes every batch into the same arrays: the batch held would be overwritten. Drop one of them."
        )
    if max_policy_lag and policy is not None and policy_placement == "main":
        # The background rollout runs a copy taken at each hand-out: checked once, here.
        problem = uncopyable_state(policy)
        if problem is not None:
            raise ConfigurationError(
                f"`max_policy_lag=1` runs the next batch on a copy of the policy taken at each hand-out, while the "
                f"caller updates the policy itself; but {problem}, which a copy cannot take with it, so the "
                "background rollout would see the learner's changes as they happen. Make the policy an object that "
                "holds what it reads as an attribute (a class with `__call__`, a `torch.nn.Module`, a bound method "
                "of an object holding the network, or `functools.partial(function, network)`), or use "
                "max_policy_lag=0."
            )
        try:
            rollout_copy(policy)
        except Exception as error:
            raise ConfigurationError(
                f"`max_policy_lag=1` runs the next batch on a copy of the policy (copy.deepcopy, sharing the random "
                "generators it holds) while the caller "
                f"updates the policy itself, but the policy cannot be copied ({type(error).__name__}: {error}). "
                "Keep locks, open files and other uncopyable state out of it (or give it a `__deepcopy__`), or "
                "use max_policy_lag=0."
            ) from error
    return int(max_policy_lag)
