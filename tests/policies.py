"""Policies for the rollout-worker and pipelining tests (top level: worker processes unpickle them)."""

from __future__ import annotations

import numpy as np
import torch

from parallel_rollouts import PolicyOutput


class ValuedPolicy:
    """Deterministic per row: actions, values and log-probabilities from the observation alone."""

    def __init__(self, num_actions: int):
        self.num_actions = num_actions

    def __call__(self, observations):
        flat = np.asarray(observations, dtype=np.float64).reshape(observations.shape[0], -1)
        total = flat.sum(axis=1)
        actions = (np.abs(np.floor(total * 7.0)) % self.num_actions).astype(np.int64)
        return PolicyOutput(actions, values=np.tanh(total).astype(np.float32), log_probs=-np.abs(total).astype(np.float32))


class RaisingPolicy:
    """Raises on its ``fail_on``-th call in whatever process it runs (0: never)."""

    def __init__(self, fail_on: int, num_actions: int = 2):
        self.fail_on = fail_on
        self.num_actions = num_actions
        self.calls = 0

    def __call__(self, observations):
        self.calls += 1
        if self.calls == self.fail_on:
            raise KeyError("the policy failed on purpose")
        return np.zeros(observations.shape[0], dtype=np.int64)


class ArrayStatePolicy:
    """A NumPy policy: the action is ``bias[0]`` for every env.

    Rebuilding it from its pickle raises when the bias is negative, standing for a
    policy that cannot be rebuilt in a worker.
    """

    def __init__(self, bias: int = 0):
        self.bias = np.array([bias], dtype=np.int64)

    def __setstate__(self, state):
        if state["bias"][0] < 0:
            raise ValueError(f"refusing a negative bias {int(state['bias'][0])}")
        self.__dict__.update(state)

    def __call__(self, observations):
        return np.full(observations.shape[0], int(self.bias[0]), dtype=np.int64)


class MLPPolicy(torch.nn.Module):
    """A small PyTorch MLP policy: greedy action from logits, and a value head."""

    def __init__(self, observation_size: int = 4, num_actions: int = 2, hidden: int = 64):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(observation_size, hidden), torch.nn.Tanh())
        self.logits = torch.nn.Linear(hidden, num_actions)
        self.value = torch.nn.Linear(hidden, 1)

    @torch.no_grad()
    def forward(self, observations):
        hidden = self.body(torch.from_numpy(np.array(observations, dtype=np.float32)))
        return PolicyOutput(self.logits(hidden).argmax(dim=1), values=self.value(hidden).squeeze(1))


class ModeReportingPolicy(torch.nn.Module):
    """Action 1 in training mode, 0 in evaluation mode: shows which mode a copy is in."""

    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(1))

    def forward(self, observations):
        return np.full(len(observations), int(self.training), dtype=np.int64)
