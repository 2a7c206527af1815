"""The exceptions Parallel Rollouts raises.

Every exception also subclasses the builtin a caller would naturally catch::

    ParallelRolloutsError                      base of everything raised here
    ├── ConfigurationError (ValueError)        bad constructor argument
    │   └── SpaceError                         unsupported or mismatched spaces
    ├── CoreUnavailableError (ImportError)     ``core="compiled"`` but it was not built
    ├── ActionError (ValueError)               the policy's output does not fit the action space
    ├── ObservationError (ValueError)          an env returned an observation outside its space
    ├── CollectorClosedError (RuntimeError)    the collector was closed or broken earlier
    │   └── VectorEnvClosedError               the same for ParallelVectorEnv; also a
    │                                          ``gymnasium.error.ClosedEnvironmentError``
    ├── ResetNeededError (RuntimeError)        ParallelVectorEnv stepped before its envs were reset;
    │                                          also a ``gymnasium.error.ResetNeeded``
    ├── PolicyTransferError (RuntimeError)     a worker could not rebuild the policy sent to it
    └── WorkerError (RuntimeError)             an env raised, or the process hosting it failed
        ├── WorkerDiedError                    a worker process exited or was killed
        └── StepTimeoutError (TimeoutError)    envs did not finish a step within ``step_timeout``

Warnings: ``ObservationWarning`` (UserWarning) when an env's float observation
leaves its declared bounds and ``observation_check="warn"`` (the default);
``StalePolicyWarning`` (UserWarning) when the policy sent to rollout workers or Ray
actors is a function they import by name, whose module globals never follow this
process's; ``BatchMemoryWarning`` (UserWarning) when one batch of the collector
would need more memory than the machine has available, said before the envs are
built; ``OversubscriptionWarning`` (UserWarning) when PyTorch's threads and the worker
processes together want more cores than this process may use, said once, with the fix;
``ObservationRoundingWarning`` (UserWarning) when an env's observations are stored by a
conversion that may round them (float64 into a float32 space), said once per env and leaf;
``GlobalGeneratorWarning`` (UserWarning) when, with ``max_policy_lag=1``, PyTorch's global
generator moved while the background thread collected, said once per collector.

Errors raised by the policy itself are not wrapped: they reach the caller as the
policy raised them.
"""

from __future__ import annotations

from dataclasses import dataclass

from gymnasium.error import ClosedEnvironmentError, ResetNeeded

__all__ = [
    "ActionError",
    "BatchMemoryWarning",
    "CollectorClosedError",
    "ConfigurationError",
    "CoreUnavailableError",
    "EnvFailure",
    "GlobalGeneratorWarning",
    "ObservationError",
    "ObservationRoundingWarning",
    "ObservationWarning",
    "OversubscriptionWarning",
    "ParallelRolloutsError",
    "PolicyTransferError",
    "ResetNeededError",
    "SpaceError",
    "StalePolicyWarning",
    "StepTimeoutError",
    "VectorEnvClosedError",
    "WorkerDiedError",
    "WorkerError",
]


class ParallelRolloutsError(Exception):
    """Base class of every exception raised by Parallel Rollouts."""


class ConfigurationError(ParallelRolloutsError, ValueError):
    """A constructor argument is invalid."""


class SpaceError(ConfigurationError):
    """A space is not supported, or the envs do not all declare the same spaces."""


class CoreUnavailableError(ParallelRolloutsError, ImportError):
    """``core="compiled"`` was requested but the compiled extension cannot be imported."""


class ActionError(ParallelRolloutsError, ValueError):
    """The policy returned actions (or values, log-probabilities) that do not fit."""


class ObservationError(ParallelRolloutsError, ValueError):
    """An env returned an observation that does not match its observation space."""


class ObservationWarning(ParallelRolloutsError, UserWarning):
    """A float observation left its declared bounds; stored as returned (``observation_check="warn"``)."""


class ObservationRoundingWarning(ParallelRolloutsError, UserWarning):
    """An env returned observations of a dtype its space's dtype may not hold exactly (float64
    for a float32 space): they are stored as the space's dtype, rounded, so values may change.
    Said once per env and leaf; return the space's dtype, or declare the dtype the env returns."""


class GlobalGeneratorWarning(ParallelRolloutsError, UserWarning):
    """With ``max_policy_lag=1``, PyTorch's global generator moved while a batch was collected on
    the background thread: the policy (or an env this process steps) draws from it, in a race
    with the learner's own draws, so batches no longer follow from the seeds. Give the policy a
    ``torch.Generator`` of its own."""


class BatchMemoryWarning(ParallelRolloutsError, UserWarning):
    """One batch would take more memory than is available (``num_envs x horizon x`` its bytes per row)."""


class OversubscriptionWarning(ParallelRolloutsError, UserWarning):
    """PyTorch's threads plus the worker processes exceed the usable cores: PyTorch's threads
    then wait actively for cores the workers hold, and a training loop can run many times slower."""


class StalePolicyWarning(ParallelRolloutsError, UserWarning):
    """The remote copies of the policy cannot follow part of it: a function sent by name,
    whose module globals each worker imports afresh."""


class PolicyTransferError(ParallelRolloutsError, RuntimeError):
    """A worker or actor could not rebuild the policy sent to it; that rollout was not run."""


class CollectorClosedError(ParallelRolloutsError, RuntimeError):
    """The collector was closed, or an earlier failure left it unusable."""


class VectorEnvClosedError(CollectorClosedError, ClosedEnvironmentError):
    """A ParallelVectorEnv was closed, or an earlier failure left it unusable.

    Also a ``gymnasium.error.ClosedEnvironmentError``, which Gymnasium's
    ``AsyncVectorEnv`` raises in the same case.
    """


class ResetNeededError(ParallelRolloutsError, RuntimeError, ResetNeeded):
    """A ParallelVectorEnv was stepped before every env was reset; nothing was stepped.

    Also a ``gymnasium.error.ResetNeeded``, which a Gymnasium env raises in the same case.
    """


@dataclass(frozen=True)
class EnvFailure:
    """One env's failure, as reported by whatever process hosted the env.

    ``phase`` is where it happened: ``"make"`` (the factory), ``"reset"`` (the
    first reset), ``"autoreset"`` (the reset after an episode ended), ``"step"``,
    or ``"info"`` (a requested info key was missing or not a scalar).
    """

    env_index: int
    phase: str
    exception_type: str
    message: str
    traceback: str

    def describe(self) -> str:
        return f"env {self.env_index} raised {self.exception_type} in `{self.phase}`: {self.message}"


class WorkerError(ParallelRolloutsError, RuntimeError):
    """One or more envs raised, or the process hosting them failed.

    ``failures`` lists every env that failed in the same step, each with the
    original exception's type, message and the traceback from where it was
    raised (``remote_traceback`` joins them).
    """

    def __init__(self, message: str, failures: tuple[EnvFailure, ...] = ()) -> None:
        super().__init__(message)
        self.failures = tuple(failures)

    @classmethod
    def from_failures(cls, failures: list[EnvFailure] | tuple[EnvFailure, ...]) -> WorkerError:
        lines = [failure.describe() for failure in failures]
        if len(lines) == 1:
            message = lines[0]
        else:
            message = f"{len(lines)} envs failed:\n  " + "\n  ".join(lines)
        return cls(message, tuple(failures))

    @property
    def env_indices(self) -> tuple[int, ...]:
        return tuple(failure.env_index for failure in self.failures)

    @property
    def remote_traceback(self) -> str:
        return "\n".join(failure.traceback for failure in self.failures)

    def __reduce__(self):
        return (type(self), (self.args[0], self.failures))

    def __str__(self) -> str:
        text = super().__str__()
        if self.failures and self.failures[0].traceback:
            text += "\n\nTraceback from the env:\n" + self.remote_traceback
        return text


class WorkerDiedError(WorkerError):
    """A worker process exited or was killed while the collector needed it."""


class StepTimeoutError(WorkerError, TimeoutError):
    """Envs did not finish a step within ``step_timeout`` seconds."""
