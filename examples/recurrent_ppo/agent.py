"""The two actor-critics compared (a GRU and a feed-forward MLP) and the policies that drive the collector.

Both agents expose the same three calls, so the PPO update in `train.py` is written once:

- `initial_state(num_envs)`: the state an episode starts from (`[num_envs, 2, hidden_size]`
  zeros for the GRUs, `[num_envs, 0]` for the MLP, which has none);
- `step(observations, states)`: one row, `[B, ...]` in, `(logits, values, next_states)` out;
- `unroll(observations, initial_states, episode_starts)`: a whole `[T, B, ...]` rollout, with
  the state set back to the initial state on every row where an episode starts, exactly as
  the collector did before the policy saw that row.

`unroll` is what makes training a recurrent policy on collected batches possible: from the
batch's `initial_state` (the state each env's rollout started from) and its `episode_starts`
flags it recomputes the state every row was acted from, with gradients, so the update can
backpropagate through the whole rollout.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from parallel_rollouts import PolicyOutput

__all__ = [
    "AGENTS",
    "FeedForwardAgent",
    "FeedForwardCollectorPolicy",
    "GRUAgent",
    "GRUCollectorPolicy",
    "Unroll",
    "as_tensor",
    "collector_policy",
    "make_agent",
]


class Unroll(NamedTuple):
    """What `unroll` returns for a `[T, B]` rollout."""

    logits: torch.Tensor  # [T, B, num_actions]
    values: torch.Tensor  # [T, B]
    input_states: torch.Tensor  # [T, B, ...]: the state row t was acted from (already reset at a start)
    next_states: torch.Tensor  # [T, B, ...]: the state after row t (before any reset of row t + 1)


def _layer(in_features: int, out_features: int, gain: float) -> nn.Linear:
    layer = nn.Linear(in_features, out_features)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class _Scale(nn.Module):
    """Divides each observation feature by a fixed scale, so the first layer sees values of order one.

    CartPole ends an episode when the cart leaves [-2.4, 2.4] or the pole tilts past 0.21 rad; at
    their raw scale a step's change in pole angle (the velocity a memory has to infer) would be
    a few thousandths, too small for a freshly initialised layer to notice.
    """

    def __init__(self, scale: tuple[float, ...]) -> None:
        super().__init__()
        self.register_buffer("inverse_scale", 1.0 / torch.tensor(scale, dtype=torch.float32))

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return observations * self.inverse_scale


def _mlp(in_features: int, hidden_size: int, out_features: int, output_gain: float) -> nn.Sequential:
    # A small gain on the actor's output starts the policy close to uniform.
    return nn.Sequential(
        _layer(in_features, hidden_size, math.sqrt(2.0)), nn.Tanh(), _layer(hidden_size, out_features, output_gain)
    )


class _GRUTower(nn.Module):
    """An encoder layer, a GRU cell whose hidden state is the memory, and a one-hidden-layer head."""

    def __init__(self, observation_scale: tuple[float, ...], hidden_size: int, out_features: int, output_gain: float):
        super().__init__()
        self.encoder = nn.Sequential(
            _Scale(observation_scale), _layer(len(observation_scale), hidden_size, math.sqrt(2.0)), nn.Tanh()
        )
        self.cell = nn.GRUCell(hidden_size, hidden_size)
        self.head = _mlp(hidden_size, hidden_size, out_features, output_gain)


class GRUAgent(nn.Module):
    """A GRU actor and a GRU critic, each with its own memory (the critic's large value gradients
    would otherwise swamp the actor's in a shared cell).

    The state is one `[B, 2, hidden_size]` tensor: the actor's hidden state, then the critic's.
    """

    recurrent = True

    def __init__(self, observation_scale: tuple[float, ...], num_actions: int, hidden_size: int) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.actor = _GRUTower(observation_scale, hidden_size, num_actions, 0.01)
        self.critic = _GRUTower(observation_scale, hidden_size, 1, 1.0)

    def initial_state(self, num_envs: int) -> torch.Tensor:
        return torch.zeros(num_envs, 2, self.hidden_size)

    def _cells(self, actor_features: torch.Tensor, critic_features: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        return torch.stack(
            (self.actor.cell(actor_features, states[:, 0]), self.critic.cell(critic_features, states[:, 1])), dim=1
        )

    def _heads(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.actor.head(states[..., 0, :]), self.critic.head(states[..., 1, :]).squeeze(-1)

    def step(
        self, observations: torch.Tensor, states: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        next_states = self._cells(self.actor.encoder(observations), self.critic.encoder(observations), states)
        logits, values = self._heads(next_states)
        return logits, values, next_states

    def unroll(self, observations: torch.Tensor, initial_states: torch.Tensor, episode_starts: torch.Tensor) -> Unroll:
        horizon, num_envs = episode_starts.shape
        reset_states = self.initial_state(num_envs)
        states = initial_states
        # The encoders and heads have no memory: one call over every row; the cells row by row.
        actor_features, critic_features = self.actor.encoder(observations), self.critic.encoder(observations)
        input_states, next_states = [], []
        for t in range(horizon):
            states = torch.where(episode_starts[t, :, None, None], reset_states, states)
            input_states.append(states)
            states = self._cells(actor_features[t], critic_features[t], states)
            next_states.append(states)
        next_states_tensor = torch.stack(next_states)
        logits, values = self._heads(next_states_tensor)
        return Unroll(logits, values, torch.stack(input_states), next_states_tensor)


class FeedForwardAgent(nn.Module):
    """An actor and a critic of two tanh layers each: they see the current observation only."""

    recurrent = False

    def __init__(self, observation_scale: tuple[float, ...], num_actions: int, hidden_size: int) -> None:
        super().__init__()

        def tower(out_features: int, output_gain: float) -> nn.Sequential:
            return nn.Sequential(
                _Scale(observation_scale),
                _layer(len(observation_scale), hidden_size, math.sqrt(2.0)),
                nn.Tanh(),
                _mlp(hidden_size, hidden_size, out_features, output_gain),
            )

        self.actor = tower(num_actions, 0.01)
        self.critic = tower(1, 1.0)

    def initial_state(self, num_envs: int) -> torch.Tensor:
        return torch.zeros(num_envs, 0)

    def step(
        self, observations: torch.Tensor, states: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.actor(observations), self.critic(observations).squeeze(-1), states

    def unroll(self, observations: torch.Tensor, initial_states: torch.Tensor, episode_starts: torch.Tensor) -> Unroll:
        no_state = torch.zeros(*episode_starts.shape, 0)
        return Unroll(self.actor(observations), self.critic(observations).squeeze(-1), no_state, no_state)


AGENTS = {"gru": GRUAgent, "mlp": FeedForwardAgent}


def make_agent(
    kind: str, observation_scale: tuple[float, ...], num_actions: int, hidden_size: int
) -> GRUAgent | FeedForwardAgent:
    """`kind` is a key of `AGENTS`: `"gru"` (recurrent) or `"mlp"` (feed-forward).

    `observation_scale` holds one typical magnitude per observation feature; the agent divides
    by it before its first layer.
    """
    return AGENTS[kind](observation_scale, num_actions, hidden_size)


def as_tensor(array: Any) -> torch.Tensor:
    """A tensor of `array`; a NumPy array is copied, since the collector's rows are read-only."""
    return array if isinstance(array, torch.Tensor) else torch.tensor(np.asarray(array))


def _act(logits: torch.Tensor, values: torch.Tensor, deterministic: bool) -> PolicyOutput:
    if deterministic:
        actions = logits.argmax(-1)
    else:
        actions = torch.multinomial(torch.softmax(logits, -1), 1).squeeze(-1)
    log_probs = torch.log_softmax(logits, -1).gather(-1, actions[:, None]).squeeze(-1)
    return PolicyOutput(actions.numpy(), values=values.numpy(), log_probs=log_probs.numpy())


class GRUCollectorPolicy:
    """A `GRUAgent` as the collector's recurrent policy.

    The collector recognises it by its `initial_state` method, calls it as
    `policy(observations, state, episode_starts)` and keeps the returned state for the next
    row; it has already put the initial state in every row whose episode starts there, so the
    policy only steps its cell. Actions are sampled from torch's global generator (seeded by
    the training script), or the most likely action with `deterministic=True` (evaluation).
    """

    def __init__(self, agent: GRUAgent, deterministic: bool = False) -> None:
        self.agent = agent
        self.deterministic = deterministic

    def initial_state(self, num_envs: int) -> torch.Tensor:
        return self.agent.initial_state(num_envs)

    def __call__(self, observations: Any, state: Any, episode_starts: np.ndarray) -> tuple[PolicyOutput, torch.Tensor]:
        with torch.no_grad():
            logits, values, next_state = self.agent.step(as_tensor(observations), as_tensor(state))
        return _act(logits, values, self.deterministic), next_state


class FeedForwardCollectorPolicy:
    """A `FeedForwardAgent` as an ordinary (stateless) collector policy."""

    def __init__(self, agent: FeedForwardAgent, deterministic: bool = False) -> None:
        self.agent = agent
        self.deterministic = deterministic

    def __call__(self, observations: Any) -> PolicyOutput:
        with torch.no_grad():
            logits, values, _ = self.agent.step(as_tensor(observations), torch.zeros(len(observations), 0))
        return _act(logits, values, self.deterministic)


def collector_policy(
    agent: GRUAgent | FeedForwardAgent, deterministic: bool = False
) -> GRUCollectorPolicy | FeedForwardCollectorPolicy:
    """The policy object that drives a collector with `agent`."""
    if agent.recurrent:
        return GRUCollectorPolicy(agent, deterministic)
    return FeedForwardCollectorPolicy(agent, deterministic)
