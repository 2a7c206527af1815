"""Multi-agent test envs with PettingZoo's parallel interface, written without PettingZoo.

:class:`Relay` has agents that die at different times, one that arrives part-way, and
observations and rewards that depend on the reset seed and on every action, so a replay
from the recorded seed and actions reproduces them exactly only if the collector sent the
right action to the right agent.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces


class Relay:
    """Four agents; ``late`` arrives at step 2; each agent is done at its own step.

    Observation ``[column, steps, noise]`` (float32), action ``Discrete(3)``. An agent
    terminates when the seed-driven draw plus its action passes a threshold, and every
    agent still live is truncated at ``max_steps``.
    """

    metadata = {"name": "relay_v0"}

    def __init__(self, max_steps: int = 9, arrival: int = 2, crash_at: int | None = None, marker: str | None = None) -> None:
        # crash_at: the process ends (os._exit) at this many steps of the env's life, once per marker file.
        self.crash_at, self.marker, self._lifetime_steps = crash_at, marker, 0
        self.possible_agents = ["a0", "a1", "a2", "late"]
        self.agents: list[str] = []
        self.max_steps = max_steps
        self.arrival = arrival
        self._observation_space = spaces.Box(-10.0, 100.0, (3,), np.float32)
        self._action_space = spaces.Discrete(3)
        self._rng = np.random.default_rng()
        self.closed = False

    @property
    def unwrapped(self):
        return self

    def observation_space(self, agent):
        return self._observation_space

    def action_space(self, agent):
        return self._action_space

    def _observation(self, agent):
        return np.array(
            [self.possible_agents.index(agent), self._steps, self._rng.normal()], dtype=np.float32
        )

    def reset(self, seed=None, options=None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._steps = 0
        self.agents = ["a0", "a1", "a2"]
        return {agent: self._observation(agent) for agent in self.agents}, {agent: {"k": 0.0} for agent in self.agents}

    def step(self, actions):
        assert set(actions) == set(self.agents), (sorted(actions), self.agents)
        self._lifetime_steps += 1
        if self._lifetime_steps == self.crash_at:
            import os

            if self.marker is None or not os.path.exists(self.marker):
                if self.marker is not None:
                    open(self.marker, "w").close()
                os._exit(3)
        self._steps += 1
        rewards, terminations, truncations, infos, observations = {}, {}, {}, {}, {}
        for agent in self.agents:
            action = int(actions[agent])
            assert action in (0, 1, 2), action
            draw = self._rng.random()
            rewards[agent] = float(action) + draw
            terminations[agent] = bool(draw + 0.2 * action > 0.9)
            truncations[agent] = self._steps >= self.max_steps and not terminations[agent]
            infos[agent] = {"k": float(self._steps * 10 + action)}
            observations[agent] = self._observation(agent)
        live = [agent for agent in self.agents if not (terminations[agent] or truncations[agent])]
        if self._steps == self.arrival and "late" not in self.agents and live:
            live.append("late")
            # An agent arriving in a step gets an entry in every dict that step returns.
            observations["late"] = self._observation("late")
            rewards["late"], terminations["late"], truncations["late"] = 0.0, False, False
            infos["late"] = {"k": -1.0}
        self.agents = live
        return observations, rewards, terminations, truncations, infos

    def close(self):
        self.closed = True


def make_relay(max_steps: int = 9, arrival: int = 2) -> Relay:
    return Relay(max_steps, arrival)


def replay_relay(batches, env_index: int, max_steps: int = 9, arrival: int = 2):
    """Replay env ``env_index``'s columns of consecutive ``batches`` on a fresh :class:`Relay` from the recorded seeds.

    Returns the ``(rewards, terminations, truncations, observations, valid)`` the plain loop
    produced, each ``[T, A]`` over the batches' rows joined in time (observations ``[T, A, 3]``, zero where the agent is not live),
    for comparison with the batch.
    """
    num_agents = 4
    columns = slice(env_index * num_agents, (env_index + 1) * num_agents)
    recorded_actions = np.concatenate([batch.actions[:, columns] for batch in batches])
    seeds = np.concatenate([batch.step_episode_seeds[:, columns] for batch in batches])
    horizon = len(seeds)
    env = Relay(max_steps, arrival)
    rewards = np.zeros((horizon, num_agents))
    terminations = np.zeros((horizon, num_agents), bool)
    truncations = np.zeros((horizon, num_agents), bool)
    observations = np.zeros((horizon, num_agents, 3), np.float32)
    valid = np.zeros((horizon, num_agents), bool)
    current = None
    t = 0
    while t < horizon:
        if current is None or not env.agents:
            obs, _ = env.reset(seed=int(seeds[t, 0]))
            current = {agent: obs[agent] for agent in env.agents}
        for agent, value in current.items():
            observations[t, env.possible_agents.index(agent)] = value
        live = list(env.agents)
        actions = {agent: recorded_actions[t, env.possible_agents.index(agent)] for agent in live}
        obs, rew, term, trunc, _ = env.step(actions)
        for agent in live:
            k = env.possible_agents.index(agent)
            valid[t, k] = True
            rewards[t, k], terminations[t, k], truncations[t, k] = rew[agent], term[agent], trunc[agent]
        current = {agent: obs[agent] for agent in env.agents}
        if not env.agents:
            current = None
        t += 1
    return rewards, terminations, truncations, observations, valid
