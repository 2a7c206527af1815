"""Recurrent policies for the tests (top level: worker processes unpickle them)."""

from __future__ import annotations

import numpy as np
import torch

from parallel_rollouts import PolicyOutput, RecurrentPolicy


class GRUPolicy(torch.nn.Module):
    """A small GRU policy, evaluated one env at a time so that its output for an env never
    depends on how many envs share the call (every backend then agrees bit for bit).

    Greedy actions from the logits, a value head; the state is ``{"h": [n, hidden]}`` float32.
    """

    def __init__(self, observation_size: int = 4, hidden: int = 8, num_actions: int = 2, seed: int = 6) -> None:
        super().__init__()
        generator_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        self.cell = torch.nn.GRUCell(observation_size, hidden)
        self.logits = torch.nn.Linear(hidden, num_actions)
        self.value = torch.nn.Linear(hidden, 1)
        with torch.no_grad():
            # Wide weights: the actions then follow the state, so a state reset a row late shows.
            for parameter in self.parameters():
                parameter.normal_(0.0, 1.5)
        torch.random.set_rng_state(generator_state)
        self.hidden = hidden

    def initial_state(self, num_envs: int) -> dict:
        return {"h": torch.zeros(num_envs, self.hidden)}

    @torch.no_grad()
    def forward(self, observations, state, episode_starts):
        observations = torch.from_numpy(np.array(observations, dtype=np.float32))
        hidden = state["h"]
        rows = [self.cell(observations[i : i + 1], hidden[i : i + 1]) for i in range(observations.shape[0])]
        next_hidden = torch.cat(rows)
        logits = torch.cat([self.logits(row) for row in rows])
        values = torch.cat([self.value(row) for row in rows]).squeeze(1)
        return PolicyOutput(logits.argmax(dim=1), values=values), {"h": next_hidden}


def _counting_step(observations, state, episode_starts):
    """Action: the parity of the rows seen in this episode; state: that count (NumPy) and a
    running sum of the first observation entry (a tuple leaf)."""
    count, (total,) = state["count"], state["sums"]
    count = count + 1
    total = total + np.asarray(observations, dtype=np.float64)[:, :1]
    return (count % 2).astype(np.int64), {"count": count, "sums": (total,)}


def _counting_initial(num_envs: int) -> dict:
    return {"count": np.zeros(num_envs, dtype=np.int64), "sums": (np.zeros((num_envs, 1)),)}


def counting_policy() -> RecurrentPolicy:
    """A NumPy recurrent policy made with :class:`RecurrentPolicy` (nested dict / tuple state)."""
    return RecurrentPolicy(_counting_step, _counting_initial)
