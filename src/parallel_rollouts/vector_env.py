"""ParallelVectorEnv: the library's workers as a drop-in ``gymnasium.vector.VectorEnv``.

For training loops that step a Gymnasium vector env themselves. With
``backend="async"`` the envs run in the async backend's worker processes
(the same processes, shared-memory storage and 9-byte step handshake that
``ParallelRolloutCollector(backend="async")`` uses); with ``backend="sync"``
they run in this process. Either way each env is stepped exactly as
``gymnasium.vector.SyncVectorEnv`` steps it (see
:mod:`~parallel_rollouts.groups.gymnasium_envs`), so the two give the same
observations, rewards, flags and infos for the same seeds and actions.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
from gymnasium import Env
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from .checks.actions import ActionBatchChecker
from .groups.gymnasium_envs import build_gymnasium_group, with_final_observations
from .groups.requests import raise_any_refusal
from .core.selector import load_core
from .errors import ConfigurationError, ResetNeededError, VectorEnvClosedError
from .runners.lifecycle import Lifecycle, RunnerState
from .config.spec import RolloutSpec
from .config.backends import VECTOR_ENV_BACKENDS, check_backend
from .config.worker_options import WorkerOptions
from .data.typed_actions import TypedActionWriter
from .steppers.base import OnFailure, OnFinished, VectorStepper
from .steppers.in_process import InProcessVectorStepper
from .steppers.ready_first import ReadyFirst, check_serve_order

__all__ = ["ParallelVectorEnv"]

logger = logging.getLogger("parallel_rollouts")


class ParallelVectorEnv(Lifecycle, VectorEnv):
    """A ``gymnasium.vector.VectorEnv`` over the library's sync or async workers.

    It subclasses ``gymnasium.vector.VectorEnv``, so ``isinstance`` checks and
    Gymnasium's vector wrappers take it.

    Parameters
    ----------
    env_fns:
        One zero-argument callable per env, each returning a ``gymnasium.Env``
        with the same spaces (picklable for ``"async"``, as for the collector).
    backend:
        ``"sync"`` (every env in this process) or ``"async"`` (worker processes writing
        into shared memory), by keyword or second by position, as for
        :class:`~parallel_rollouts.sb3.ParallelVecEnv`. ``None`` (default): ``"async"`` if an option only it uses is
        given (``num_workers``, ``context``, ``step_timeout``, ``main_process_envs``,
        ``batch_size``), else ``"sync"``, which measured as fast as ``SyncVectorEnv`` in a
        training loop, quiet or busy; ``"async"`` pays when a step costs about half a
        millisecond or more and a core is free per worker (``docs/vector-envs.md``).
    autoreset_mode:
        ``AutoresetMode.NEXT_STEP`` (Gymnasium's default), ``SAME_STEP`` (the
        terminal observation and info in ``info["final_obs"]`` / ``info["final_info"]``)
        or ``DISABLED`` (reset ended envs with ``reset(options={"reset_mask": ...})``),
        or their string values.
    copy:
        If true (default, as in Gymnasium), ``reset`` and ``step`` return new
        observation arrays; if false, views of the env's buffers that the next
        call overwrites (shared memory for ``"async"``).
    num_workers:
        ``"async"``: worker processes, each owning a contiguous slice of the envs, as
        for :class:`~parallel_rollouts.ParallelRolloutCollector`. By default this
        process steps its own share of the envs while one worker per other usable
        core steps the rest.
    context:
        ``"async"``: the multiprocessing start method (default ``"spawn"``), as for
        :class:`~parallel_rollouts.ParallelRolloutCollector`.
    step_timeout:
        ``"async"``: seconds to wait for one step before raising
        :class:`~parallel_rollouts.StepTimeoutError` (``None`` waits as a plain call
        into the env would), as for :class:`~parallel_rollouts.ParallelRolloutCollector`.
    core:
        ``"auto"``, ``"compiled"`` or ``"python"``.
    main_process_envs:
        ``"async"``: how many envs (the first ones) this process steps itself while the
        workers step the rest, as for :class:`~parallel_rollouts.ParallelRolloutCollector`.
    batch_size:
        Ready-first stepping (``send`` / ``recv``, with EnvPool's names): how many envs
        each ``recv()`` returns, the first to finish their step; from 1 to the number of
        envs. With ``"async"`` every env then steps in a worker, in the background of
        ``recv()``, unless ``main_process_envs`` gives this process a share: those envs
        step inside ``recv()``, in this thread (a slow one among them stalls it). ``None``
        (default): no ready-first stepping (``step`` works either way; see
        ``docs/vector-envs.md``).
    serve_order:
        With ``batch_size``: the env indices each ``recv()`` returns, in order, as
        :attr:`served` recorded them in an earlier run, to replay that run exactly.

    Notes
    -----
    ``reset(seed=...)`` takes ``None``, an int ``s`` (env ``i`` gets ``s + i``)
    or a list of one int or ``None`` per env, like ``SyncVectorEnv``; autoresets
    use no seed. ``np_random_seed`` is the tuple of every env's seed.

    ``step(actions)`` hands each env the row of ``actions`` that ``SyncVectorEnv``
    would hand it, with the dtype passed (float64 actions for a float32 ``Box``
    reach the env as float64). Actions are checked first, the whole batch before
    any env steps: a wrong shape, a non-integer for an integer space, an integer
    outside the space (or its dtype), or NaN raises
    :class:`~parallel_rollouts.ActionError` naming the env and the value, and
    steps nothing. A float outside a float ``Box``'s bounds reaches the env, as
    in Gymnasium. Stepping before every env was reset raises
    :class:`~parallel_rollouts.ResetNeededError` (a ``gymnasium.error.ResetNeeded``)
    and steps nothing.

    ``call``, ``get_attr`` and ``set_attr`` reach every env (their arguments and
    results are pickled for ``"async"``). Env failures raise
    :class:`~parallel_rollouts.WorkerError` naming the env; the vector env is
    then unusable. Any use after ``close()`` (or such a failure) raises
    :class:`~parallel_rollouts.VectorEnvClosedError`, a
    ``gymnasium.error.ClosedEnvironmentError``; ``close()`` still releases everything.
    :attr:`state` is the collector's :class:`~parallel_rollouts.RunnerState`: ``READY``,
    ``BROKEN`` (the error in :attr:`failure`) or ``CLOSED``.
    """

    _subject = "ParallelVectorEnv"
    _closed_error = VectorEnvClosedError
    _after_close = "create a new one"

    def __init__(
        self,
        env_fns: Sequence[Callable[[], Env]],
        backend: str | None = None,
        *,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        copy: bool = True,
        num_workers: int | None = None,
        context: str | None = None,
        step_timeout: float | None = None,
        core: str = "auto",
        main_process_envs: int | None = None,
        batch_size: int | None = None,
        serve_order: Sequence[Sequence[int]] | None = None,
    ) -> None:
        self._backend: VectorStepper | None = None
        self._ready_first: ReadyFirst | None = None
        if backend is None:
            backend = default_backend(
                num_workers=num_workers, context=context, step_timeout=step_timeout,
                main_process_envs=main_process_envs, batch_size=batch_size,
            )
        check_backend(backend, VECTOR_ENV_BACKENDS)
        check_env_factories(env_fns)
        options = WorkerOptions.parse(
            num_factories=len(env_fns), backend=backend, backends=VECTOR_ENV_BACKENDS,
            num_workers=num_workers, context=context, step_timeout=step_timeout, main_process_envs=main_process_envs,
            # Ready-first stepping lets a slow env stall only itself: the envs of a share here would
            # step inside recv(), so there is none unless asked for.
            share_by_default=batch_size is None,
        )
        try:
            self.autoreset_mode = autoreset_mode if isinstance(autoreset_mode, AutoresetMode) else AutoresetMode(autoreset_mode)
        except ValueError:
            raise ConfigurationError(
                f"`autoreset_mode` must be a gymnasium.vector.AutoresetMode or one of "
                f"{[mode.value for mode in AutoresetMode]!r}; got {autoreset_mode!r}."
            ) from None
        self.copy = bool(copy)
        self.backend = backend
        if batch_size is not None:
            if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= len(env_fns):
                raise ConfigurationError(
                    f"`batch_size` must be an int from 1 to the number of envs ({len(env_fns)}) or None; got {batch_size!r}."
                )
            order = None if serve_order is None else check_serve_order(serve_order, len(env_fns), batch_size)
            self._ready_first = ReadyFirst(len(env_fns), batch_size, order)
        elif serve_order is not None:
            raise ConfigurationError("`serve_order` replays ready-first stepping; give `batch_size` too.")
        core_name, core_module = load_core(core)
        # Actions are stored with the dtype they were given, as SyncVectorEnv hands them on.
        spec = RolloutSpec(
            tuple(env_fns), root_seed=0, horizon=1, core_name=core_name, typed_actions=True,
            group_builder=partial(build_gymnasium_group, autoreset_mode=self.autoreset_mode),
        )
        self._backend = _start_stepper(backend, spec, options, _weakly(self._break), _weakly(self._finished))
        self._start_step, self._finish_step = self._backend.start_step, self._backend.finish_step
        layout = self._backend.layout
        self._storage = self._backend.storage
        self._observation_layout = layout.observation_layout
        self._action_layout = layout.action_layout
        # One sub-env per single env, one per agent of a multi-agent env.
        self.num_envs = layout.num_envs
        self.column_agents = layout.column_agents
        self._column_envs = np.asarray(layout.column_envs, dtype=np.int64)
        if self.column_agents and self._ready_first is not None:
            self.close()
            raise ConfigurationError(
                "`batch_size` (ready-first stepping) steps single envs one by one; a multi-agent env steps all its "
                "agents at once. Drop `batch_size` for multi-agent envs."
            )
        # Envs not reset since they were made: stepping them first is refused here, before
        # their own order check (gymnasium's OrderEnforcing) would break the vector env.
        self._never_reset = np.ones(self.num_envs, dtype=bool)
        #: DISABLED mode: envs whose episode ended and that no reset has restarted yet.
        self._ended_unreset = np.zeros(self.num_envs, dtype=bool)
        #: Whether either mask above marks an env: the check before a step is then one test.
        self._some_env_unsteppable = True
        self._books_ended = self.autoreset_mode is AutoresetMode.DISABLED
        # Ended envs' terminal observations may arrive through `final_observations` (SAME_STEP
        # mode, single-agent groups: with_final_observations).
        self._stores_finals = self.autoreset_mode is AutoresetMode.SAME_STEP and not self._column_envs.size
        self._action_checker = ActionBatchChecker(
            self._action_layout, self.num_envs, core_module, "the", float_box_bounds="pass"
        )
        self._action_writer = TypedActionWriter(self._action_layout, [leaf[0] for leaf in self._storage.actions])
        # Ready-first stepping: the checker for each number of envs sent at once, and the envs
        # `send` takes by default.
        self._subset_checkers: dict[int, ActionBatchChecker] = {}
        self._last_served = np.arange(self.num_envs, dtype=np.int64)
        # A whole step started by `_send_step` and not yet taken by `_receive_step` (the SB3
        # adapter's step_async / step_wait).
        self._step_in_flight = False
        self._core_module = core_module
        self.single_observation_space = self._observation_layout.space
        self.single_action_space = self._action_layout.space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        metadata, render_mode = self.call("metadata")[0], self.get_attr("render_mode")[0]
        self.metadata = {**dict(metadata or {}), "autoreset_mode": self.autoreset_mode}
        self.render_mode = render_mode

    # -- talking to the envs ---------------------------------------------------------------

    def _refuse_step_in_flight(self) -> None:
        if self._step_in_flight:
            raise ConfigurationError(
                "a step of every env was started and its result not taken yet (the SB3 adapter's "
                "`step_async` without `step_wait`); take it first (`step_wait()`)."
            )

    def _handle(self, request: tuple) -> list:
        """``group.handle(request)`` on every group; the results in group order."""
        self.check_usable()
        self._refuse_step_in_flight()
        # Envs sent and not yet received finish their steps first (booked for `recv`).
        return self._backend.handle(request)

    def _merge_infos(self, parts: list) -> dict:
        infos: dict = {}
        for events in parts:
            for index, info in events or ():
                infos = self._add_info(infos, info, index)
        return infos

    def _observations(self) -> Any:
        leaves = [leaf[0] for leaf in self._storage.observations]
        if self.copy:
            leaves = [leaf.copy() for leaf in leaves]
        return self._observation_layout.unflatten(leaves)

    # -- the VectorEnv API -----------------------------------------------------------------

    @property
    def np_random_seed(self) -> tuple[int, ...]:
        """Every env's ``np_random_seed``, in env order (as ``SyncVectorEnv`` gives it)."""
        return self.get_attr("np_random_seed")

    def reset(self, *, seed: int | Sequence[int | None] | None = None, options: dict | None = None):
        """Reset every env (or those in ``options["reset_mask"]``); return ``(observations, infos)``."""
        observations, parts = self._reset_unmerged(seed, options)
        return observations, self._merge_infos(parts)

    def _reset_unmerged(self, seed: Any, options: dict | None) -> tuple:
        """``reset`` with its infos unmerged: ``(observations, parts)``, one part per group.

        A part is ``None`` or a list of ``(env_index, info)`` events, each the env's own dict,
        in env order. Front ends that hand out one info dict per env (:mod:`parallel_rollouts.sb3`)
        read these instead of Gymnasium's merged dict.
        """
        self.check_usable()
        self._refuse_step_in_flight()
        seeds = self._seeds_per_env(seed)
        if self._ready_first is not None:
            self._backend.drain_envs()
            # Nothing is in flight now: whatever the reset does, no env stays marked as sent.
            self._ready_first.reset()
            self._last_served = np.arange(self.num_envs, dtype=np.int64)
        super().reset(seed=seeds[0] if isinstance(seed, (int, np.integer)) else None)
        options = dict(options) if options is not None else None
        reset_mask = None
        if options is not None and "reset_mask" in options:
            reset_mask = options.pop("reset_mask")
            if not isinstance(reset_mask, np.ndarray) or reset_mask.dtype != np.bool_ or reset_mask.shape != (self.num_envs,):
                raise ValueError(
                    f"`options['reset_mask']` must be a bool NumPy array of shape ({self.num_envs},); got {reset_mask!r}."
                )
            if not reset_mask.any():
                raise ValueError("`options['reset_mask']` must select at least one env.")
            if self._column_envs.size:
                self._check_whole_envs(reset_mask)
        parts = self._handle(("reset", seeds, options, reset_mask))
        self._never_reset[slice(None) if reset_mask is None else reset_mask] = False
        self._ended_unreset[slice(None) if reset_mask is None else reset_mask] = False
        self._some_env_unsteppable = bool(self._never_reset.any() or self._ended_unreset.any())
        return self._observations(), parts

    def _check_whole_envs(self, reset_mask: np.ndarray) -> None:
        """A multi-agent env resets all its agents at once: refuse a mask that selects only some."""
        for env in np.unique(self._column_envs[reset_mask]).tolist():
            columns = np.flatnonzero(self._column_envs == env)
            if not reset_mask[columns].all():
                raise ValueError(
                    f"`options['reset_mask']` selects some but not all of envs {columns[0]}..{columns[-1]}, the agents "
                    f"{[self.column_agents[c] for c in columns]!r} of one multi-agent env; it resets all its agents at "
                    "once, so select all of them or none."
                )

    def _seeds_per_env(self, seed: Any) -> list[int | None]:
        """``reset``'s ``seed`` as one int or ``None`` per env, or :class:`ConfigurationError`."""
        if seed is None:
            return [None] * self.num_envs
        if _is_seed(seed):
            return [int(seed) + index for index in range(self.num_envs)]
        if isinstance(seed, (str, bytes, dict)) or not isinstance(seed, (Sequence, np.ndarray)):
            raise ConfigurationError(
                f"`seed` must be None, a non-negative int, or a list of one such int or None per env (num_envs={self.num_envs}); "
                f"got {seed!r}."
            )
        seeds = list(seed)
        if len(seeds) != self.num_envs:
            raise ConfigurationError(
                f"`seed` as a list must have one entry per env (num_envs={self.num_envs}); got {len(seeds)}."
            )
        for index, entry in enumerate(seeds):
            if entry is not None and not _is_seed(entry):
                raise ConfigurationError(
                    f"`seed[{index}]` (for env {index}) must be a non-negative int or None; got {entry!r}."
                )
        return [None if entry is None else int(entry) for entry in seeds]

    def step(self, actions: Any):
        """Step every env once; return ``(observations, rewards, terminations, truncations, infos)``."""
        observations, rewards, terminations, truncations, parts = self._step_unmerged(actions)
        return observations, rewards, terminations, truncations, self._merge_infos(parts)

    def _step_unmerged(self, actions: Any) -> tuple:
        """``step`` with its infos unmerged (see :meth:`_reset_unmerged`): :meth:`_send_step`,
        then :meth:`_receive_step`.

        In ``SAME_STEP`` mode an env whose episode ended reports ``{"final_obs", "final_info"}``
        first, then its reset info if that is not empty.
        """
        self._send_step(actions)
        try:
            return self._receive_step()
        except BaseException as error:
            if self._step_in_flight:  # interrupted before the step was taken: its reply is owed
                self._break(error)
            raise

    def _send_step(self, actions: Any) -> None:
        """Check every env's action, write them and start the step of every env (on ``"sync"``
        the step itself); :meth:`_receive_step` returns its result. Nothing is sent when an
        action is refused."""
        self.check_usable()
        self._check_reset("step")
        self._refuse_step_in_flight()
        if self._ready_first is not None and self._ready_first.outstanding.any():
            raise ConfigurationError(
                "`step` steps every env, but envs sent with `send` were not all returned by `recv()` yet; "
                "`recv()` them first (or `reset()`)."
            )
        self._action_writer.write(self._action_checker.check(actions))
        # Set first: a failure below breaks this vector env, and an interruption after the
        # request went out leaves a step owed, which the flag says.
        self._step_in_flight = True
        self._start_step()

    def _receive_step(self) -> tuple:
        """The result of the step :meth:`_send_step` started: ``(observations, rewards,
        terminations, truncations, parts)``."""
        self.check_usable()
        if not self._step_in_flight:
            raise RuntimeError("no step of every env was started: `_send_step(actions)` first.")
        self._step_in_flight = False
        parts = self._finish_step()
        if self._books_ended:
            self._note_ended(slice(None), parts)
        if self._stores_finals:
            ended = np.flatnonzero(self._storage.terminations[0] | self._storage.truncations[0]).tolist()
            # One part in env order (the groups' parts follow one another in env order).
            parts = [self._with_finals([event for part in parts for event in part or ()], ended)]
        storage = self._storage
        return (
            self._observations(),
            storage.rewards[0].copy(),
            storage.terminations[0].copy(),
            storage.truncations[0].copy(),
            parts,
        )

    def _with_finals(self, events: list | None, ended: list[int]) -> list | None:
        final_leaves = [leaf[0] for leaf in self._storage.final_observations]
        return with_final_observations(events, ended, final_leaves, self._observation_layout)

    def _finished(self, ids: np.ndarray, events: list | None) -> None:
        """Book envs ``ids`` as stepped, with their events (terminal observations restored)."""
        if self._books_ended:
            self._note_ended(ids, [events])
        if self._stores_finals:
            storage = self._storage
            ended = np.sort(ids[storage.terminations[0][ids] | storage.truncations[0][ids]]).tolist()
            events = self._with_finals(events, ended)
        self._ready_first.finished(ids, events)

    def _note_ended(self, ids: Any, parts: list) -> None:
        """DISABLED mode: mark the envs of ``ids`` whose episode ended at this step (a multi-agent
        env: all its columns, once ``infos["env_done"]`` in the parts' events says its episode ended)."""
        if not self._column_envs.size:
            storage = self._storage
            self._ended_unreset[ids] = storage.terminations[0][ids] | storage.truncations[0][ids]
        else:
            for index, info in (event for part in parts for event in part or ()):
                if info.get("env_done"):
                    self._ended_unreset[self._column_envs == self._column_envs[index]] = True
        self._some_env_unsteppable = bool(self._never_reset.any() or self._ended_unreset.any())

    def _check_reset(self, method: str, ids: np.ndarray | None = None) -> None:
        """Refuse, changing nothing, a step of an env that was never reset or (DISABLED mode) whose
        episode ended: a mistake of the caller's, which leaves this vector env usable."""
        if not self._some_env_unsteppable:
            return
        if self._never_reset.any():
            unreset = np.flatnonzero(self._never_reset).tolist()
            raise ResetNeededError(
                f"`{method}` was called before envs {unreset!r} were ever reset; call `reset()` first. "
                "Nothing was stepped."
            )
        if self._ended_unreset[slice(None) if ids is None else ids].any():
            ended = np.flatnonzero(self._ended_unreset) if ids is None else np.unique(ids[self._ended_unreset[ids]])
            raise ResetNeededError(
                f"`{method}` would step envs {ended.tolist()!r}, whose episode ended at their last "
                "step, and autoreset_mode is DISABLED; reset them first with "
                "`reset(options={'reset_mask': mask})`, mask true at those envs. Nothing was stepped."
            )

    # -- ready-first stepping ----------------------------------------------------------------

    @property
    def served(self) -> list[np.ndarray]:
        """Ready-first stepping: the env indices each ``recv()`` returned since the last reset,
        in order. Pass it as ``serve_order`` to a new vector env to replay the run exactly."""
        return list(self._ready_first_only("served").served)

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Ready-first stepping (``batch_size`` given): start a step of envs ``env_ids`` with
        ``actions`` (one row per env id, in that order) and return at once.

        ``env_ids`` defaults to the envs the last ``recv()`` returned (after ``reset()``: every
        env). An env may be sent again only once ``recv()`` has returned it. An env whose
        episode ended at its previous step is reset by this step, as ``step`` does in the
        vector env's autoreset mode (``NEXT_STEP``: its action is ignored and ``recv()``
        returns its first observation).
        """
        ready_first = self._ready_first_only("send")
        self.check_usable()
        self._refuse_step_in_flight()
        ids = self._last_served if env_ids is None else self._env_ids(env_ids)
        self._check_reset("send", ids)
        checker = self._subset_checkers.get(ids.size)
        if checker is None:
            checker = ActionBatchChecker(self._action_layout, ids.size, self._core_module, "the", float_box_bounds="pass")
            self._subset_checkers[ids.size] = checker
        leaves = checker.check(actions)
        if ready_first.outstanding.any() and any(
            written is not None and leaf.dtype != written for leaf, written in zip(leaves, self._action_writer.dtypes())
        ):
            raise ConfigurationError(
                f"the actions' dtype changed ({[leaf.dtype.str for leaf in leaves]}, before "
                f"{[str(dtype) for dtype in self._action_writer.dtypes()]}) while other envs are stepping; keep one dtype."
            )
        ready_first.sent(ids)
        self._action_writer.write(leaves, envs=ids)
        self._backend.send_envs(ids)

    def recv(self):
        """Ready-first stepping: wait for the next ``batch_size`` envs to finish their step and
        return ``(observations, rewards, terminations, truncations, infos)`` for them, with
        their indices in ``infos["env_id"]``; in the order they finished (or ``serve_order``'s)."""
        ready_first = self._ready_first_only("recv")
        self.check_usable()
        self._refuse_step_in_flight()
        batch = ready_first.next_batch()
        while batch is None:
            self._backend.wait_envs()
            batch = ready_first.next_batch()
        self._last_served = batch
        storage = self._storage
        leaves = [leaf[0][batch] for leaf in storage.observations]
        infos: dict = {}
        merger = _BatchInfos(batch.size)
        for position, events in ready_first.take_events(batch):
            for info in events:
                infos = merger._add_info(infos, info, position)
        infos["env_id"] = batch.copy()
        return (
            self._observation_layout.unflatten(leaves),
            storage.rewards[0][batch],
            storage.terminations[0][batch],
            storage.truncations[0][batch],
            infos,
        )

    def _ready_first_only(self, method: str) -> ReadyFirst:
        if self._ready_first is None:
            raise ConfigurationError(
                f"`{method}` is ready-first stepping: create the vector env with `batch_size=` (the envs `recv()` "
                "returns at once) to use it."
            )
        return self._ready_first

    def _env_ids(self, env_ids: Any) -> np.ndarray:
        ids = np.asarray(env_ids)
        if ids.ndim != 1 or ids.size == 0 or ids.dtype.kind not in "iu" or ids.min() < 0 or ids.max() >= self.num_envs:
            raise ConfigurationError(
                f"`env_ids` must be a non-empty 1-D sequence of env indices from 0 to {self.num_envs - 1}; got {env_ids!r}."
            )
        return ids.astype(np.int64)

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple:
        """Call method ``name`` of every env (or read the attribute); one result per env.

        What an env raises (a missing attribute, a wrong argument) is raised as it is, with a note
        naming the env, and leaves this vector env usable, as ``SyncVectorEnv`` does."""
        parts = self._handle(("call", name, args, kwargs))
        raise_any_refusal(parts)
        return tuple(result for part in parts for result in part)

    def get_attr(self, name: str) -> tuple:
        """Attribute ``name`` of every env."""
        return self.call(name)

    def set_attr(self, name: str, values: Any) -> None:
        """Set attribute ``name`` of every env: one value for all, or a list/tuple of one per env."""
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(f"`values` must have one entry per env (num_envs={self.num_envs}); got {len(values)}.")
        raise_any_refusal(self._handle(("set_attr", name, list(values))))

    def render(self) -> tuple:
        return self.call("render")

    @property
    def closed(self) -> bool:
        return self._state is RunnerState.CLOSED

    def close(self, **kwargs: Any) -> None:
        """Close every env and release the workers and shared memory (``CLOSED``); idempotent."""
        if self._mark_closed():
            self.close_extras(**kwargs)

    def close_extras(self, **kwargs: Any) -> None:
        """Close every env and release the workers and shared memory (called once, by :meth:`close`)."""
        self._step_in_flight = False  # a step in flight is finished by the close
        if self._backend is not None:
            # This object's views of the envs' storage go first, so that closing shared memory
            # unmaps it now rather than when this object is dropped.
            self._storage = self._action_writer = None
            self._backend.close()

    def __del__(self) -> None:
        if not getattr(self, "closed", True):
            try:
                self.close()
            except Exception:
                logger.debug("closing a ParallelVectorEnv during garbage collection failed", exc_info=True)

    def __repr__(self) -> str:
        return f"ParallelVectorEnv(backend={self.backend!r}, num_envs={self.num_envs}, autoreset_mode={self.autoreset_mode.name})"


class _BatchInfos:
    """Gymnasium's info merging for a batch of ``num_envs`` envs (``recv()``'s batch)."""

    _add_info = VectorEnv._add_info

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs


def _weakly(method: Callable) -> Callable:
    """``method`` of this vector env, called through a weak reference: the stepper that keeps it
    then holds no cycle back to its owner, so a vector env dropped unclosed is closed at once
    (``__del__``), not at the next garbage collection."""
    reference = weakref.WeakMethod(method)

    def call(*args: Any) -> Any:
        return reference()(*args)

    return call


def _start_stepper(
    backend: str, spec: RolloutSpec, options: WorkerOptions, on_failure: OnFailure, on_finished: OnFinished
) -> VectorStepper:
    """The stepper of ``backend``'s envs (see :class:`~.steppers.base.VectorStepper` for the callbacks)."""
    if backend == "sync":
        return InProcessVectorStepper(spec, on_failure, on_finished)
    # Worker processes are imported only when a vector env starts some.
    from .steppers.processes import ProcessVectorStepper

    return ProcessVectorStepper.start(spec, options, on_failure, on_finished)


def default_backend(**async_options: Any) -> str:
    """``"async"`` when any of ``async_options`` (options only worker processes use) is given,
    else ``"sync"``: in this process, as fast as ``SyncVectorEnv`` in a training loop."""
    return "async" if any(value is not None for value in async_options.values()) else "sync"


def check_env_factories(env_fns: Any) -> None:
    """Refuse anything but a non-empty sequence of env factories, naming the culprit."""
    if isinstance(env_fns, (str, bytes)) or not isinstance(env_fns, Sequence) or not env_fns:
        raise ConfigurationError(f"`env_fns` must be a non-empty sequence of env factories; got {env_fns!r}.")
    for index, env_fn in enumerate(env_fns):
        if not callable(env_fn) or isinstance(env_fn, Env):
            raise ConfigurationError(f"env_fns[{index}] is not a factory (a callable returning an env); got {env_fn!r}.")


def _is_seed(value: Any) -> bool:
    """A seed Gymnasium's envs take: a non-negative int (a NumPy integer too), not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and value >= 0
