"""What the collector asks of a runner, and what one rollout hands back."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field

import numpy as np

from ..storage import CompletedEpisodes, RolloutStorage

__all__ = ["RolloutResult", "RolloutRunner"]


@dataclass
class RolloutResult:
    """One rollout, as a runner hands it to the collector."""

    storage: RolloutStorage
    episodes: CompletedEpisodes
    has_values: bool
    has_log_probs: bool
    #: Envs whose rows in this rollout are not valid (their worker died and was
    #: restarted); empty for every runner that does not restart workers.
    lost_env_indices: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


class RolloutRunner(abc.ABC):
    """Runs one whole rollout per ``collect()``.

    ``broken`` is set when a failure left the envs in an unknown state; the collector
    then refuses to collect again. A failure that leaves ``broken`` unset (the policy
    raised, its output was rejected) keeps the runner usable: the rollout is dropped and
    every env continues from where it stands.
    """

    broken: BaseException | None = None

    @abc.abstractmethod
    def collect(self) -> RolloutResult: ...

    @abc.abstractmethod
    def close(self) -> None: ...

    def take_warnings(self) -> list:
        """Warnings raised in worker processes or actors since the last call
        (:mod:`parallel_rollouts.processes.forwarded_warnings` records)."""
        return []

    def _guarded(self, function, *args):
        """Call ``function``; any exception it raises breaks the runner."""
        try:
            return function(*args)
        except BaseException as error:
            self.broken = error
            raise
