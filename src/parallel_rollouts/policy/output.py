"""What a policy returns, how it is checked, and the random policy used when there is none."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
from gymnasium import spaces

from ..checks.actions import ActionBatchChecker, as_action_array, to_numpy
from ..errors import ActionError
from ..config.seeding import action_sampler_seed
from ..data.spaces import SpaceLayout
from ..data.storage import RolloutStorage

__all__ = ["PolicyOutput", "RandomActionSampler", "PolicyOutputWriter", "to_numpy"]


@dataclass(frozen=True)
class PolicyOutput:
    """A policy's result when it returns more than the actions.

    A policy may return the actions alone (an array, a tensor, or for Dict/Tuple
    action spaces a dict/tuple of them). To also return value estimates and
    log-probabilities, it returns ``PolicyOutput(actions, values=..., log_probs=...)``;
    a dedicated type keeps a Tuple action space unambiguous.

    ``values`` and ``log_probs`` have one entry per env (shape ``[num_envs]`` or
    ``[num_envs, 1]``) and are stored as float32.
    """

    actions: Any
    values: Any = None
    log_probs: Any = None


class PolicyOutputWriter:
    """Checks a policy's output for one step and writes it into storage row ``t``.

    Every check runs before anything is written, so a rejected output leaves the
    storage (and the envs, which have not been stepped) as they were.
    """

    def __init__(
        self, action_layout: SpaceLayout, num_envs: int, core: ModuleType, column_agents: tuple = (), first_env: int = 0
    ) -> None:
        self._layout = action_layout
        self._core = core
        self._num_envs = num_envs
        self._actions = ActionBatchChecker(
            action_layout, num_envs, core, "the policy's", column_agents=column_agents, first_env=first_env
        )
        self.has_values: bool | None = None
        self.has_log_probs: bool | None = None
        self._actions_alone = False

    def write(self, t: int, output: Any, storage: RolloutStorage) -> None:
        if self._actions_alone and type(output) is np.ndarray:
            # The common step: one action leaf, and an array of actions alone, as on the first step.
            storage.actions[0][t] = self._actions.check(output)[0]
            return
        if isinstance(output, PolicyOutput):
            actions, values, log_probs = output.actions, output.values, output.log_probs
        else:
            actions, values, log_probs = output, None, None
        leaf_actions = self._actions.check(actions)
        values = self._check_per_env(values, "values", "has_values")
        log_probs = self._check_per_env(log_probs, "log_probs", "has_log_probs")
        # Once a policy returned actions alone, later steps may take the common path above.
        self._actions_alone = not self._layout.is_nested and self.has_values is False and self.has_log_probs is False
        for leaf_storage, leaf_action in zip(storage.actions, leaf_actions):
            leaf_storage[t] = leaf_action
        if values is not None:
            storage.values[t] = values
        if log_probs is not None:
            storage.log_probs[t] = log_probs

    def _check_per_env(self, value: Any, field: str, seen_attribute: str) -> np.ndarray | None:
        present = value is not None
        seen = getattr(self, seen_attribute)
        if seen is None:
            setattr(self, seen_attribute, present)
        elif seen != present:
            raise ActionError(
                f"the policy returned `{field}` on some steps but not others; return it on every "
                "step or never."
            )
        if not present:
            return None
        array = as_action_array(value, f"the policy's `{field}`", f"({self._num_envs},)")
        if array.shape not in ((self._num_envs,), (self._num_envs, 1)):
            raise ActionError(
                f"the policy's `{field}` have shape {array.shape!r}; expected ({self._num_envs},) "
                "or (num_envs, 1): one entry per env."
            )
        if array.dtype.kind not in "iuf":
            raise ActionError(f"the policy's `{field}` have dtype {array.dtype}; expected floats.")
        return array.reshape(self._num_envs)

    def reset_rollout(self) -> None:
        """Forget which optional fields were seen; called at the start of every collect."""
        self.has_values = None
        self.has_log_probs = None
        self._actions_alone = False


class RandomActionSampler:
    """``policy=None``: each env samples from its own copy of the action space.

    Each copy is seeded from the root seed and the env's global index
    (:func:`~parallel_rollouts.config.seeding.action_sampler_seed`), so how envs are
    grouped into processes never changes the actions drawn.
    """

    def __init__(self, action_layout: SpaceLayout, root_seed: int, env_indices: Sequence[int]) -> None:
        self._layout = action_layout
        self._spaces = []
        for env_index in env_indices:
            space = copy.deepcopy(action_layout.space)
            space.seed(action_sampler_seed(root_seed, env_index))
            self._spaces.append(space)
        # A plain Discrete space: draw as its sample() does, without the call's argument checks
        # and the flattening (half of a row's sampling time for 8 envs; the same numbers).
        self._discrete = type(action_layout.space) is spaces.Discrete

    def __call__(self, observations: Any) -> Any:
        if self._discrete:
            dtype = self._layout.leaves[0].dtype
            draws = [space.start + space.np_random.integers(space.n, dtype=space.dtype.type) for space in self._spaces]
            return self._layout.unflatten([np.asarray(draws, dtype=dtype)])
        per_env = [self._layout.flatten(space.sample()) for space in self._spaces]
        leaves = [
            np.asarray([env_values[leaf_index] for env_values in per_env], dtype=leaf.dtype)
            for leaf_index, leaf in enumerate(self._layout.leaves)
        ]
        return self._layout.unflatten(leaves)

