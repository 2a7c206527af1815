"""The Ray backend: rollout workers as Ray actors, on an existing cluster or a local one.

A per-step round trip through a cluster costs far more than an env step, so an
actor runs a whole rollout: it owns a contiguous slice of the envs, holds a
copy of the policy, and runs the same
:class:`~parallel_rollouts.policy.slice_rollout.SliceRollout` as the async
backend's rollout workers (the ``RolloutLoop`` over an
:class:`~parallel_rollouts.groups.EnvGroup` that the ``sync`` backend runs).
The whole policy travels at start-up; each
``collect()`` then brings every actor's copy up to date with the driver's
(:mod:`~parallel_rollouts.policy.shipping`, as for the async backend's
rollout workers: only what changed travels), gathers the slices and
assembles them along the env axis.

Seeds and random actions are per env, so with a deterministic policy whose
output for an env's row does not depend on the other rows it is called with
(their number included) the batch equals ``sync``'s bit for bit; see
docs/distributed-backend.md for when that holds.

With ``step_timeout``, a rollout that takes an actor longer than
``horizon * step_timeout`` seconds raises :class:`StepTimeoutError`: actors
do not report single steps, so the bound is on the whole rollout.

With ``max_restarts``, a dead actor is replaced by a new one whose envs start
fresh episodes with seeds from a stream of their own, never handed out before
(deterministic: :mod:`~parallel_rollouts.config.seeding`), and the batch of the rollout
it died in lists its envs in ``lost_env_indices`` with their rows invalid.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, fields, replace
from typing import Any

import cloudpickle
import numpy as np

from ..data.batch_memory import BatchMemory
from ..data.recurrent_record import RecurrentRecord
from ..groups import GroupChain, build_groups, check_replacement_columns, make_all, resolve_layout, spaces_per_env
from ..checks.failures import losses_beyond_restarts, merged_failure, timed_out, worker_died
from ..groups.single_envs import close_each, describe_failure
from ..errors import ConfigurationError, StepTimeoutError, WorkerDiedError, WorkerError
from ..processes.forwarded_warnings import WarningRecorder
from ..processes.slicing import pickle_env_fns, resolve_num_workers, split_envs, usable_cores
from ..config.layout import RolloutLayout
from ..config.spec import RolloutSpec
from ..config.worker_options import WorkerOptions
from ..data.storage import CompletedEpisodes
from .base import RemoteRolloutRunner, RolloutResult
from ..policy.shipping import PolicyReplica, PolicyShipper, PolicySnapshot
from ..policy.slice_merge import merged_output_fields
from ..policy.slice_rollout import PolicyFailed, SliceRollout

__all__ = ["RayOptions", "RayRunner"]

logger = logging.getLogger("parallel_rollouts")

#: Seconds to wait for actors to be placed and start before reporting the cluster short of resources.
START_TIMEOUT = 60.0


@dataclass(frozen=True)
class RayOptions:
    """Options of ``backend="ray"`` (pass as ``ray_options={...}``).

    address: join this cluster (``"auto"`` or ``"ray://host:port"``); ``None`` joins
        the cluster this process already initialised, else starts a local one.
    num_cpus, num_gpus: resources reserved by each actor.
    max_restarts: how many dead actors may be replaced over the collector's life (the same as the
        collector's ``max_restarts`` argument; give one or the other).
    runtime_env: each actor's Ray runtime environment (``{"pip": [...], "env_vars": {...},
        "working_dir": ...}``), as ``ray.remote(...).options(runtime_env=...)`` takes it.
    scheduling_strategy: where Ray places each actor (``"SPREAD"``, a
        ``PlacementGroupSchedulingStrategy``, a ``NodeAffinitySchedulingStrategy``), passed as is.
    continue_without_lost_actors: once ``max_restarts`` is spent, keep collecting with the
        actors left instead of raising: a lost actor's envs stay lost (zero, ``valid`` false,
        listed in ``lost_env_indices``) in every later batch.
    """

    address: str | None = None
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    max_restarts: int = 0
    runtime_env: dict | None = None
    scheduling_strategy: Any = None
    continue_without_lost_actors: bool = False

    @classmethod
    def parse(cls, options: dict | None) -> RayOptions:
        options = dict(options or {})
        known = [item.name for item in fields(cls)]
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ConfigurationError(f"unknown `ray_options` key(s) {unknown!r}; expected some of {', '.join(known)}.")
        parsed = cls(**options)
        if parsed.runtime_env is not None and not isinstance(parsed.runtime_env, dict):
            raise ConfigurationError(f"`ray_options['runtime_env']` must be a dict; got {parsed.runtime_env!r}.")
        if not isinstance(parsed.continue_without_lost_actors, bool):
            raise ConfigurationError(
                f"`ray_options['continue_without_lost_actors']` must be True or False; got {parsed.continue_without_lost_actors!r}."
            )
        for name in ("num_cpus", "num_gpus"):
            value = getattr(parsed, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigurationError(f"`ray_options[{name!r}]` must be a number >= 0; got {value!r}.")
        if isinstance(parsed.max_restarts, bool) or not isinstance(parsed.max_restarts, int) or parsed.max_restarts < 0:
            raise ConfigurationError(f"`ray_options['max_restarts']` must be an int >= 0; got {parsed.max_restarts!r}.")
        return parsed


class SliceActor:
    """Runs one slice of the envs for whole rollouts (wrapped by ``ray.remote`` at run time)."""

    def __init__(self, pickled_env_fns: list[bytes], env_offset: int, incarnation: int) -> None:
        # The index of the slice's first factory; start() replaces it by its first column
        # (they differ when a factory returns a vector env or a multi-agent env).
        self._env_offset = env_offset
        self._incarnation = incarnation
        # This slice's layout, from the collector's one (start()).
        self._layout: RolloutLayout | None = None
        # The envs are made by the first method call, not here: Ray reports an exception
        # raised in an actor's constructor only as the actor's death, while one raised in a
        # method reaches the caller as itself (a WorkerError naming the env and its factory).
        self._pickled_env_fns = pickled_env_fns
        self._envs: list | None = None
        # Warnings raised here travel back with each reply and are raised in the driver.
        self._warnings = WarningRecorder()
        self._warnings.install()
        self._group: GroupChain | None = None
        self._rollout: SliceRollout | None = None

    def _make_envs(self) -> list:
        if self._envs is None:
            # Each factory named by its index; one env object behind several indices is refused.
            self._envs = make_all([cloudpickle.loads(pickled) for pickled in self._pickled_env_fns], self._env_offset)
        return self._envs

    def spaces(self) -> list[tuple[Any, Any]]:
        """The spaces of every column of the slice (a vector or multi-agent env spans several)."""
        return spaces_per_env(self._make_envs())

    def start(self, layout: RolloutLayout, policy: PolicySnapshot | None, columns: tuple[int, int], who: str) -> list:
        """Build the slice's groups over batch columns ``columns`` (``(start, stop)``) and reset its envs;
        return the warnings raised meanwhile. A replacement whose envs span other columns is refused."""
        envs = self._make_envs()
        check_replacement_columns(spaces_per_env(envs), columns[0], columns[1], layout, who)
        column_offset = self._env_offset = columns[0]
        groups = build_groups(envs, column_offset, [(0, len(envs))], layout, self._incarnation)
        columns = groups[-1][1]
        # The actor returns storage of its own columns only.
        self._layout = replace(layout, num_envs=columns)
        self._group = GroupChain(groups)
        self._group.reset_all()
        # No policy: SliceRollout samples random actions per env.
        self._replica = None
        if policy is not None:
            self._replica = PolicyReplica(layout.root_seed, self._env_offset)
            self._replica.apply(policy)
        self._rollout = SliceRollout(
            self._group,
            self._env_offset,
            columns,
            layout,
            None if self._replica is None else self._replica.policy,
        )
        return self._warnings.take()

    def collect(self, policy: PolicySnapshot | None):
        if self._replica is not None:
            self._replica.apply(policy)
            self._rollout.loop.policy = self._replica.policy
        storage = self._layout.allocate_storage()
        try:
            result = self._rollout.run(storage)
        except PolicyFailed as failed:
            # Reported as the policy raised it; the runner breaks on any actor failure.
            raise failed.error from None
        return (
            storage, result.episodes, result.has_values, result.has_log_probs, self._warnings.take(), result.recurrent,
        )

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> list:
        if self._group is not None:
            errors = self._group.close()
        else:  # made, but start() never built the group
            errors = close_each(self._envs or [], self._env_offset)
        return [describe_failure(index, "close", error) for index, error in errors]


def _import_ray():
    try:
        import ray
    except ImportError as error:
        raise ConfigurationError(
            "backend='ray' needs Ray, which is not installed. Install it with "
            "`pip install \"parallel-rollouts[ray]\"` (or `pip install ray`)."
        ) from error
    return ray


class _LocalRay:
    """Reference count of collectors using a local Ray instance that this library started."""

    started_here = False
    users = 0

    @classmethod
    def acquire(cls, ray, address: str | None) -> bool:
        """Make sure Ray is initialised; return whether this collector shares our local instance."""
        if not ray.is_initialized():
            if address is not None:
                ray.init(address=address, log_to_driver=False)
                return False
            ray.init(num_cpus=usable_cores(), include_dashboard=False, log_to_driver=False)
            cls.started_here = True
        if cls.started_here:
            cls.users += 1
            return True
        return False

    @classmethod
    def release(cls, ray) -> None:
        cls.users -= 1
        if cls.users == 0 and cls.started_here:
            cls.started_here = False
            ray.shutdown()


class RayRunner(RemoteRolloutRunner):
    def __init__(
        self,
        spec: RolloutSpec,
        policy: Any,
        *,
        options: WorkerOptions,
        ray_options: RayOptions,
        reuse_buffers: bool = False,
    ) -> None:
        self._ray = ray = _import_ray()
        self._reuse_buffers = reuse_buffers
        self._options = ray_options
        self._step_timeout = options.step_timeout
        self._max_restarts = options.max_restarts
        self._uses_local_ray = False
        self._actors: list = []
        self._restarts_left = options.max_restarts
        #: Every actor lost over the collector's life, in order (one error each).
        self._deaths: list[WorkerError] = []
        # Warnings the actors raised, returned with their results (take_warnings).
        self._forwarded: list = []
        self._shipper = None if policy is None else PolicyShipper(policy, "backend='ray' ships the policy to every actor")
        # Checked here, before any actor starts, so that an unpicklable policy fails fast.
        initial_policy = None if self._shipper is None else self._shipper.snapshot()
        self._pickled_env_fns = pickle_env_fns(spec.env_fns, "a Ray actor")
        self._slices = split_envs(spec.num_factories, resolve_num_workers(options.num_workers, spec.num_factories))
        # Each actor's columns of the batch: its factories' until their envs report how many
        # columns they span (a vector env its num_envs, a multi-agent env its agents).
        self._columns = list(self._slices)
        # How many times each slice's actor was replaced: a replacement's envs draw their
        # episode seeds from that incarnation's stream, never handed out before.
        self._incarnations = [0] * len(self._slices)
        self._uses_local_ray = _LocalRay.acquire(ray, ray_options.address)
        self._actor_class = ray.remote(SliceActor)
        try:
            self._actors = [self._create_actor(index) for index in range(len(self._slices))]
            spaces_references = [actor.spaces.remote() for actor in self._actors]
            self._wait_for_placement(spaces_references)
            parts = self._get_all(spaces_references)
            self._columns, column = [], 0
            for part in parts:
                self._columns.append((column, column + len(part)))
                column += len(part)
            self.layout = resolve_layout(spec, [column for part in parts for column in part])
            # The actors' slices come back as new arrays and are copied into the batch's columns.
            # No policy reads rows here (each actor copies its own): no read-only mirror to allocate.
            self._memory = BatchMemory(
                self.layout.allocate_storage, self._reuse_buffers, pool_size=self.layout.batches_recycled, policy_inputs="copies"
            )
            policy_reference = None if initial_policy is None else ray.put(initial_policy)
            started = self._get_all([self._start(index, policy_reference) for index in range(len(self._actors))])
            self._forwarded.extend(record for records in started for record in records)
        except BaseException:
            self.close()
            raise

    def _create_actor(self, index: int):
        start, stop = self._slices[index]
        options = {"num_cpus": self._options.num_cpus}
        if self._options.num_gpus:
            options["num_gpus"] = self._options.num_gpus
        if self._options.runtime_env is not None:
            options["runtime_env"] = self._options.runtime_env
        if self._options.scheduling_strategy is not None:
            options["scheduling_strategy"] = self._options.scheduling_strategy
        return self._actor_class.options(**options).remote(
            self._pickled_env_fns[start:stop], start, self._incarnations[index]
        )

    def _wait_for_placement(self, references: list) -> None:
        """Fail clearly, instead of waiting forever, when the cluster cannot host the actors."""
        ray = self._ray
        _, pending = ray.wait(references, num_returns=len(references), timeout=START_TIMEOUT)
        if pending:
            raise ConfigurationError(
                f"{len(pending)} of {len(references)} Ray actors did not start within {START_TIMEOUT:.0f} s. "
                f"Each asks for num_cpus={self._options.num_cpus}"
                + (f", num_gpus={self._options.num_gpus}" if self._options.num_gpus else "")
                + f"; the cluster has {ray.available_resources()!r} available. Lower `num_workers` or "
                "`ray_options['num_cpus']`, or add nodes."
            )

    def _start(self, index: int, policy_reference):
        return self._actors[index].start.remote(self.layout, policy_reference, self._columns[index], self._describe(index))

    def _describe(self, index: int) -> str:
        start, stop = self._columns[index]
        return f"Ray actor {index} (envs {start}..{stop - 1})"

    def _wait(
        self, references: list, timeout: float | None = None, actor_indices: list[int] | None = None
    ) -> tuple[list, list, BaseException | None]:
        """``ray.get`` each reference: ``(results, [(index, death)], first other error)``.

        Ray's wrappers are unwrapped: an env's ``WorkerError`` or the policy's own
        exception comes back as itself. References not ready within ``timeout``
        seconds give a :class:`StepTimeoutError` (unless another error came first);
        ``actor_indices[k]`` is the actor of ``references[k]`` (default: ``k``).
        """
        ray = self._ray
        if timeout is not None:
            _, pending = ray.wait(references, num_returns=len(references), timeout=timeout)
            if pending:
                actor_of = actor_indices or list(range(len(references)))
                late = [position for position, reference in enumerate(references) if reference in pending]
                replaceable = len(late) <= self._restarts_left or self._options.continue_without_lost_actors
                for position in late:
                    # They may never return.
                    self._kill(actor_of[position])
                on_time = [position for position in range(len(references)) if position not in late]
                results_on_time, dead_on_time, failure = self._wait([references[position] for position in on_time])
                if not replaceable:
                    return [], [], failure or self._timed_out([actor_of[position] for position in late], False)
                # The actors that overran count as lost (killed above); the others' rollouts stand.
                results = [None] * len(references)
                for position, result in zip(on_time, results_on_time):
                    results[position] = result
                dead = [(on_time[position], death) for position, death in dead_on_time]
                # One loss per actor, each naming its own envs.
                late_losses = [(position, self._timed_out([actor_of[position]], True)) for position in late]
                return results, dead + late_losses, failure
        results, dead, failure = [], [], None
        for index, reference in enumerate(references):
            try:
                results.append(ray.get(reference))
                continue
            except ray.exceptions.RayActorError as death:
                dead.append((index, death))
            except ray.exceptions.RayTaskError as task_error:
                cause = getattr(task_error, "cause", None)
                failure = failure or (cause if isinstance(cause, BaseException) else task_error)
            results.append(None)
        return results, dead, failure

    def _timed_out(self, indices: list[int], replaced: bool) -> StepTimeoutError:
        """The error for actors whose rollout overran (and that were killed)."""
        return timed_out(
            ", ".join(self._describe(index) for index in indices),
            f"a rollout of horizon={self.layout.horizon} within "
            f"horizon * step_timeout = {self.layout.horizon * self._step_timeout:g} s",
            [env for index in indices for env in range(*self._columns[index])],
            suspects="its envs (or the policy)",
            outcome="The actors were killed"
            + (" and are replaced (max_restarts)." if replaced else " and the collector is now unusable."),
        )

    def _lost(self, index: int, death: BaseException, when: str) -> WorkerError:
        """The error for actor ``index`` lost ``when``: a timeout as it is, a death named (Ray's cause kept)."""
        if isinstance(death, WorkerError):
            return death
        envs = range(*self._columns[index])
        failures = [describe_failure(env, "worker", death) for env in envs]
        return worker_died(self._describe(index), envs, "died", when, failures=failures)

    def _get_all(self, references: list, actor_indices: list[int] | None = None) -> list:
        """``ray.get`` each reference; ``actor_indices[k]`` is the actor of ``references[k]``
        (default: ``k``), so that a death names the actor it happened to."""
        results, dead, failure = self._wait(references)
        if failure is not None:
            raise failure
        if dead:
            actor_of = actor_indices or list(range(len(references)))
            raise merged_failure([self._lost(actor_of[position], death, "while starting up.") for position, death in dead])
        return results

    def _stop_in_flight(self) -> None:
        # Closing kills the actors; their rollouts in flight go with them.
        self._in_flight = None

    def _send_rollout(self) -> tuple[list[int], list]:
        """Ship the policy's changes and start every live actor's rollout; the actors and their calls."""
        # Serialised once (an unserialisable policy raises here, before anything ran).
        snapshot = None if self._shipper is None else self._shipper.snapshot()
        policy = None if snapshot is None or snapshot.empty else self._ray.put(snapshot)
        live = [index for index, actor in enumerate(self._actors) if actor is not None]
        return live, [self._actors[index].collect.remote(policy) for index in live]

    def _receive_rollout(self, live: list[int], calls: list) -> RolloutResult:
        """Wait for the actors' rollouts :meth:`_send_rollout` started; merge them."""
        timeout = None if self._step_timeout is None else self.layout.horizon * self._step_timeout
        try:
            answers, dead, failure = self._wait(calls, timeout, live)
            parts = [None] * len(self._actors)
            for index, answer in zip(live, answers):
                parts[index] = answer
            dead = [(live[position], death) for position, death in dead]
        except BaseException as interrupted:
            # Ctrl-C (or anything else) while the actors run: their rollouts finish
            # unseen, so the next batch would not follow this one.
            self._break(interrupted)
            raise
        if failure is not None:
            # Actors run their rollouts independently: when one fails part-way (an env,
            # or the policy) the others have already stepped on, so the envs no longer
            # share a row to continue from. Any failure therefore breaks the collector.
            self._break(failure)
            raise failure
        if dead:
            # A replacement that cannot start (its factory raises, no room on the cluster)
            # leaves those envs without an actor: broken.
            self._guarded(self._restart, dead)
        return self._assemble(parts)

    def _restart(self, dead: list) -> None:
        losses = [self._lost(index, death, "while running its rollout.") for index, death in dead]
        self._deaths.extend(losses)
        error = losses_beyond_restarts(losses, self._deaths, self._max_restarts, self._restarts_left)
        if error is not None:
            if not self._options.continue_without_lost_actors:
                self._break(error)
                raise error
            # Asked to go on with fewer actors: the restarts left go to the first, the rest stay lost.
            kept, dead = dead[: self._restarts_left], dead[self._restarts_left :]
            for index, _ in dead:
                logger.warning("%s; its envs stay lost in every later batch", error)
                self._kill(index)
                self._actors[index] = None
            dead = kept
        for index, _ in dead:
            while True:
                try:
                    self._start_replacement(index)
                    break
                except WorkerDiedError as death:
                    # The replacement died while starting up: a loss like any other.
                    self._deaths.append(death)
                    error = losses_beyond_restarts([death], self._deaths, self._max_restarts, self._restarts_left)
                    if error is None:
                        continue
                    if not self._options.continue_without_lost_actors:
                        raise error from death
                    # Asked to go on with fewer actors: this one's envs stay lost.
                    logger.warning("%s; its envs stay lost in every later batch", error)
                    self._kill(index)
                    self._actors[index] = None
                    break

    def _start_replacement(self, index: int) -> None:
        self._restarts_left -= 1
        logger.warning("%s died; restarting it with fresh episodes", self._describe(index))
        self._kill(index)
        self._incarnations[index] += 1
        self._actors[index] = self._create_actor(index)
        policy = None if self._shipper is None else self._ray.put(self._shipper.resend())
        started = [self._start(index, policy)]
        self._wait_for_placement(started)
        self._forwarded.extend(record for records in self._get_all(started, [index]) for record in records)

    def _kill(self, index: int) -> None:
        try:
            self._ray.kill(self._actors[index])
        except Exception:
            logger.debug("killing a Ray actor failed", exc_info=True)

    def _assemble(self, parts: list) -> RolloutResult:
        memory = self._memory
        storage = memory.begin()
        episodes, lost, fields, field_slices, recurrent = [], [], [], [], []
        for (start, stop), part in zip(self._columns, parts):
            if part is None:
                lost.extend(range(start, stop))
                continue
            slice_storage, slice_episodes, values, log_probs, records, slice_recurrent = part
            recurrent.append((start, stop, slice_recurrent))
            self._forwarded.extend(records)
            slice_storage.copy_to(storage.columns(start, stop))
            episodes.append(slice_episodes)
            fields.append((values, log_probs))
            field_slices.append((start, stop))
        try:
            # Every actor ran its whole rollout: the envs stand at the horizon, so a refused
            # batch is dropped and the next collect continues from there.
            has_values, has_log_probs = merged_output_fields(fields, field_slices)
        except BaseException:
            memory.abandon(self.layout.horizon)
            raise
        merged = CompletedEpisodes.merge(episodes) if episodes else CompletedEpisodes.empty_buffers(0)
        lost_from_rows = None
        if lost:
            # An actor runs its rollout unseen: a lost one loses the slice's whole rollout.
            lost_from_rows = np.full(self.layout.num_envs, self.layout.horizon, dtype=np.int64)
            lost_from_rows[lost] = -1
        return RolloutResult(
            memory.finish(lost_from_rows), merged, has_values, has_log_probs, np.asarray(lost, dtype=np.int64),
            lost_from_rows=lost_from_rows, recurrent=RecurrentRecord.merge(recurrent, self.layout.num_envs),
        )

    def take_warnings(self) -> list:
        forwarded, self._forwarded = self._forwarded, []
        return forwarded

    def _close(self) -> None:
        """Kill the actors this collector created; leave a cluster it joined running."""
        ray = self._ray
        for actor in self._actors:
            if actor is None:
                continue
            try:
                for failure in ray.get(actor.close.remote(), timeout=2.0):
                    logger.warning("an env raised while closing: %s", failure.describe())
            except Exception:
                logger.debug("closing a Ray actor's envs failed", exc_info=True)
            try:
                ray.kill(actor)
            except Exception:
                logger.debug("killing a Ray actor failed", exc_info=True)
        self._actors = []
        if self._uses_local_ray:
            self._uses_local_ray = False
            _LocalRay.release(ray)
