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


class RandomBinaryPolicy:
    """Action 0 or 1 at random, from a generator the policy holds (seeded here: every copy starts equal)."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)

    def __call__(self, observations):
        return self.rng.integers(0, 2, size=observations.shape[0])


#: What ``module_level_policy`` reads: a module global, which workers import afresh.
MODULE_LEVEL_ACTION = 0


def module_level_policy(observations):
    return np.full(observations.shape[0], MODULE_LEVEL_ACTION, dtype=np.int64)
