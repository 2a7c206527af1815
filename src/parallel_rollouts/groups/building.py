"""From env factories to the groups that step them, for every backend that hosts groups.

A factory returns a single ``gymnasium.Env``, a Gymnasium vector env
(``gymnasium.make_vec(...)``, ``CartPoleVectorEnv``, a user's ``VectorEnv``) or a
PettingZoo ``ParallelEnv`` (a multi-agent env). All factories of a collector must
return the same kind. Single envs are grouped as the backend chooses (one
:class:`EnvGroup` per env for ``serial``, one for all of a process's envs
otherwise); a vector env is always one :class:`VectorEnvGroup` covering its
``num_envs`` columns, and a multi-agent env one :class:`AgentEnvGroup` covering one
column per possible agent, each placed after the columns of the factories before it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
from gymnasium import Env, Space

from ..checks.factories import not_an_env
from ..errors import ConfigurationError, SpaceError, WorkerError
from ..config.layout import RolloutLayout
from ..config.spec import RolloutSpec
from ..data.spaces import check_env_spaces
from .agents import AgentEnvGroup, agent_spaces, check_parallel_env, is_parallel_env
from .base import RolloutGroup
from .single_envs import EnvGroup, close_each, describe_failure
from .vector_source import VectorEnvGroup, check_vector_env, is_vector_env

__all__ = [
    "ColumnSpaces",
    "build_groups",
    "check_distinct_envs",
    "check_replacement_columns",
    "make_all",
    "resolve_layout",
    "spaces_per_env",
]


class ColumnSpaces(NamedTuple):
    """What one column of the batch declares: its spaces, and its agent's name for a multi-agent env."""

    observation: Space
    action: Space
    agent: Any = None
    #: Whether this is the first column of the env (or vector env) it belongs to.
    first: bool = True


def _make_one(env_fn: Callable[[], Any], index: int) -> Any:
    try:
        made = env_fn()
    except Exception as error:
        raise WorkerError.from_failures([describe_failure(index, "make", error)]) from error
    if is_vector_env(made):
        check_vector_env(made, f"env_fns[{index}]")
    elif is_parallel_env(made):
        check_parallel_env(made, f"env_fns[{index}]")
    elif not isinstance(made, Env):
        raise not_an_env(f"env_fns[{index}]", made, vector_envs=True)
    return made


def make_all(env_fns: Sequence[Callable[[], Any]], first_index: int) -> list:
    """Call every factory (``env_fns[k]`` is factory ``first_index + k``); close what was made if one fails."""
    made: list = []
    try:
        for k, env_fn in enumerate(env_fns):
            made.append(_make_one(env_fn, first_index + k))
            if source_kind(made[-1]) != source_kind(made[0]):
                raise SpaceError(
                    f"env_fns[{first_index + k}] returned {source_kind(made[-1])} but env_fns[{first_index}] returned "
                    f"{source_kind(made[0])}; every factory must return the same kind."
                )
        check_distinct_envs(made, first_index)
    except BaseException:
        close_each(made)
        raise
    return made


def source_kind(made: Any) -> str:
    """What a factory returned, as messages name it."""
    if is_vector_env(made):
        return "a vector env"
    if is_parallel_env(made):
        return "a multi-agent (PettingZoo) env"
    return "a single env"


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


def spaces_per_env(made: Sequence[Any]) -> list[ColumnSpaces]:
    """The :class:`ColumnSpaces` of every env column, a vector env's sub-envs and a multi-agent env's agents included."""
    columns: list[ColumnSpaces] = []
    for env in made:
        if is_vector_env(env):
            columns.extend([ColumnSpaces(env.single_observation_space, env.single_action_space)] * int(env.num_envs))
        elif is_parallel_env(env):
            agents, observation_space, action_space = agent_spaces(env, f"the multi-agent env {type(env).__name__}")
            columns.extend(
                ColumnSpaces(observation_space, action_space, agent, k == 0) for k, agent in enumerate(agents)
            )
        else:
            columns.append(ColumnSpaces(env.observation_space, env.action_space))
    return columns


def check_replacement_columns(columns: Sequence[ColumnSpaces], start: int, stop: int, layout: RolloutLayout, who: str) -> None:
    """Refuse a replacement whose envs span other columns than those it replaces (``start .. stop - 1``).

    ``who`` names the worker or actor. The count, each column's spaces and, for multi-agent envs,
    each column's agent must be what the first envs of those factories made.
    """
    if len(columns) != stop - start:
        raise WorkerError(
            f"the replacement of {who} made {len(columns)} envs where its factories made {stop - start} before; "
            "env factories must make the same envs every time."
        )
    for offset, column in enumerate(columns):
        check_env_spaces(start + offset, column.observation, column.action, layout.observation_space, layout.action_space)
        expected = layout.column_agents[start + offset] if layout.column_agents else None
        if column.agent != expected:
            raise WorkerError(
                f"the replacement of {who} has agent {column.agent!r} at env {start + offset} where the first envs had "
                f"{expected!r}; env factories must make the same envs (the same agents) every time."
            )


def resolve_layout(spec: RolloutSpec, columns: Sequence[ColumnSpaces]) -> RolloutLayout:
    """The collector's layout from every column's spaces (each checked against column 0's) and agents."""
    first = columns[0]
    for index, column in enumerate(columns):
        check_env_spaces(index, column.observation, column.action, first.observation, first.action)
    agents = tuple(column.agent for column in columns)
    multi_agent = any(agent is not None for agent in agents)
    # Which multi-agent env each column belongs to (the envs numbered from 0).
    envs = tuple(int(count) - 1 for count in np.cumsum([column.first for column in columns]))
    return spec.resolve(
        first.observation, first.action, num_envs=len(columns),
        column_agents=agents if multi_agent else (), column_envs=envs if multi_agent else (),
    )


def build_groups(
    made: Sequence[Any],
    column_offset: int,
    single_env_bounds: Sequence[tuple[int, int]],
    layout: RolloutLayout,
    incarnation: int = 0,
) -> list[tuple[int, int, RolloutGroup]]:
    """The groups over ``made``, as ``(start, stop, group)`` with columns relative to ``column_offset``.

    ``single_env_bounds`` groups single envs (ignored for vector envs, which are
    one group each, as is a multi-agent env). ``incarnation``: how many times these envs' worker was replaced
    (their episode seeds then come from a stream of their own, see :mod:`~parallel_rollouts.config.seeding`).
    """
    if made and (is_vector_env(made[0]) or is_parallel_env(made[0])):
        group_class = VectorEnvGroup if is_vector_env(made[0]) else AgentEnvGroup
        groups, start = [], 0
        for env in made:
            group = group_class(env, column_offset + start, layout, incarnation)
            groups.append((start, start + group.num_envs, group))
            start += group.num_envs
        return groups
    return [
        (start, stop, EnvGroup(list(made[start:stop]), column_offset + start, layout, incarnation))
        for start, stop in single_env_bounds
    ]
