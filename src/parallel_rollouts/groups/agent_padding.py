"""``PadAgentSpaces``: one observation and one action space for agents that declare different ones.

Every agent of a multi-agent env is a column of one batch, so all must share one
observation space and one action space. This wrapper gives them one, with the padding
rules SuperSuit users know (``pad_observations_v0``, ``pad_action_space_v0``):

* **Observations** (Box): each agent's observation is padded with zeros at the end of
  every dimension up to the largest shape among the agents; the common space's bounds
  are the agents' bounds where an agent has values and 0 in the padding, its dtype the
  common one.
* **Discrete actions**: the common space is ``Discrete(m)`` from 0, ``m`` the largest
  ``start + n`` among the agents; an action an agent's own space does not hold is sent as
  that space's first action (``start``, action 0 for the usual ``start=0``).
* **Box actions**: the common space is the largest shape, with the widest bounds; each agent
  receives the leading entries its own shape holds, clipped to its own bounds.

Other spaces (Dict, Tuple, MultiDiscrete, ...) cannot be padded and are refused, naming
the agent. The wrapper keeps PettingZoo's parallel API, so PettingZoo's own API test
runs on it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from ..errors import SpaceError

__all__ = ["PadAgentSpaces"]


class PadAgentSpaces:
    """Wrap a PettingZoo ``ParallelEnv`` so that every agent declares one observation and one action space.

    Example: ``lambda: PadAgentSpaces(simple_tag_v3.parallel_env())``.
    """

    def __init__(self, env: Any) -> None:
        self.env = env
        self.possible_agents = list(env.possible_agents)
        self._observation_spaces = {agent: env.observation_space(agent) for agent in self.possible_agents}
        self._action_spaces = {agent: env.action_space(agent) for agent in self.possible_agents}
        self._observation_space = _common_box(self._observation_spaces, "observation")
        self._action_space = (
            _common_discrete(self._action_spaces)
            if all(isinstance(space, spaces.Discrete) for space in self._action_spaces.values())
            else _common_box(self._action_spaces, "action")
        )

    # -- PettingZoo's parallel API ------------------------------------------------------------

    @property
    def agents(self) -> list:
        return self.env.agents

    @property
    def observation_spaces(self) -> dict:
        """Every agent's (padded) observation space, as PettingZoo's ``observation_spaces`` dict."""
        return dict.fromkeys(self.possible_agents, self._observation_space)

    @property
    def action_spaces(self) -> dict:
        """Every agent's (common) action space, as PettingZoo's ``action_spaces`` dict."""
        return dict.fromkeys(self.possible_agents, self._action_space)

    @property
    def unwrapped(self) -> Any:
        return getattr(self.env, "unwrapped", self.env)

    @property
    def metadata(self) -> dict:
        return getattr(self.env, "metadata", {})

    def observation_space(self, agent: Any) -> spaces.Space:
        return self._observation_space

    def action_space(self, agent: Any) -> spaces.Space:
        return self._action_space

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        observations, infos = self.env.reset(seed=seed, options=options)
        return self._pad(observations), infos

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        observations, rewards, terminations, truncations, infos = self.env.step(
            {agent: self._own_action(agent, action) for agent, action in actions.items()}
        )
        return self._pad(observations), rewards, terminations, truncations, infos

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()

    def state(self) -> Any:
        return self.env.state()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.env, name)

    def __repr__(self) -> str:
        return f"PadAgentSpaces({self.env!r})"

    # -- padding --------------------------------------------------------------------------

    def _pad(self, observations: dict) -> dict:
        padded = {}
        target = self._observation_space
        for agent, observation in observations.items():
            if agent not in self._observation_spaces:  # an extra key, e.g. a shared "common" entry
                padded[agent] = observation
                continue
            array = np.asarray(observation)
            out = np.zeros(target.shape, dtype=target.dtype)
            out[tuple(slice(0, size) for size in array.shape)] = array
            padded[agent] = out
        return padded

    def _own_action(self, agent: Any, action: Any) -> Any:
        own = self._action_spaces.get(agent)
        if isinstance(own, spaces.Discrete):
            value = int(action)
            if not own.start <= value < own.start + own.n:
                # An action the agent's own space does not hold is its first action, as in SuperSuit.
                value = int(own.start)
            return np.int64(value)
        if isinstance(own, spaces.Box):
            array = np.asarray(action)[tuple(slice(0, size) for size in own.shape)]
            # The common bounds are the widest of all agents': each agent gets its own.
            return np.clip(array, own.low, own.high).astype(own.dtype, copy=True)
        return action


def _common_box(declared: dict, role: str) -> spaces.Box:
    boxes = {agent: space for agent, space in declared.items()}
    for agent, space in boxes.items():
        if not isinstance(space, spaces.Box):
            raise SpaceError(
                f"PadAgentSpaces pads Box {role} spaces (and Discrete actions); agent {agent!r} declares {space!r}. "
                f"Flatten that {role} space first (e.g. SuperSuit's flatten_v0), or give the agents one space."
            )
    ranks = {len(space.shape) for space in boxes.values()}
    if len(ranks) > 1:
        listed = ", ".join(f"{agent!r}: {space.shape}" for agent, space in boxes.items())
        raise SpaceError(
            f"PadAgentSpaces pads each dimension of the {role} arrays, so the agents' {role} spaces must have "
            f"the same number of dimensions; got {listed}."
        )
    shape = tuple(int(size) for size in np.max([space.shape for space in boxes.values()], axis=0))
    dtype = np.result_type(*[space.dtype for space in boxes.values()])
    lows, highs = np.full(shape, np.inf), np.full(shape, -np.inf)
    for space in boxes.values():
        region = tuple(slice(0, size) for size in space.shape)
        lows[region] = np.minimum(lows[region], space.low)
        highs[region] = np.maximum(highs[region], space.high)
    # A padded agent holds 0 where it has no values, so 0 is inside the common bounds everywhere
    # some agent pads (and where no agent has values at all, the bounds are [0, 0]).
    padded = np.zeros(shape, dtype=bool)
    for space in boxes.values():
        has_values = np.zeros(shape, dtype=bool)
        has_values[tuple(slice(0, size) for size in space.shape)] = True
        padded |= ~has_values
    low = np.where(padded, np.minimum(np.where(np.isinf(lows) & (lows > 0), 0.0, lows), 0.0), lows)
    high = np.where(padded, np.maximum(np.where(np.isinf(highs) & (highs < 0), 0.0, highs), 0.0), highs)
    return spaces.Box(low.astype(dtype), high.astype(dtype), shape, dtype)


def _common_discrete(declared: dict) -> spaces.Discrete:
    return spaces.Discrete(max(int(space.start) + int(space.n) for space in declared.values()))
