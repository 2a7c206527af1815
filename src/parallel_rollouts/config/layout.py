"""One rollout's layout, resolved once and handed whole to every group, worker and actor.

A collector's settings (:class:`~parallel_rollouts.config.spec.RolloutSpec`) become a
:class:`RolloutLayout` once its envs exist and their spaces are known: the layout holds the
spec (horizon, seed, info keys, the per-step core, the value checks) and adds the spaces and
their leaf layouts, the env count and the columns' agents. It is immutable, so no part can
complete or change it for the others, and picklable, so a worker process or a Ray actor
receives exactly the object the main process built (the core is loaded again there by name;
the env factories stay behind).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from types import ModuleType
from typing import Any

import numpy as np
from gymnasium import Space

from ..core.selector import load_core
from ..data.spaces import SpaceLayout
from ..data.sparse_memory import sparse_zeros
from ..data.storage import RolloutStorage, storage_bytes

__all__ = ["RolloutLayout"]


@dataclass(frozen=True)
class RolloutLayout:
    """Everything a part of a collector needs to lay out and step its rollouts."""

    #: The :class:`~parallel_rollouts.config.spec.RolloutSpec` these rollouts follow (typed loosely:
    #: the spec's module imports this one). Every setting of it reads as an attribute of the
    #: layout too (``layout.horizon``), so that a new setting is declared once, in the spec.
    spec: Any
    #: One env's observation space; every env declares the same.
    observation_space: Space
    #: One env's action space; every env declares the same.
    action_space: Space
    #: Env columns of the batch (a vector env counts its sub-envs).
    num_envs: int
    #: With multi-agent envs, each column's agent name (None for a column of a single env);
    #: empty when no env is multi-agent. Messages name the agent behind a column with it.
    column_agents: tuple = ()
    #: With multi-agent envs, the env (numbered from 0) each column belongs to; empty otherwise.
    column_envs: tuple = ()

    # Derived once from the fields above, never pickled.
    observation_layout: SpaceLayout = field(init=False, repr=False, compare=False)
    action_layout: SpaceLayout = field(init=False, repr=False, compare=False)
    core: ModuleType = field(init=False, repr=False, compare=False)

    # Compared by value, never hashed: Gymnasium's Dict and Tuple spaces are not hashable.
    __hash__ = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "observation_layout", SpaceLayout(self.observation_space, "observation"))
        object.__setattr__(self, "action_layout", SpaceLayout(self.action_space, "action"))
        object.__setattr__(self, "core", load_core(self.core_name)[1])

    def __getattr__(self, name: str) -> Any:
        # Only reached for names the layout lacks: the spec's settings. Never for the spec itself
        # (unpickling asks before it is set) or dunders (copy and pickle probe for them).
        if name == "spec" or name.startswith("__"):
            raise AttributeError(name)
        try:
            return getattr(self.spec, name)
        except AttributeError:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}") from None

    def __getstate__(self) -> dict:
        state = {f.name: getattr(self, f.name) for f in fields(self) if f.init}
        # Another process receives the settings, not the factories: a worker is handed its own
        # slice of them (pickled with cloudpickle), and the group builder travels on its own.
        state["spec"] = replace(self.spec, env_fns=(), group_builder=None)
        return state

    def __copy__(self) -> RolloutLayout:
        # A copy in this process keeps the factories; pickling (and so ``copy.deepcopy``, which
        # goes through ``__getstate__``) leaves them behind, as another process must not get them.
        return replace(self)

    def __setstate__(self, state: dict) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)
        self.__post_init__()

    def allocate_storage(self, allocator=np.empty, zeroed=sparse_zeros) -> RolloutStorage:
        """Storage for one rollout of every env (``final_observations`` and timings from ``zeroed``)."""
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

    def storage_bytes(self) -> int:
        """Bytes one rollout's storage fills (the dense arrays; pages of the sparse ones count when written)."""
        dense, _ = storage_bytes(
            self.observation_layout, self.action_layout, self.horizon, self.num_envs, self.info_keys,
            self.typed_actions,
        )
        return dense
