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
import pickle
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
from gymnasium import Env
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from .checks.actions import ActionBatchChecker
from .groups.single_envs import close_each
from .groups import make_all
from .groups.gymnasium_envs import GymnasiumGroup, build_gymnasium_group
from .core.selector import load_core
from .errors import ConfigurationError, ResetNeededError, VectorEnvClosedError
from .runners.lifecycle import Lifecycle, RunnerState
from .processes.forwarded_warnings import raise_again
from .data.spaces import check_env_spaces
from .config.spec import RolloutSpec
from .config.worker_options import WorkerOptions
from .data.typed_actions import TypedActionWriter

__all__ = ["ParallelVectorEnv"]

logger = logging.getLogger("parallel_rollouts")

_BACKENDS = ("sync", "async")


class ParallelVectorEnv(Lifecycle, VectorEnv):
    """A ``gymnasium.vector.VectorEnv`` over the library's sync or async workers.

    Parameters
    ----------
    env_fns:
        One zero-argument callable per env, each returning a ``gymnasium.Env``
        with the same spaces (picklable for ``"async"``, as for the collector).
    backend:
        ``"async"`` (worker processes writing into shared memory, default) or
        ``"sync"`` (every env in this process).
    autoreset_mode:
        ``AutoresetMode.NEXT_STEP`` (Gymnasium's default), ``SAME_STEP`` (the
        terminal observation and info in ``info["final_obs"]`` / ``info["final_info"]``)
        or ``DISABLED`` (reset ended envs with ``reset(options={"reset_mask": ...})``),
        or their string values.
    copy:
        If true (default, as in Gymnasium), ``reset`` and ``step`` return new
        observation arrays; if false, views of the env's buffers that the next
        call overwrites (shared memory for ``"async"``).
    num_workers, context, step_timeout:
        As for :class:`~parallel_rollouts.ParallelRolloutCollector` with
        ``backend="async"``.
    core:
        ``"auto"``, ``"compiled"`` or ``"python"``.

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
        *,
        backend: str = "async",
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        copy: bool = True,
        num_workers: int | None = None,
        context: str | None = None,
        step_timeout: float | None = None,
        core: str = "auto",
    ) -> None:
        self._backend = None
        self._group: GymnasiumGroup | None = None
        if backend not in _BACKENDS:
            raise ConfigurationError(f"`backend` must be one of {_BACKENDS!r}; got {backend!r}.")
        check_env_factories(env_fns)
        options = WorkerOptions.parse(
            num_factories=len(env_fns), backend=backend, backends=_BACKENDS,
            num_workers=num_workers, context=context, step_timeout=step_timeout,
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
        core_name, core_module = load_core(core)
        self.num_envs = len(env_fns)
        # Envs not reset since they were made: stepping them first is refused here, before
        # their own order check (gymnasium's OrderEnforcing) would break the vector env.
        self._never_reset = np.ones(self.num_envs, dtype=bool)
        # Actions are stored with the dtype they were given, as SyncVectorEnv hands them on.
        spec = RolloutSpec(
            tuple(env_fns), root_seed=0, horizon=1, core_name=core_name, typed_actions=True,
            group_builder=partial(build_gymnasium_group, autoreset_mode=self.autoreset_mode),
        )
        if backend == "sync":
            self._start_sync(spec)
        else:
            self._start_async(spec, options)
        self._action_checker = ActionBatchChecker(
            self._action_layout, self.num_envs, core_module, "the", float_box_bounds="pass"
        )
        self._action_writer = TypedActionWriter(self._action_layout, [leaf[0] for leaf in self._storage.actions])
        self.single_observation_space = self._observation_layout.space
        self.single_action_space = self._action_layout.space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        metadata, render_mode = self.call("metadata")[0], self.get_attr("render_mode")[0]
        self.metadata = {**dict(metadata or {}), "autoreset_mode": self.autoreset_mode}
        self.render_mode = render_mode

    # -- start-up --------------------------------------------------------------------------

    def _start_sync(self, spec: RolloutSpec) -> None:
        envs = make_all(spec.env_fns, 0)
        try:
            for index, env in enumerate(envs):
                check_env_spaces(
                    index, env.observation_space, env.action_space, envs[0].observation_space, envs[0].action_space
                )
            layout = spec.resolve(envs[0].observation_space, envs[0].action_space, num_envs=len(envs))
            self._group = spec.group_builder(envs, 0, layout)
        except BaseException:
            close_each(envs)
            raise
        self._observation_layout = layout.observation_layout
        self._action_layout = layout.action_layout
        self._storage = layout.allocate_storage()
        self._group.begin(self._storage)

    def _start_async(self, spec: RolloutSpec, options: WorkerOptions) -> None:
        from .processes import worker_main as protocol
        from .processes.pool import WorkerPool
        from .processes.startup import unguarded_main_error

        try:
            self._backend = WorkerPool.start(spec, options=options)
        except ConfigurationError as error:
            if str(error) == str(unguarded_main_error()):
                # The pool speaks of collectors; here the user created a ParallelVectorEnv.
                raise unguarded_main_error("the ParallelVectorEnv") from None
            raise
        self._worker = protocol
        self._observation_layout = self._backend.layout.observation_layout
        self._action_layout = self._backend.layout.action_layout
        self._storage = self._backend.shared.storage
        self._request(protocol.BEGIN)

    # -- talking to the envs ---------------------------------------------------------------

    def _request(self, command: bytes, argument: int = 0, payload: bytes = b"") -> list:
        """Run one request on every worker; the unpickled results in worker order (``None`` where empty)."""
        self.check_usable()
        try:
            replies = self._backend.request(command, argument, payload=payload)
        except BaseException as error:
            self._break(error)
            raise_again(self._backend.take_warnings(), quietly=True)
            raise
        # The request is complete on every worker: a warning made an error loses only its result.
        raise_again(self._backend.take_warnings())
        return [None if reply is None else pickle.loads(reply) for reply in replies]

    def _handle(self, request: tuple) -> list:
        """``group.handle(request)`` on every group; the results in group order."""
        if self._group is not None:
            self.check_usable()
            return [self._guarded(self._group.handle, request)]
        return self._request(self._worker.HANDLE, 0, pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL))

    def _step_groups(self) -> list:
        if self._group is not None:
            self.check_usable()
            return [self._guarded(self._group.step, 0)]
        return self._request(self._worker.STEP)

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
        seeds = self._seeds_per_env(seed)
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
        parts = self._handle(("reset", seeds, options, reset_mask))
        self._never_reset[slice(None) if reset_mask is None else reset_mask] = False
        return self._observations(), parts

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
        """``step`` with its infos unmerged (see :meth:`_reset_unmerged`).

        In ``SAME_STEP`` mode an env whose episode ended reports ``{"final_obs", "final_info"}``
        first, then its reset info if that is not empty.
        """
        self.check_usable()
        if self._never_reset.any():
            unreset = np.flatnonzero(self._never_reset).tolist()
            raise ResetNeededError(
                f"`step` was called before envs {unreset!r} were ever reset; call `reset()` first. "
                "Nothing was stepped."
            )
        self._action_writer.write(self._action_checker.check(actions))
        parts = self._step_groups()
        storage = self._storage
        return (
            self._observations(),
            storage.rewards[0].copy(),
            storage.terminations[0].copy(),
            storage.truncations[0].copy(),
            parts,
        )

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple:
        """Call method ``name`` of every env (or read the attribute); one result per env."""
        return tuple(result for part in self._handle(("call", name, args, kwargs)) for result in part)

    def get_attr(self, name: str) -> tuple:
        """Attribute ``name`` of every env."""
        return self.call(name)

    def set_attr(self, name: str, values: Any) -> None:
        """Set attribute ``name`` of every env: one value for all, or a list/tuple of one per env."""
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(f"`values` must have one entry per env (num_envs={self.num_envs}); got {len(values)}.")
        self._handle(("set_attr", name, list(values)))

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
        if self._backend is not None:
            self._backend.close()
        elif self._group is not None:
            for index, error in self._group.close():
                logger.warning("env %d raised while closing: %s", index, error)

    def __del__(self) -> None:
        if not getattr(self, "closed", True):
            try:
                self.close()
            except Exception:
                logger.debug("closing a ParallelVectorEnv during garbage collection failed", exc_info=True)

    def __repr__(self) -> str:
        return f"ParallelVectorEnv(backend={self.backend!r}, num_envs={self.num_envs}, autoreset_mode={self.autoreset_mode.name})"


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
