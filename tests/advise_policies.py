"""Policy factories for ``advise(policy="module:factory")`` and ``advise --policy``, one per case."""

from __future__ import annotations

import numpy as np

#: How many times the policy built by ``make_counting`` was called in this process.
calls = {"count": 0}

NOT_CALLABLE = 3


class CountingPolicy:
    """Moves right; counts its calls in the process it runs in."""

    def __call__(self, observations):
        calls["count"] += 1
        return np.ones(observations.shape[0], dtype=np.int64)


def make_counting():
    return CountingPolicy()


def policy_itself(observations):
    """A policy, not a factory: it takes the observations."""
    return np.zeros(observations.shape[0], dtype=np.int64)


def make_raising():
    raise RuntimeError("no checkpoint at runs/latest.pt")


def make_nothing():
    return None
