"""Parallel Rollouts: low-overhead rollout collection from Gymnasium environments."""

from .batch import RolloutBatch
from .collector import ParallelRolloutCollector
from .conformance import Advice, CheckResult, CheckStatus, ConformanceReport, advise, check_env
from .core import CoreFallbackWarning, active_core
from .errors import (
    ActionError,
    CollectorClosedError,
    ConfigurationError,
    CoreUnavailableError,
    EnvFailure,
    ObservationError,
    ObservationWarning,
    ParallelRolloutsError,
    PolicyTransferError,
    ResetNeededError,
    SpaceError,
    StalePolicyWarning,
    StepTimeoutError,
    VectorEnvClosedError,
    WorkerDiedError,
    WorkerError,
)
from .make import make_collector
from .policy import PolicyOutput
from .runners.base import RunnerState
from .vector_env import ParallelVectorEnv

__version__ = "0.1.0"

__all__ = [
    "ActionError",
    "Advice",
    "CheckResult",
    "CheckStatus",
    "CollectorClosedError",
    "ConfigurationError",
    "ConformanceReport",
    "CoreFallbackWarning",
    "CoreUnavailableError",
    "EnvFailure",
    "ObservationError",
    "ObservationWarning",
    "ParallelRolloutCollector",
    "ParallelRolloutsError",
    "ParallelVectorEnv",
    "PolicyOutput",
    "PolicyTransferError",
    "ResetNeededError",
    "RolloutBatch",
    "RunnerState",
    "SpaceError",
    "StalePolicyWarning",
    "StepTimeoutError",
    "VectorEnvClosedError",
    "WorkerDiedError",
    "WorkerError",
    "__version__",
    "active_core",
    "advise",
    "check_env",
    "make_collector",
]
