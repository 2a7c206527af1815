"""``make_collector``: a collector for a registered Gymnasium env id (or a PettingZoo env), in one line.

The counterpart of ``gymnasium.make_vec``: the id is resolved to its
``EnvSpec`` here, in the calling process, and each env factory carries that
spec rather than the id. ``gymnasium.make`` builds an env from a spec without a
registry look-up, so ids that only this process registered (a package imported
here, an ``gymnasium.register`` call in a script) also work in the async
backend's spawned workers and in Ray actors. Factories are ``functools.partial``
objects of a top-level function: they pickle with plain ``pickle`` (a PettingZoo
constructor is often a local function: the workers take it with ``cloudpickle``).

A PettingZoo parallel env is named by its module (``mpe2.simple_spread_v3``), its
``parallel_env`` constructor, or a ``ParallelEnv`` subclass; each factory calls the
constructor with ``env_kwargs``.
"""

from __future__ import annotations

import importlib
import types
from types import ModuleType
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import gymnasium
from gymnasium.envs.registration import EnvSpec

from .collector import ParallelRolloutCollector
from .errors import ConfigurationError

__all__ = ["make_collector"]


def make_collector(
    env_id: str | EnvSpec | ModuleType | Callable[..., Any],
    num_envs: int = 1,
    policy: Callable[[Any], Any] | None = None,
    backend: str = "sync",
    horizon: int = 128,
    seed: int | None = None,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    wrappers: Sequence[Callable[[gymnasium.Env], gymnasium.Env]] = (),
    **collector_kwargs: Any,
) -> ParallelRolloutCollector:
    """A :class:`ParallelRolloutCollector` over ``num_envs`` copies of a registered env.

    Parameters
    ----------
    env_id:
        A registered Gymnasium id (``"CartPole-v1"``, ``"ale_py:ALE/Pong-v5"``) or an
        ``EnvSpec``, as ``gymnasium.make`` accepts; or a PettingZoo parallel env: its
        module (``mpe2.simple_spread_v3``), its ``parallel_env`` constructor, or a
        ``pettingzoo.ParallelEnv`` subclass. A multi-agent env gives one batch column per
        agent (``num_envs * len(possible_agents)`` columns; see ``docs/multi-agent.md``).
    num_envs:
        How many envs to run.
    policy:
        ``policy(observations) -> actions`` (or a :class:`~parallel_rollouts.PolicyOutput`,
        or a :class:`~parallel_rollouts.RecurrentPolicy`), as for
        :class:`ParallelRolloutCollector`; ``None`` samples the action space.
    backend:
        ``"serial"``, ``"sync"``, ``"async"`` or ``"ray"``, as for
        :class:`ParallelRolloutCollector`.
    horizon:
        Steps per env in each ``collect()``.
    seed:
        Root seed of every env's episode seeds and action sampler; ``None`` draws one,
        as for :class:`ParallelRolloutCollector`.
    env_kwargs:
        Keyword arguments of ``gymnasium.make`` for every env: its own
        (``max_episode_steps``, ``render_mode``, ``disable_env_checker``, ...) and the
        env's constructor arguments (for a PettingZoo env, its constructor's only).
    wrappers:
        Callables ``env -> env`` applied to each env in order after
        ``gymnasium.make`` (or the PettingZoo constructor), e.g.
        ``[gymnasium.wrappers.FlattenObservation]``. For the
        async and Ray backends they must be picklable by ``cloudpickle``.
    **collector_kwargs:
        Every keyword-only argument of :class:`ParallelRolloutCollector` (``core``,
        ``num_workers``, ``policy_placement``, ``max_policy_lag``, ...), passed on as
        given and checked there, once, with the collector's messages.

    Raises
    ------
    ConfigurationError
        For an unknown id, naming it (with Gymnasium's suggestion), or invalid
        arguments. The collector's own errors otherwise.
    """
    constructor = _parallel_env_constructor(env_id)
    spec = None if constructor is not None else _resolve_spec(env_id)
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ConfigurationError(f"`num_envs` must be an int >= 1; got {num_envs!r}.")
    if env_kwargs is None:
        env_kwargs = {}
    if not isinstance(env_kwargs, Mapping):
        raise ConfigurationError(
            f"`env_kwargs` must be a dict of `gymnasium.make` keyword arguments; got {type(env_kwargs).__name__}."
        )
    if callable(wrappers) or isinstance(wrappers, (str, bytes)) or not isinstance(wrappers, Sequence):
        raise ConfigurationError(
            f"`wrappers` must be a list of callables `env -> env`; got {wrappers!r}. Wrap a single one in a list."
        )
    for index, wrapper in enumerate(wrappers):
        if not callable(wrapper):
            raise ConfigurationError(f"wrappers[{index}] is not callable; got {wrapper!r}.")
    if constructor is not None:
        env_fn = partial(_construct_env, constructor, dict(env_kwargs), tuple(wrappers))
    else:
        env_fn = partial(_make_env, spec, dict(env_kwargs), tuple(wrappers))
    return ParallelRolloutCollector([env_fn] * num_envs, policy, backend, horizon, seed, **collector_kwargs)


def _parallel_env_constructor(env_id: Any) -> Callable[..., Any] | None:
    """The PettingZoo parallel env constructor ``env_id`` names, or None when it names none.

    PettingZoo's env modules each expose ``parallel_env``; a class is taken when it
    subclasses ``pettingzoo.ParallelEnv``. Other callables are not guessed at: they are
    refused by :func:`_resolve_spec` with the pointer to env factories.
    """
    if isinstance(env_id, types.ModuleType):
        constructor = getattr(env_id, "parallel_env", None)
        if not callable(constructor):
            raise ConfigurationError(
                f"`env_id` is the module {env_id.__name__!r}, which has no `parallel_env` constructor; pass a "
                "PettingZoo env module (e.g. `mpe2.simple_spread_v3`) or a registered Gymnasium env id."
            )
        return constructor
    if callable(env_id) and _is_parallel_env_function(env_id):
        return env_id
    if isinstance(env_id, type):
        try:
            from pettingzoo import ParallelEnv
        except ImportError:
            return None
        return env_id if issubclass(env_id, ParallelEnv) else None
    return None


def _is_parallel_env_function(function: Any) -> bool:
    """A module's ``parallel_env``: a function of that name, or the wrapper PettingZoo's
    ``parallel_wrapper_fn`` builds for it (which every PettingZoo env module exposes as
    ``parallel_env``)."""
    if getattr(function, "__name__", None) == "parallel_env":
        return True
    return getattr(function, "__qualname__", "") == "parallel_wrapper_fn.<locals>.par_fn"


def _construct_env(constructor: Callable[..., Any], env_kwargs: dict, wrappers: tuple) -> Any:
    """The factory of a PettingZoo env: its constructor with ``env_kwargs``, then each wrapper in order."""
    env = constructor(**env_kwargs)
    for wrapper in wrappers:
        env = wrapper(env)
    return env


def _resolve_spec(env_id: Any) -> EnvSpec:
    if isinstance(env_id, EnvSpec):
        return env_id
    if not isinstance(env_id, str):
        hint = (
            " For env factories, use ParallelRolloutCollector(env_fns, ...) directly; for a PettingZoo env, "
            "pass its module or its `parallel_env` constructor."
            if callable(env_id) or isinstance(env_id, (list, tuple))
            else ""
        )
        raise ConfigurationError(
            f"`env_id` must be a registered Gymnasium env id (str) or an EnvSpec; got {env_id!r}.{hint}"
        )
    module, _, name = env_id.rpartition(":")
    if module:  # "package:EnvName-v0": importing the package registers its envs
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise ConfigurationError(
                f"`env_id` {env_id!r} names module {module!r}, which cannot be imported ({error}); "
                "install the package that registers the env."
            ) from error
    try:
        return gymnasium.spec(name)
    except gymnasium.error.Error as error:
        reason = str(error).rstrip()
        reason += "" if reason.endswith((".", "?", "!")) else "."
        raise ConfigurationError(
            f"`env_id` {env_id!r} is not a registered Gymnasium env: {reason} Import the package that "
            "registers it first, or pass 'package:EnvName-v0'."
        ) from error


def _make_env(spec: EnvSpec, env_kwargs: dict, wrappers: tuple) -> gymnasium.Env:
    """The env factory: ``gymnasium.make`` from the spec, then each wrapper in order."""
    env = gymnasium.make(spec, **env_kwargs)
    for wrapper in wrappers:
        env = wrapper(env)
    return env
