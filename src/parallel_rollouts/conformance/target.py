"""What an env target names, turned into one picklable factory and a description.

A target is an env factory (any zero-argument callable returning a Gymnasium
``Env`` or ``VectorEnv``), a registered env id (``"CartPole-v1"``,
``"ale_py:ALE/Pong-v5"``), an ``EnvSpec``, or ``"module:factory"`` naming a
callable in an importable module (the command line's way to pass a factory).
Ids become the same factories ``make_collector`` builds (carrying the resolved
spec, so plugin ids work in spawned processes too); ``module:factory`` becomes a
factory that imports the module where it is called.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from gymnasium.envs.registration import EnvSpec

from ..checks.factories import not_an_env
from ..errors import ConfigurationError
from ..make import _make_env, _resolve_spec
from ..groups.vector_source import is_vector_env

__all__ = ["EnvTarget", "as_env", "build_env", "callable_name", "import_target_module", "resolve_target", "spaces_of"]


@dataclass(frozen=True)
class EnvTarget:
    """A zero-argument factory of the env under test, and how to name it in reports."""

    factory: Callable[[], Any]
    description: str
    #: For a registered id: its spec and what ``gymnasium.make`` and the wrappers were given.
    spec: EnvSpec | None = None
    env_kwargs: Mapping[str, Any] | None = None
    wrappers: tuple[Callable, ...] = ()
    #: For a registered id: the id as it was given (``"ale_py:ALE/Pong-v5"``), for code that rebuilds it.
    env_id: str | None = None


def resolve_target(
    env_fn_or_id: Any, env_kwargs: Mapping[str, Any] | None = None, wrappers: Sequence[Callable] = ()
) -> EnvTarget:
    """The factory and description of ``env_fn_or_id``; ``ConfigurationError`` naming it if it is neither."""
    if env_kwargs is not None and not isinstance(env_kwargs, Mapping):
        raise ConfigurationError(f"`env_kwargs` must be a dict; got {type(env_kwargs).__name__}.")
    if isinstance(env_fn_or_id, str):
        factory = _factory_in_module(env_fn_or_id)
        if factory is not None:
            _only_for_ids(env_fn_or_id, env_kwargs, wrappers)
            return EnvTarget(factory, env_fn_or_id)
    if isinstance(env_fn_or_id, (str, EnvSpec)):
        spec = _resolve_id(env_fn_or_id)
        factory = partial(_make_env, spec, dict(env_kwargs or {}), tuple(wrappers))
        name = env_fn_or_id if isinstance(env_fn_or_id, str) else spec.id
        extras = [f"{key}={value!r}" for key, value in (env_kwargs or {}).items()]
        extras += [getattr(wrapper, "__name__", repr(wrapper)) for wrapper in wrappers]
        description = name + (f" ({', '.join(extras)})" if extras else "")
        return EnvTarget(factory, description, spec, dict(env_kwargs or {}), tuple(wrappers), name)
    if callable(env_fn_or_id):
        _only_for_ids("an env factory", env_kwargs, wrappers)
        return EnvTarget(env_fn_or_id, callable_name(env_fn_or_id))
    raise ConfigurationError(
        f"check_env needs an env factory (a zero-argument callable returning an env), a registered env id "
        f"or 'module:factory'; got {env_fn_or_id!r}. An env instance cannot be rebuilt in another process: "
        "pass the function that makes it."
    )


def _only_for_ids(what: str, env_kwargs: Any, wrappers: Sequence[Callable]) -> None:
    if env_kwargs or wrappers:
        raise ConfigurationError(
            f"`env_kwargs` and `wrappers` apply to registered env ids only; {what} builds the env itself: "
            "pass the arguments and wrappers inside it."
        )


def _factory_in_module(text: str) -> Callable | None:
    """``"package.module:name"`` naming a callable that is not a registered env id, else None.

    The module part of any ``"module:rest"`` is imported here, whatever ``rest`` is, so that
    every way an import fails is said as a ``ConfigurationError`` naming the module.
    """
    module_name, colon, attribute = text.partition(":")
    if not colon:
        return None
    module = import_target_module(text, module_name)
    if not attribute.isidentifier() or not callable(getattr(module, attribute, None)):
        return None  # "package:EnvId": importing the package registered the id
    return partial(_call_in_module, module_name, attribute)


def import_target_module(text: str, module_name: str) -> Any:
    """Import ``module_name``, the module part of ``text`` (``"module:name"``); every way that fails is a
    ``ConfigurationError`` naming the module and what to do."""
    if not module_name or not all(part.isidentifier() for part in module_name.split(".")):
        raise ConfigurationError(
            f"{text!r} names {module_name!r}, which is not a module name: write the module dotted, as "
            "`python -m` takes it ('package.module:factory', no '/', '../' or '.py'), and run from the "
            "directory that holds it."
        )
    try:
        return importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigurationError(
            f"{text!r} names module {module_name!r}, which cannot be imported ({error}). Run from the directory "
            "that holds it, or install the package that provides it."
        ) from error
    except (Exception, SystemExit) as error:  # the module's own code failed as it was imported
        what = f"SystemExit({error.code!r})" if isinstance(error, SystemExit) else f"{type(error).__name__}: {error}"
        raise ConfigurationError(
            f"{text!r} names module {module_name!r}, which raised {what} when imported. Fix the module, or keep "
            "its script code under `if __name__ == \"__main__\":`."
        ) from error


def _resolve_id(target: str | EnvSpec) -> EnvSpec:
    """The spec of a registered id; for ``"module:name"`` that names neither, say both."""
    try:
        return _resolve_spec(target)
    except ConfigurationError as error:
        module_name, colon, attribute = target.partition(":") if isinstance(target, str) else ("", "", "")
        if not colon or not attribute.isidentifier():
            raise
        found = getattr(importlib.import_module(module_name), attribute, None)
        what = (
            f"module {module_name!r} has no {attribute!r}" if found is None
            else f"{module_name}.{attribute} is a {type(found).__name__}, not callable"
        )
        raise ConfigurationError(
            f"{target!r}: {what}, and no env id {attribute!r} is registered. Name a zero-argument function "
            "that returns an env, or a registered env id."
        ) from error


def _call_in_module(module_name: str, attribute: str) -> Any:
    """Import ``module_name`` here (it may be a fresh process) and call its ``attribute``."""
    return getattr(importlib.import_module(module_name), attribute)()


def callable_name(factory: Any) -> str:
    """How reports name a callable: ``module.qualname``, a ``partial`` with its arguments."""
    if isinstance(factory, partial):
        arguments = [repr(argument) for argument in factory.args]
        arguments += [f"{key}={value!r}" for key, value in factory.keywords.items()]
        return f"partial({', '.join([callable_name(factory.func)] + arguments)})"
    module = getattr(factory, "__module__", None)
    name = getattr(factory, "__qualname__", None) or type(factory).__name__
    return f"{module}.{name}" if module and module != "builtins" else name


def build_env(factory: Callable[[], Any]) -> tuple[Any, bool]:
    """Call the factory; return the env and whether it is a vector env. A non-env is a ``ConfigurationError``."""
    return as_env(factory())


def as_env(env: Any) -> tuple[Any, bool]:
    """What a factory returned, and whether it is a vector env; ``ConfigurationError`` if it is not an env."""
    vector = is_vector_env(env)
    if hasattr(env, "possible_agents"):
        raise ConfigurationError(
            f"the env factory returned the multi-agent env {type(env).__name__}; `check` and `advise` examine single "
            "and vector envs. Collect a multi-agent env with make_collector or ParallelRolloutCollector (one column "
            "per agent, docs/multi-agent.md); PettingZoo's own `parallel_api_test` checks its API."
        )
    if not vector and not (hasattr(env, "reset") and hasattr(env, "step") and hasattr(env, "action_space")):
        raise not_an_env("the env factory", env, vector_envs=True)
    return env, vector


def spaces_of(env: Any, vector: bool) -> tuple[Any, Any]:
    """The observation and action spaces of one env (a vector env's single ones)."""
    if vector:
        return env.single_observation_space, env.single_action_space
    return env.observation_space, env.action_space
