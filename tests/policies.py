"""NumPy policies for the rollout-worker and pipelining tests (top level: worker processes unpickle them).

No PyTorch here, so that the tests using them also run where PyTorch is not installed;
the PyTorch policies are in ``tests/torch_policies.py``.
"""

from __future__ import annotations

import numpy as np

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
    """A NumPy policy whose state is ``{"bias": array}``: the action is ``bias`` for every env.

    ``load_state_dict`` raises when the bias is negative, standing for weights that fail to load.
    """

    def __init__(self, bias: int = 0):
        self.bias = np.array([bias], dtype=np.int64)

    def state_dict(self):
        return {"bias": self.bias}

    def load_state_dict(self, state):
        if state["bias"][0] < 0:
            raise ValueError(f"refusing a negative bias {int(state['bias'][0])}")
        self.bias = np.array(state["bias"], copy=True)

    def __call__(self, observations):
        return np.full(observations.shape[0], int(self.bias[0]), dtype=np.int64)
