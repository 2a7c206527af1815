"""Groups of envs and the one interface every backend drives them through (:mod:`.base`)."""

from . import building
from .agents import AgentEnvGroup
from .base import RolloutGroup
from .building import *  # every name in building.__all__
from .chain import GroupChain
from .single_envs import EnvGroup
from .vector_source import VectorEnvGroup

# The groups themselves; then what builds them, from building.__all__, all in one sorted list.
__all__ = [
    "AgentEnvGroup",
    "EnvGroup",
    "GroupChain",
    "RolloutGroup",
    "VectorEnvGroup",
]
__all__ += building.__all__
__all__.sort()
