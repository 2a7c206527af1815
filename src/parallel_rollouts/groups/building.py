"""From env factories to the groups that step them, for every backend that hosts groups.

A factory returns either a single ``gymnasium.Env`` or a Gymnasium vector env
(``gymnasium.make_vec(...)``, ``CartPoleVectorEnv``, a user's ``VectorEnv``).
All factories of a collector must return the same kind. Single envs are
grouped as the backend chooses (one :class:`EnvGroup` per env for ``serial``,
one for all of a process's envs otherwise); a vector env is always one
:class:`VectorEnvGroup` covering its ``num_envs`` columns, placed after the
columns of the factories before it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gymnasium import Env, Space

from ..checks.factories import not_an_env
from ..errors import ConfigurationError, SpaceError, WorkerError
from ..config.layout import RolloutLayout
from .base import RolloutGroup
from .single_envs import EnvGroup, close_each, describe_failure
from .vector_source import VectorEnvGroup, check_vector_env, is_vector_env

__all__ = ["build_groups", "check_distinct_envs", "make_all", "spaces_per_env"]


def _make_one(env_fn: Callable[[], Any], index: int) -> Any:
    try:
        made = env_fn()
    except Exception as error:
        raise WorkerError.from_failures([describe_failure(index, "make", error)]) from error
    if is_vector_env(made):
        check_vector_env(made, f"env_fns[{index}]")
    elif not isinstance(made, Env):
        raise not_an_env(f"env_fns[{index}]", made, vector_envs=True)
    return made


def make_all(env_fns: Sequence[Callable[[], Any]], first_index: int) -> list:
    """Call every factory (``env_fns[k]`` is factory ``first_index + k``); close what was made if one fails."""
    made: list = []
    try:
        for k, env_fn in enumerate(env_fns):
            made.append(_make_one(env_fn, first_index + k))
            if is_vector_env(made[-1]) != is_vector_env(made[0]):
                kinds = ("a vector env", "a single env")
                first, this = (kinds[0], kinds[1]) if is_vector_env(made[0]) else (kinds[1], kinds[0])
                raise SpaceError(
                    f"env_fns[{first_index + k}] returned {this} but env_fns[{first_index}] returned {first}; "
                    "every factory must return the same kind."
                )
        check_distinct_envs(made, first_index)
    except BaseException:
        close_each(made)
        raise
    return made


def check_distinct_envs(envs: Sequence[Any], env_offset: int) -> None:
    """Refuse one env object behind several env indices, which would interleave their data.

    Envs (and vector envs) are compared unwrapped, so two wrappers around one
    env count as one. Each process checks the envs it made: factories shipped to workers are
    unpickled one by one, so ``lambda: env`` gives each index its own copy
    there, while a factory returning a module-level env does not.
    """
    indices_by_env: dict[int, list[int]] = {}
    for column, env in enumerate(envs):
        indices_by_env.setdefault(id(getattr(env, "unwrapped", env)), []).append(env_offset + column)
    shared = [indices for indices in indices_by_env.values() if len(indices) > 1]
    if not shared:
        return
    groups = "; ".join(
        ", ".join(f"env_fns[{index}]" for index in indices)
        + f" returned the same {type(getattr(envs[indices[0] - env_offset], 'unwrapped', None)).__name__} instance"
        for indices in shared
    )
    raise ConfigurationError(
        f"{groups}. Stepping one env for several env indices would interleave their data. Make each "
        "factory create a new env on every call (e.g. `[lambda: gymnasium.make(\"CartPole-v1\") for _ in "
        "range(n)]`), rather than return one made earlier (`[lambda: env] * n`, a module-level env)."
    )


def spaces_per_env(made: Sequence[Any]) -> list[tuple[Space, Space]]:
    """``(observation_space, action_space)`` of every env column, a vector env's sub-envs included."""
    pairs: list[tuple[Space, Space]] = []
    for env in made:
        if is_vector_env(env):
            pairs.extend([(env.single_observation_space, env.single_action_space)] * int(env.num_envs))
        else:
            pairs.append((env.observation_space, env.action_space))
    return pairs


def build_groups(
    made: Sequence[Any],
    column_offset: int,
    single_env_bounds: Sequence[tuple[int, int]],
    layout: RolloutLayout,
    incarnation: int = 0,
) -> list[tuple[int, int, RolloutGroup]]:
    """The groups over ``made``, as ``(start, stop, group)`` with columns relative to ``column_offset``.

    ``single_env_bounds`` groups single envs (ignored for vector envs, which are
    one group each). ``incarnation``: how many times these envs' worker was replaced
    (their episode seeds then come from a stream of their own, see :mod:`~parallel_rollouts.config.seeding`).
    """
    if made and is_vector_env(made[0]):
        groups, start = [], 0
        for vector_env in made:
            stop = start + int(vector_env.num_envs)
            groups.append((start, stop, VectorEnvGroup(vector_env, column_offset + start, layout, incarnation)))
            start = stop
        return groups
    return [
        (start, stop, EnvGroup(list(made[start:stop]), column_offset + start, layout, incarnation))
        for start, stop in single_env_bounds
    ]
