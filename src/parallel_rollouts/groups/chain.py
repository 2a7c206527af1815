"""Groups over consecutive columns, stepped one after another and seen as one group."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import WorkerError
from ..checks.failures import merged_failure
from ..data.storage import CompletedEpisodes, RolloutStorage
from .base import RolloutGroup

__all__ = ["GroupChain"]


class GroupChain:
    """Groups over consecutive columns, stepped one after another, seen as one group."""

    def __init__(self, groups: Sequence[tuple[int, int, RolloutGroup]]) -> None:
        self._groups = list(groups)
        self.num_envs = self._groups[-1][1] if self._groups else 0
        self.env_offset = self._groups[0][2].env_offset if self._groups else 0

    def reset_all(self) -> None:
        for _, _, group in self._groups:
            group.reset_all()

    def begin(self, storage: RolloutStorage) -> None:
        for start, stop, group in self._groups:
            group.begin(storage.columns(start, stop))

    def step(self, t: int) -> None:
        if len(self._groups) == 1:
            # One group (sync): its error is the step's error, as merged_failure would say.
            self._groups[0][2].step(t)
            return
        # Every group steps even after one fails, so that all failures of one
        # step are reported together, as one WorkerError.
        errors: list[WorkerError] = []
        for _, _, group in self._groups:
            try:
                group.step(t)
            except WorkerError as error:
                errors.append(error)
        error = merged_failure(errors)
        if error is None:
            return
        if len(errors) == 1:
            raise error
        raise error from errors[0].__cause__

    def step_function(self):
        """``step``, or with one group that group's own ``step`` (one Python frame less per row)."""
        return self._groups[0][2].step if len(self._groups) == 1 else self.step

    def finish(self) -> CompletedEpisodes:
        return CompletedEpisodes.merge([group.finish() for _, _, group in self._groups])

    def abandon(self, t: int) -> None:
        for _, _, group in self._groups:
            group.abandon(t)

    def close(self) -> list[tuple[int, BaseException]]:
        return [error for _, _, group in self._groups for error in group.close()]
