"""What the collector asks of a backend, and the in-process backends' shared body."""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType

import numpy as np
from gymnasium import Env, Space

from ..spaces import SpaceLayout
from ..batch_memory import BatchMemory
from ..rollout_loop import RolloutLoop
from ..storage import CompletedEpisodes, RolloutStorage
from .groups import GroupChain, build_groups, make_all, spaces_per_env

__all__ = ["Backend", "BackendSpec", "InProcessBackend", "RolloutResult", "StepwiseBackend"]

logger = logging.getLogger("parallel_rollouts")


class BackendSpec:
    """Everything a backend needs to build its envs, shared by every backend."""

    def __init__(
        self,
        env_fns: Sequence[Callable[[], Env]],
        root_seed: int,
        horizon: int,
        info_keys: Sequence[str],
        core_name: str,
        core: ModuleType,
        observation_check: str = "warn",
    ) -> None:
        self.env_fns = list(env_fns)
        self.observation_check = observation_check
        self.root_seed = root_seed
        self.horizon = horizon
        self.info_keys = tuple(info_keys)
        self.core_name = core_name
        self.core = core
        self.observation_layout: SpaceLayout | None = None
        self.action_layout: SpaceLayout | None = None
        #: Env columns of the batch: one per factory until the envs are made, when a
        #: factory returning a vector env turns out to stand for its ``num_envs``.
        self.num_envs = len(self.env_fns)
        #: Async workers host ``group_builder(envs, env_offset, observation_layout, action_layout,
        #: core)`` instead of the rollout groups when set (the VectorEnv adapter does).
        self.group_builder = None

    def adopt_spaces(self, observation_space: Space, action_space: Space, num_envs: int | None = None) -> None:
        """Take env 0's spaces as the reference every env must match, and the final env count."""
        self.observation_layout = SpaceLayout(observation_space, "observation")
        self.action_layout = SpaceLayout(action_space, "action")
        if num_envs is not None:
            self.num_envs = num_envs

    def allocate_storage(self, allocator=np.empty, zeroed=np.zeros) -> RolloutStorage:
        return RolloutStorage.allocate(
            self.observation_layout,
            self.action_layout,
            self.horizon,
            self.num_envs,
            self.info_keys,
            allocator,
            zeroed,
        )


@dataclass
class RolloutResult:
    """What a backend hands the collector for one rollout."""

    storage: RolloutStorage
    episodes: CompletedEpisodes
    has_values: bool
    has_log_probs: bool
    #: Envs whose rows in this rollout are not valid (their worker died and was
    #: restarted); empty for every backend that does not restart workers.
    lost_env_indices: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


class Backend(abc.ABC):
    """A way of running the envs. ``collect`` runs one rollout and returns it.

    ``broken`` is set when a failure left the envs in an unknown state; the
    collector then refuses to collect again. A failure that leaves ``broken``
    unset (the policy raised, its output was rejected) keeps the backend usable.
    """

    broken: BaseException | None = None

    @abc.abstractmethod
    def collect(self, loop: RolloutLoop, reuse_storage: bool) -> RolloutResult: ...

    @abc.abstractmethod
    def close(self) -> None: ...


class StepwiseBackend(Backend):
    """A backend driven one step at a time from this process, where the policy runs.

    ``storage = start_rollout()``; per step the loop writes the actions into
    ``storage.actions[t]`` and calls ``step(t)``; ``finish_rollout()`` returns
    the storage to build the batch from (which may be a copy) and the episodes.
    """

    #: Owner of the storage rollouts are written into (allocation, reuse, clearing).
    _memory: BatchMemory

    def collect(self, loop: RolloutLoop, reuse_storage: bool) -> RolloutResult:
        storage = self._guarded(self.start_rollout, reuse_storage)
        try:
            loop.run(storage, self._guarded_step, self.policy_observations)
        except BaseException as error:
            if self.broken is None:
                # The policy (or its output) failed before step `steps_done` ran:
                # the envs are intact, so drop the rollout and stay usable.
                self._memory.record_final_rows(storage, loop.steps_done)
                try:
                    self.abandon_rollout(loop.steps_done)
                except BaseException as abandon_error:
                    # The caller sees the policy's error (its chain intact); the
                    # abandon failure is what later calls report.
                    self.broken = abandon_error
            raise
        self._memory.record_final_rows(storage, storage.horizon)
        storage, episodes = self._guarded(self.finish_rollout)
        writer = loop.output_writer
        return RolloutResult(storage, episodes, bool(writer.has_values), bool(writer.has_log_probs))

    def policy_observations(self, storage: RolloutStorage, t: int) -> list[np.ndarray]:
        """Row ``t`` of every observation leaf, for the policy: views of ``storage``.

        In-process storage is the batch the caller gets (or, reused, the arrays
        every batch shares), so the views live exactly as long as the batch's data.
        """
        return [leaf[t] for leaf in storage.observations]

    def _guarded(self, function, *args):
        try:
            return function(*args)
        except BaseException as error:
            self.broken = error
            raise

    def _guarded_step(self, t: int) -> None:
        self._guarded(self.step, t)

    @abc.abstractmethod
    def start_rollout(self, reuse_storage: bool) -> RolloutStorage: ...

    @abc.abstractmethod
    def step(self, t: int) -> None: ...

    @abc.abstractmethod
    def abandon_rollout(self, t: int) -> None:
        """Drop the rollout after ``t`` completed steps; the next one starts from row ``t``."""

    @abc.abstractmethod
    def finish_rollout(self) -> tuple[RolloutStorage, CompletedEpisodes]: ...


class InProcessBackend(StepwiseBackend):
    """Envs live in this process, split into groups by ``group_bounds`` (a vector env is one group)."""

    def __init__(self, spec: BackendSpec, envs: Sequence[Env], group_bounds: Sequence[tuple[int, int]]) -> None:
        self._spec = spec
        self._envs = list(envs)
        self._groups = GroupChain(
            build_groups(
                self._envs,
                0,
                group_bounds,
                spec.root_seed,
                spec.observation_layout,
                spec.action_layout,
                spec.info_keys,
                spec.core,
                observation_check=spec.observation_check,
            )
        )
        self._groups.reset_all()
        self._memory = BatchMemory(spec.allocate_storage)
        self._storage: RolloutStorage | None = None

    @classmethod
    def build(cls, spec: BackendSpec) -> InProcessBackend:
        """Make every env, adopt env 0's spaces, and reset every env."""
        envs = make_all(spec.env_fns, 0)
        try:
            spaces = spaces_per_env(envs)
            spec.adopt_spaces(*spaces[0], num_envs=len(spaces))
            return cls(spec, envs, cls.group_bounds(len(envs)))
        except BaseException:
            _close_envs(envs)
            raise

    @staticmethod
    @abc.abstractmethod
    def group_bounds(num_envs: int) -> list[tuple[int, int]]: ...

    def start_rollout(self, reuse_storage: bool) -> RolloutStorage:
        self._storage = self._memory.reused() if reuse_storage else self._memory.fresh()
        self._groups.begin(self._storage)
        return self._storage

    def step(self, t: int) -> None:
        self._groups.step(t)

    def abandon_rollout(self, t: int) -> None:
        self._groups.abandon(t)

    def finish_rollout(self) -> tuple[RolloutStorage, CompletedEpisodes]:
        return self._storage, self._groups.finish()

    def close(self) -> None:
        self._memory.release()
        self._storage = None
        _close_envs(self._envs)


def _close_envs(envs: Sequence[Env]) -> None:
    for index, env in enumerate(envs):
        try:
            env.close()
        except Exception:
            logger.warning("env %d raised while closing; ignored", index, exc_info=True)
