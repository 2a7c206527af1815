"""What the advisor times as the policy, and how its report names it.

``advise(policy=...)`` and the command line's ``--policy`` take a policy by one rule: the
policy itself (a callable taking the observations ``[num_envs, ...]`` and returning the
actions), ``None`` for random actions (each env samples its seeded action space), or
``"module:factory"`` naming a zero-argument function in an importable module that returns
the policy, as ``check`` and ``advise`` take an env factory. The factory is called once, here;
the policy it returns is what every option runs (and what rollout workers receive pickled).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError
from .guard import explain_failure
from .target import callable_name, import_target_module

__all__ = ["POLICY_FLAG", "PolicyTarget", "resolve_policy"]

#: How a caller gives the advisor a policy, for the messages that say to.
POLICY_FLAG = "--policy module:factory (Python: advise(..., policy=your_policy))"

_RETURNS = "a callable that takes the observations [num_envs, ...] and returns the actions (or a PolicyOutput)"


@dataclass(frozen=True)
class PolicyTarget:
    """The policy to time (``None``: random actions) and how to name it in the advice."""

    policy: Callable[[Any], Any] | None
    description: str

    @property
    def random_actions(self) -> bool:
        return self.policy is None


def resolve_policy(policy: Any) -> PolicyTarget:
    """The policy ``policy`` gives (see the module); ``ConfigurationError`` naming the culprit and the fix."""
    if policy is None:
        return PolicyTarget(None, "none given: random actions (each env samples its seeded action space)")
    if isinstance(policy, str):
        return _from_factory(policy)
    if callable(policy):
        return PolicyTarget(policy, callable_name(policy))
    raise ConfigurationError(
        f"`policy` must be {_RETURNS}, None for random actions, or 'module:factory' naming a zero-argument "
        f"function that returns one; got {type(policy).__name__} {policy!r}."
    )


def _from_factory(text: str) -> PolicyTarget:
    module_name, colon, attribute = text.partition(":")
    if not colon or not attribute.isidentifier():
        raise ConfigurationError(
            f"the policy {text!r} is not 'module:factory': write the module dotted, a colon, and the name of a "
            "zero-argument function in it that returns your policy (e.g. 'my_policies:make_policy')."
        )
    module = import_target_module(text, module_name)
    factory = getattr(module, attribute, None)
    name = f"{module_name}.{attribute}"
    if factory is None:
        raise ConfigurationError(
            f"the policy {text!r}: module {module_name!r} has no {attribute!r}. Name a zero-argument function in it "
            f"that returns your policy (e.g. `def make_policy(): return Policy()`)."
        )
    if not callable(factory):
        raise ConfigurationError(
            f"the policy {text!r}: {name} is a {type(factory).__name__}, not a function. Name a zero-argument "
            "function that returns your policy (e.g. `def make_policy(): return Policy()`)."
        )
    required = _required_parameters(factory)
    if required:
        raise ConfigurationError(
            f"the policy {text!r}: {name} takes {', '.join(required)}, but 'module:factory' names a "
            f"zero-argument function that returns the policy, not the policy itself. Add "
            f"`def make_policy(): return {attribute}` to {module_name} (or a function that builds your policy) and "
            f"pass '{module_name}:make_policy'."
        )
    try:
        made = factory()
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # SystemExit included: the factory's failure, said with where it raised
        raised, _ = explain_failure(error, f"the policy factory {name}()", " as it was called with no arguments")
        raise ConfigurationError(f"{raised}. Fix the factory: it must build the policy without arguments.") from error
    if not callable(made):
        raise ConfigurationError(
            f"the policy factory {name}() returned {type(made).__name__} {_short(made)}, which is not callable; "
            f"it must return {_RETURNS}."
        )
    return PolicyTarget(made, f"{text} (built {callable_name(made)})")


def _required_parameters(function: Callable) -> list[str]:
    """The names of ``function``'s parameters that have no default (none when it has no signature)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # a builtin or extension callable without one: let the call say
        return []
    return [
        parameter.name
        for parameter in parameters
        if parameter.default is inspect.Parameter.empty
        and parameter.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
