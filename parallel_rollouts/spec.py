"""What every stepper and runner needs to build its envs and lay out a rollout."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType

import numpy as np
from gymnasium import Env, Space

from .spaces import SpaceLayout
from .storage import RolloutStorage

__all__ = ["RolloutSpec"]


class RolloutSpec:
    """The env factories, seeds, horizon and core of a collector; the spaces once env 0 is made."""

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
        #: What an observation value outside its space does (see the collector's docstring).
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
        #: Store each action with the dtype it was given (the VectorEnv adapter's envs
        #: receive the caller's dtype, as in ``SyncVectorEnv``; see ``typed_actions``).
        self.typed_actions = False

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
            typed_actions=self.typed_actions,
        )
