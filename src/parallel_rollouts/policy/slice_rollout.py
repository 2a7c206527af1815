"""Whole rollouts of one slice of the envs with this process's copy of the policy.

The same code runs inside a Ray actor and inside an async rollout worker: the
:class:`~parallel_rollouts.policy.loop.RolloutLoop` the in-process runner runs, over the
slice's :class:`~parallel_rollouts.groups.EnvGroup`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..groups import RolloutGroup
from ..config.layout import RolloutLayout
from .cancel import cancellable
from .loop import build_loop
from ..data.recurrent_record import RecurrentRecord
from ..data.storage import CompletedEpisodes, RolloutStorage

__all__ = ["PolicyFailed", "SliceResult", "SliceRollout"]


@dataclass
class SliceResult:
    episodes: CompletedEpisodes
    has_values: bool
    has_log_probs: bool
    #: A recurrent policy's state record of the slice's envs (``None``: not recurrent).
    recurrent: RecurrentRecord | None = None


class PolicyFailed(Exception):
    """The policy (or its output, or loading its state) failed; the envs are intact.

    The slice's rollout was dropped after ``steps_done`` steps; ``error`` is what
    was raised.
    """

    def __init__(self, error: BaseException, steps_done: int) -> None:
        super().__init__(error, steps_done)
        self.error = error
        self.steps_done = steps_done


class SliceRollout:
    """Runs the envs of ``group`` for whole rollouts with ``policy`` (``None``: random actions).

    ``group`` covers env columns ``env_offset .. env_offset + num_envs - 1`` (an
    :class:`~parallel_rollouts.groups.EnvGroup`, or a chain of groups when factories return vector envs).
    """

    def __init__(
        self,
        group: RolloutGroup,
        env_offset: int,
        num_envs: int,
        layout: RolloutLayout,
        policy: Any,
    ) -> None:
        self.group = group
        self.loop = build_loop(layout, policy, env_offset, env_offset + num_envs)
        self._env_failed = False

    @property
    def policy(self) -> Any:
        return self.loop.policy

    def run(self, storage: RolloutStorage, cancel=None, policy_observations=None) -> SliceResult:
        """One rollout into ``storage`` (this slice's columns).

        ``policy_observations``: ``storage``'s observation leaves through a read-only mapping
        of the same memory, whose rows the policy then reads with no copy
        (:mod:`~parallel_rollouts.data.read_only_mirror`); ``None``: the loop's own rows.

        Raises :class:`PolicyFailed` when the policy failed, or ``cancel`` (anything with an
        ``is_set()``) was set (the rollout
        is dropped and the envs stand where its last completed row says); anything an env
        raises passes through as it is (the envs are then in an unknown state).
        """
        group, loop = self.group, self.loop
        group.begin(storage)
        self._env_failed = False
        # Without a read-only mapping, the loop's own rows: private read-only copies (unless
        # policy_inputs="views"), whatever storage this is (a worker's shared columns that the
        # next rollout rewrites, an actor's batch).
        rows = cancellable(loop.rows_of(storage, policy_observations), cancel)
        try:
            loop.run(storage, group.step, rows, self._note_env_failure)
        except Exception as error:
            if self._env_failed:
                raise
            group.abandon(loop.steps_done)
            raise PolicyFailed(error, loop.steps_done) from error
        episodes = group.finish()
        writer = loop.output_writer
        return SliceResult(episodes, bool(writer.has_values), bool(writer.has_log_probs), loop.recurrent_record)

    def _note_env_failure(self, error: BaseException) -> None:
        self._env_failed = True

