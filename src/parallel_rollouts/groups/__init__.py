"""Groups of envs and the one interface every backend drives them through (:mod:`.base`)."""

from .agents import AgentEnvGroup
from .base import RolloutGroup
from .building import (
    ColumnSpaces,
    build_groups,
    check_distinct_envs,
    check_replacement_columns,
    make_all,
    resolve_layout,
    spaces_per_env,
)
from .chain import GroupChain
from .single_envs import EnvGroup
from .vector_source import VectorEnvGroup

__all__ = [
    "AgentEnvGroup",
    "ColumnSpaces",
    "EnvGroup",
    "GroupChain",
    "RolloutGroup",
    "VectorEnvGroup",
    "build_groups",
    "check_distinct_envs",
    "check_replacement_columns",
    "make_all",
    "resolve_layout",
    "spaces_per_env",
]
