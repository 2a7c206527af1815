"""Parallel Rollouts: low-overhead rollout collection from Gymnasium environments.

The public API is ``__all__`` below. The package root holds the front doors (the collector,
``make_collector``, ``ParallelVectorEnv``; ``parallel_rollouts.sb3`` for Stable-Baselines3),
the exception tree (``errors``) and the command line; every internal role is a folder of its
own, and ``docs/architecture.md`` draws how they stack.
"""

from .collector import ParallelRolloutCollector
from .conformance import Advice, CheckResult, CheckStatus, ConformanceReport, advise, check_env
from .core.selector import CoreFallbackWarning, active_core
from . import errors
from .data.batch import RolloutBatch
# The exception tree: every name in errors.__all__ is public here too.
from .errors import *
from .groups.agent_padding import PadAgentSpaces
from .make import make_collector
from .policy.output import PolicyOutput
from .policy.recurrent import RecurrentPolicy
from .runners.base import RunnerState
from .vector_env import ParallelVectorEnv

# The version of this source, written here only. A build adds the commit it was made from as a local
# label (setup.py): `parallel-rollouts --version` and importlib.metadata show that, e.g.
# 0.2.0.dev0+g1a2b3c4, so that a bug report names the build.
__version__ = "0.2.0.dev0"

# The front doors and their companions; then the exceptions of errors.py, all in one sorted list.
__all__ = [
    "Advice",
    "CheckResult",
    "CheckStatus",
    "ConformanceReport",
    "CoreFallbackWarning",
    "PadAgentSpaces",
    "ParallelRolloutCollector",
    "ParallelVectorEnv",
    "PolicyOutput",
    "RecurrentPolicy",
    "RolloutBatch",
    "RunnerState",
    "__version__",
    "active_core",
    "advise",
    "check_env",
    "make_collector",
]
__all__ += errors.__all__
__all__.sort()
