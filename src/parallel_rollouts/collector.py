"""ParallelRolloutCollector: the backend-agnostic rollout loop."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from gymnasium import Env, Space

from .data.batch import RolloutBatch
from .data.columns import column_env_indices, warn_env_name_holds_columns
from .errors import CollectorClosedError, ConfigurationError
from .processes.forwarded_warnings import raise_again
from .runners.base import RolloutRunner, RunnerState
from .runners.build import build_runner
from .runners.options import CollectorOptions
from .config import backends
from .config.backends import steps_in_this_process
from .config.build_progress import BuildProgress, check_memory_before_building
from .config.memory import warn_if_batch_too_large
from .groups.vector_source import check_vector_env, is_vector_env

__all__ = ["BACKENDS", "ParallelRolloutCollector"]

#: The backend names the collector takes, in the order messages list them (the table of what each
#: one is and takes: :data:`parallel_rollouts.config.backends.BACKENDS`).
BACKENDS = tuple(backends.BACKENDS)

logger = logging.getLogger("parallel_rollouts")


class ParallelRolloutCollector:
    """Collects fixed-shape rollouts from a list of Gymnasium envs.

    Parameters
    ----------
    env_fns:
        One zero-argument callable per env, each returning a ``gymnasium.Env``.
        Every env must declare the same observation and action spaces. Or
        Gymnasium vector envs: a ``gymnasium.vector.VectorEnv`` instance
        (``serial``/``sync``; the collector closes it), or callables each
        returning one (with ``async`` and ``ray`` each worker hosts a contiguous
        share of them, e.g. one each). The batch then has one env column per
        sub-env; see ``docs/vector-envs.md`` for each autoreset mode. Or callables
        each returning a PettingZoo ``ParallelEnv`` (multi-agent): one column per
        agent of ``possible_agents``, ``batch.valid`` false where an agent is not
        live (see ``docs/multi-agent.md`` and :attr:`column_agents`).
    policy:
        ``policy(observations) -> actions`` or ``-> PolicyOutput(actions, values,
        log_probs)``, called once per step with the batched observations
        ``[num_envs, ...]`` (read-only NumPy arrays, a dict/tuple of them for
        Dict/Tuple spaces: a copy of the row made for that call alone, on every
        backend and with ``reuse_buffers`` either way, which the policy may keep).
        PyTorch tensors are accepted in what it returns.
        ``None`` samples each env's action from its own seeded copy of the action
        space. A policy with a callable ``initial_state(num_envs)`` attribute is
        recurrent (:class:`RecurrentPolicy`): it is called as
        ``policy(observations, state, episode_starts) -> (output, next_state)``, the
        collector resets and carries its state, and the batch records it
        (``initial_state``, ``episode_starts``, ``final_states``,
        ``bootstrap_states``); see ``docs/recurrent.md``.
    backend:
        ``"serial"`` (reference), ``"sync"`` (all envs in this process),
        ``"async"`` (worker processes writing into shared memory) or ``"ray"``
        (Ray actors running whole rollouts, on a cluster or locally).
    horizon:
        Steps per env in each ``collect()``.
    seed:
        Root seed of every env's episode seeds and action sampler; ``None`` draws
        one, readable afterwards as :attr:`seed`.
    core:
        ``"auto"``, ``"compiled"`` or ``"python"``: the per-step hot path to use.
    info_keys:
        Scalar ``info`` entries to store in ``batch.infos`` as ``[T, N]`` float64.
    reuse_buffers:
        If true, every ``collect()`` writes into the same arrays (for ``async``,
        views of its shared memory: no copy at all), so a batch is overwritten by
        the next ``collect()`` (the arrays the policy was called with are its own
        copies either way).
        Off by default: a returned batch, and every array handed to the policy,
        are yours to keep.
    observation_check:
        What to do when an env returns an observation value outside its space,
        checked at the step that writes it, before the policy sees it:
        ``"warn"`` (default) warns once per env and leaf
        (:class:`ObservationWarning`) for finite floats outside a float ``Box``'s
        bounds, which real envs often overshoot, and raises
        :class:`ObservationError` for NaN and for values outside integer spaces;
        ``"raise"`` raises for every value outside; ``"off"`` skips the check.
        Wrong shapes, non-numeric values and conversions that would change a
        value always raise.
    episode_seeds:
        ``"every"`` (default): every episode starts with ``reset(seed=...)``, its
        seed drawn from ``seed``, the env index and the episode number, and
        recorded (``step_episode_seeds``, ``episode_seeds``), so any episode can
        be replayed alone. ``"first"``: only each env's first episode is seeded;
        later episodes start with ``reset()``, continuing the env's own generator,
        and are recorded with seed -1. The batch is still reproducible from
        ``seed``; what is lost is replaying one later episode alone. It saves the
        generator Gymnasium builds per seeded reset (about 40 µs; measured in
        ``docs/benchmarks.md``). Vector-env sources: applies to the resets the
        collector makes (``Disabled`` autoreset mode).
    num_workers:
        Async and Ray backends: worker processes / actors, each owning a
        contiguous slice of the envs (default ``min(usable cores, num_envs)``:
        the cores this process may run on, after CPU affinity and a container's
        CPU quota, not the machine's count; one fewer when this process steps a
        share of the envs itself, see ``main_process_envs``).
    policy_placement:
        Where the policy runs. ``"main"`` (default for serial, sync and async): in
        this process, batched over all envs, once per step. ``"workers"`` (async;
        always so for ray): each worker process holds its own copy and runs whole
        rollouts of its slice, one exchange per ``collect()``; the policy must be
        picklable. At every ``collect()`` each copy is brought to the policy's
        state at that moment (weights, buffers, attributes, ``train()`` / ``eval()``
        modes; only what changed travels), and each copy's random generators are
        its own, seeded from ``seed`` and its slice. Pays for cheap envs with a
        cheap CPU policy; keep a GPU policy in the main process.
    main_process_envs:
        Async backend, policy in the main process, not pipelined: how many envs (the
        first ones) this process steps itself while the workers step the rest, so that
        ``C`` cores run ``C`` processes rather than ``C + 1``. Default: with
        ``num_workers``, ``step_timeout`` and ``max_restarts`` unset, an equal share of
        ``min(usable cores, num_envs)`` shares (on 2 cores: half the envs here, half in
        one worker); otherwise ``0``. ``0`` keeps every env in a worker. The envs of this
        share are not isolated: a crash in one is this process's crash, as with ``sync``,
        and ``step_timeout`` cannot interrupt them; ``close()`` closes them in this
        thread, so one that hangs in its own ``close()`` hangs ``close()`` (a worker's is
        bounded). Results are the same either way.
    pipelined:
        Async backend with the policy in the main process: split the envs into two
        halves (by worker) and run the policy on one half while the workers step
        the other. Pays when a policy call costs about as much as a step of the
        envs and grows with the number of rows. Needs ``num_workers >= 2``.
    context:
        Async backend only: multiprocessing start method (default ``"spawn"``
        everywhere).
    step_timeout:
        Async and Ray backends: seconds to wait for one step before raising
        :class:`StepTimeoutError` (``None``, the default, waits as a plain call
        into the env would). Ray actors run whole rollouts, so there the bound
        is ``horizon * step_timeout`` per rollout.
    max_restarts:
        Async and Ray backends: how many lost workers (a process that died: a
        signal, an exit, an out-of-memory kill; or one whose envs overran
        ``step_timeout``) may be replaced over the collector's life (default 0:
        a loss breaks the collector). A replacement makes its envs anew with the
        same factories; they start fresh episodes with seeds never used before,
        drawn from ``seed``. The batch of the rollout a worker was lost in marks
        its envs' rows from the loss on as not ``valid`` (zeroed) and lists the
        envs in ``lost_env_indices``; ``async`` keeps the rows written before the
        loss (rollout workers: all but the last row they recorded), Ray actors
        lose the slice's whole rollout. A worker found dead at the start of a
        collect is replaced before any row (``async``): that batch is whole and
        lists its envs. Once the restarts are spent, a loss raises a
        :class:`WorkerDiedError` listing every loss. See ``docs/async-backend.md``.
    store_states:
        With a recurrent policy, also store the state the policy was given at
        every row (``batch.states``, ``[T, N, ...]`` per leaf; default off).
    max_policy_lag:
        ``0`` (default): ``collect()`` collects, then returns; the learner and the envs take
        turns. ``1``: ``collect()`` returns the batch collected in the background and, before
        returning, starts the next one with the policy as it is at that moment, so the envs
        step while the caller learns from the batch it holds. Each batch is then acted on by
        the policy as it was one ``collect()`` earlier: ``batch.policy_versions`` records it
        (see ``docs/training.md``). Every backend and mode: the per-step modes run the policy
        on a copy (``copy.deepcopy`` taken at each hand-out, sharing the random generators the
        policy holds, so that their streams go on as in turn-taking) on a background thread of
        this process; rollout workers and Ray actors run their rollouts between the request and
        its reply, with the snapshot shipped at the hand-out (rollout workers then lower their
        scheduling priority, ``os.nice(10)``, so that the learner keeps its core). A function
        policy that reads live state from its globals or closure is refused (a copy cannot
        take it along). Not with ``reuse_buffers`` (the batch in flight would overwrite the
        one held).
    policy_inputs:
        What the policy is called with. ``"protected"`` (default): rows no write of the
        policy's reaches. A leaf whose row is at least 16 KiB (frames) is read through a second,
        read-only mapping of the batch's memory, with no copy: NumPy refuses a write, and an
        in-place PyTorch operation on ``torch.from_numpy(obs)`` stops the process with a
        segmentation fault before anything reaches the batch. A leaf with smaller rows, or one
        that cannot be mapped twice (no ``memfd_create``; Ray actors; the shared working copy
        with ``reuse_buffers=True`` on ``async``), is copied. ``"copies"``: each row copied
        for that call alone; a torch write lands in the copy, and a kept row never changes.
        ``"views"``: read-only views of the batch's own rows, no copy and no protection: a
        policy that writes its input anyway (turning the write flag back on, or an in-place
        torch operation) changes the batch. On 84x84x4 frames a copy of each row is about a
        fifth of a sync step (``docs/benchmarks.md``). What a kept row may see change:
        ``docs/batch-contract.md``. The default random policy (``policy=None``) reads views
        either way.
    ray_options:
        Ray backend only: ``{"address", "num_cpus", "num_gpus", "max_restarts",
        "runtime_env", "scheduling_strategy", "continue_without_lost_actors"}``
        (see :class:`~parallel_rollouts.runners.ray.RayOptions`). The
        policy must be picklable; it runs inside each actor.

    Raises
    ------
    ConfigurationError, SpaceError
        For invalid arguments or spaces, naming the culprit.
    WorkerError
        When an env factory or an env's first reset raises.

    Warns
    -----
    BatchMemoryWarning
        When one batch (``num_envs x horizon`` rows) would need more memory than the
        machine has available; said before the envs are made when the batch's size
        alone makes that likely (one env is then made here to read its spaces).

    Making many envs logs its progress (logger ``"parallel_rollouts"``, ``INFO``):
    when it starts, every few seconds while envs are made in this process, and when
    it is done.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], Env]],
        policy: Callable[[Any], Any] | None = None,
        backend: str = "sync",
        horizon: int = 128,
        seed: int | None = None,
        *,
        core: str = "auto",
        info_keys: Sequence[str] = (),
        reuse_buffers: bool = False,
        observation_check: str = "warn",
        episode_seeds: str = "every",
        num_workers: int | None = None,
        context: str | None = None,
        step_timeout: float | None = None,
        ray_options: dict | None = None,
        policy_placement: str | None = None,
        pipelined: bool = False,
        max_restarts: int | None = None,
        main_process_envs: int | None = None,
        store_states: bool = False,
        max_policy_lag: int = 0,
        policy_inputs: str = "protected",
    ) -> None:
        # First, so that __del__ can close whatever a failing constructor already made.
        self._owner_pid = os.getpid()
        self._backend: RolloutRunner | None = None
        env_fns = _check_env_fns(env_fns, backend)
        options = CollectorOptions.parse(
            num_factories=len(env_fns), policy=policy, backend=backend, horizon=horizon, seed=seed, core=core,
            info_keys=info_keys, reuse_buffers=reuse_buffers, observation_check=observation_check,
            episode_seeds=episode_seeds, num_workers=num_workers, context=context, step_timeout=step_timeout,
            ray_options=ray_options, policy_placement=policy_placement, pipelined=pipelined,
            max_restarts=max_restarts, main_process_envs=main_process_envs, store_states=store_states,
            max_policy_lag=max_policy_lag, policy_inputs=policy_inputs,
        )
        self._options = options
        given = env_fns[0].vector_env if isinstance(env_fns[0], _GivenVectorEnv) else None
        memory_warned = check_memory_before_building(env_fns, options.rollout.horizon, options.rollout.info_keys, given)
        counted = options.in_this_process and given is None
        where = "in this process" if options.in_this_process else f"in {options.backend} workers"
        progress = BuildProgress(len(env_fns), where, counted)
        if counted:
            env_fns = progress.wrap(env_fns)
        self._spec = options.spec(env_fns)
        # The runner: named `_backend` because it is what `backend=` chose.
        try:
            self._backend = build_runner(self._spec, policy, options)
        except BaseException:
            progress.done(succeeded=False)
            raise
        progress.done()
        #: Resolved by the runner once the envs were made (spaces, env count, core, checks).
        self._layout = self._backend.layout
        if not memory_warned:
            layout = self._layout
            warn_if_batch_too_large(
                layout.observation_layout, layout.action_layout, layout.horizon, layout.num_envs, layout.info_keys
            )

    # -- public properties -----------------------------------------------------------------

    @property
    def seed(self) -> int:
        """The root seed: pass it back as ``seed=`` to reproduce this run."""
        return self._options.rollout.root_seed

    @property
    def num_columns(self) -> int:
        """The batch's columns: one per env, or with multi-agent envs one per agent of each env."""
        return self._layout.num_envs

    @property
    def num_envs(self) -> int:
        """The batch's columns where each is an env (single envs, a vector env's sub-envs). With
        multi-agent envs it counts columns too, and reading it warns (``FutureWarning``): read
        :attr:`num_columns`, and :attr:`column_envs` for the envs."""
        if self._layout.column_agents:
            warn_env_name_holds_columns("collector", "num_envs", "num_columns", self.column_envs, stacklevel=3)
        return self._layout.num_envs

    @property
    def horizon(self) -> int:
        """Steps per env in each ``collect()``."""
        return self._options.rollout.horizon

    @property
    def backend(self) -> str:
        return self._options.backend

    @property
    def core(self) -> str:
        """The per-step core in use: ``"compiled"`` or ``"python"``."""
        return self._options.rollout.core_name

    @property
    def column_agents(self) -> tuple:
        """With multi-agent envs, the agent behind each column of the batch; empty when the envs
        are single or vector envs. A PettingZoo env with agents ``possible_agents`` spans one
        column per agent, in that order."""
        return self._layout.column_agents

    @property
    def column_envs(self) -> np.ndarray:
        """``[num_columns]`` int64: the env (numbered from 0, in factory order) behind each column of
        the batch; ``arange(num_columns)`` unless the envs are multi-agent."""
        return column_env_indices(self._layout.column_envs, self._layout.num_envs)

    @property
    def observation_space(self) -> Space:
        """One env's observation space (every env declares the same)."""
        return self._layout.observation_space

    @property
    def action_space(self) -> Space:
        """One env's action space (every env declares the same)."""
        return self._layout.action_space

    @property
    def closed(self) -> bool:
        return self._backend is None or self._backend.state is RunnerState.CLOSED

    @property
    def state(self) -> RunnerState:
        """``READY``, ``COLLECTING``, ``BROKEN`` (see :attr:`failure`) or ``CLOSED``."""
        return RunnerState.CLOSED if self._backend is None else self._backend.state

    @property
    def failure(self) -> BaseException | None:
        """The error that broke this collector (``None`` unless :attr:`state` is ``BROKEN``)."""
        return None if self._backend is None else self._backend.failure

    # -- collecting ------------------------------------------------------------------------

    def collect(self) -> RolloutBatch:
        """Run every env for ``horizon`` steps and return the batch.

        Episodes continue across calls. If the policy raises, or returns actions
        that do not fit (:class:`ActionError`), the rollout is dropped, nothing is
        stepped with the bad actions, and the collector stays usable: the next
        ``collect()`` continues from where the envs are. With
        ``policy_placement="workers"`` the workers whose policy did not fail have
        run on to the horizon, so envs stand at different rows. With
        ``backend="ray"`` the collector is broken instead (its actors step on
        independently), except for an ``ActionError`` found when merging the
        actors' slices. If an env fails
        (:class:`WorkerError`, :class:`ObservationError`) the collector is broken:
        later calls raise :class:`CollectorClosedError`; ``close()`` still works.
        """
        if self._backend is None:
            raise CollectorClosedError("this collector was never built; create a new one.")
        result, version = self._backend.next_rollout()
        layout = self._layout
        batch = RolloutBatch.from_result(
            result, layout.observation_layout, layout.action_layout, self.seed, policy_version=version,
            column_envs=layout.column_envs, column_agents=layout.column_agents,
        )
        # This rollout's warnings, taken before the next one can add its own.
        warnings = self._backend.take_warnings()
        # The rollout is complete: it counts, whether or not a warning made an error drops it. With
        # max_policy_lag=1 the next one starts now that the batch holds its arrays, so that their
        # memory is not recycled for it.
        self._backend.hand_out()
        # Warnings from worker processes and actors, under this process's filters: with the
        # rollout complete, one made an error drops this batch and leaves the collector usable.
        raise_again(warnings)
        return batch

    @property
    def max_policy_lag(self) -> int:
        """``0``: each ``collect()`` runs the policy as it is then; ``1``: the next batch is collected
        in the background with the policy as it was when the last batch was handed out."""
        return self._options.max_policy_lag

    # -- lifetime --------------------------------------------------------------------------

    def close(self) -> None:
        """Close every env and release every process and shared-memory segment. Idempotent.

        ``serial`` and ``sync`` call each env's ``close()`` in this thread, as a plain loop
        would (an env whose ``close()`` needs the main thread, a GUI or GL context, can
        close), so an env that hangs in ``close()`` hangs this call. ``async`` and ``ray``
        are bounded: a worker or actor that has not closed its envs in time is terminated.
        """
        if self._backend is not None:
            self._backend.close()

    def __enter__(self) -> ParallelRolloutCollector:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        # A collector dropped without close(): release what it holds, but only in
        # the process that created it (a forked child must not close its parent's).
        if getattr(self, "_backend", None) is not None and not self.closed and os.getpid() == getattr(self, "_owner_pid", None):
            try:
                self.close()
            except Exception:
                logger.debug("closing a collector during garbage collection failed", exc_info=True)

    def __repr__(self) -> str:
        state = self.state.value
        return (
            f"ParallelRolloutCollector(backend={self.backend!r}, {self._columns_repr()}, "
            f"horizon={self.horizon}, seed={self.seed}, core={self.core!r}, {state})"
        )

    def _columns_repr(self) -> str:
        if self._layout.column_agents:
            return f"num_columns={self.num_columns} ({len(set(self._layout.column_envs))} multi-agent envs)"
        return f"num_envs={self.num_columns}"


def _env_id_hint(env_id: str) -> str:
    return (
        f"For a registered Gymnasium env id use "
        f"`parallel_rollouts.make_collector({env_id!r}, num_envs=..., ...)`; ParallelRolloutCollector "
        f"takes env factories, e.g. `[partial(gymnasium.make, {env_id!r})] * num_envs`."
    )


def _check_env_fns(env_fns: Any, backend: str) -> list:
    if is_vector_env(env_fns):
        if not steps_in_this_process(backend):
            raise ConfigurationError(
                f"backend={backend!r} makes its envs in other processes, so it takes factories, not a "
                f"vector env instance ({type(env_fns).__name__}); pass e.g. "
                "`[partial(gymnasium.make_vec, 'CartPole-v1', num_envs=512)] * num_workers`."
            )
        check_vector_env(env_fns, "the vector env")
        return [_GivenVectorEnv(env_fns)]
    if isinstance(env_fns, str):
        raise ConfigurationError(
            f"`env_fns` is the string {env_fns!r}, not a list of env factories. {_env_id_hint(env_fns)}"
        )
    if isinstance(env_fns, bytes) or not isinstance(env_fns, Sequence):
        raise ConfigurationError(
            f"`env_fns` must be a sequence of zero-argument callables returning envs; got {type(env_fns).__name__}."
        )
    if len(env_fns) == 0:
        raise ConfigurationError("`env_fns` is empty; pass at least one env factory.")
    for index, env_fn in enumerate(env_fns):
        if isinstance(env_fn, Env):
            raise ConfigurationError(
                f"env_fns[{index}] is an env instance ({type(env_fn).__name__}), not a factory; "
                "pass a callable that creates it, e.g. `lambda: gymnasium.make(...)`."
            )
        if isinstance(env_fn, str):
            raise ConfigurationError(
                f"env_fns[{index}] is the string {env_fn!r}, not an env factory. {_env_id_hint(env_fn)}"
            )
        if not callable(env_fn):
            raise ConfigurationError(f"env_fns[{index}] is not callable; got {env_fn!r}.")
    return list(env_fns)


class _GivenVectorEnv:
    """The factory of a vector env passed as an instance: the collector now owns (and closes) it."""

    def __init__(self, vector_env: Any) -> None:
        self.vector_env = vector_env

    def __call__(self) -> Any:
        return self.vector_env
