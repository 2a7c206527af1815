"""One rollout's layout, resolved once and handed whole to every group, worker and actor.

A collector's settings (:class:`~parallel_rollouts.config.spec.RolloutSpec`) become a
:class:`RolloutLayout` once its envs exist and their spaces are known: the spaces and
their leaf layouts, the env count, horizon and seed, the info keys, the per-step core and
the value checks. It is immutable, so no part can complete or change it for the others,
and picklable, so a worker process or a Ray actor receives exactly the object the main
process built (the core is loaded again there by name).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from types import ModuleType

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

    #: One env's observation space; every env declares the same.
    observation_space: Space
    #: One env's action space; every env declares the same.
    action_space: Space
    #: Env columns of the batch (a vector env counts its sub-envs).
    num_envs: int
    horizon: int
    root_seed: int
    info_keys: tuple[str, ...] = ()
    #: ``"compiled"`` or ``"python"``: the per-step core every process uses.
    core_name: str = "compiled"
    #: What an observation value outside its space does (``"warn"``, ``"raise"``, ``"off"``).
    observation_check: str = "warn"
    #: ``"every"`` episode is reset with its own seed, or only each env's ``"first"``
    #: (later ones continue the env's generator and are recorded with seed -1).
    episode_seeds: str = "every"
    #: Action storage holds each action's own dtype (the VectorEnv adapter's; see ``typed_actions``).
    typed_actions: bool = False
    #: A recurrent policy's state at every row goes into the batch (``batch.states``).
    store_states: bool = False
    #: The policy is called with its own ``"copies"`` of each row, or read-only ``"views"`` of the batch.
    policy_inputs: str = "protected"
    #: Batches whose memory (and, in workers, whose segments' mappings) is kept for recycling.
    batches_recycled: int = 2
    #: Rollout workers lower their scheduling priority while a learner runs beside them.
    yield_to_learner: bool = False
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
        object.__setattr__(self, "info_keys", tuple(self.info_keys))
        object.__setattr__(self, "observation_layout", SpaceLayout(self.observation_space, "observation"))
        object.__setattr__(self, "action_layout", SpaceLayout(self.action_space, "action"))
        object.__setattr__(self, "core", load_core(self.core_name)[1])

    def __getstate__(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.init}

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
