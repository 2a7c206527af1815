"""Policies and the learner's stand-in for the overlapped-collection tests (``max_policy_lag``)."""

from __future__ import annotations

import dataclasses

import numpy as np

from parallel_rollouts import PolicyOutput


class SamplingLinear:
    """A linear softmax policy over CartPole's two actions that samples from a generator it
    holds, and returns values and log-probabilities (what PPO's ratio needs)."""

    def __init__(self, seed: int = 0) -> None:
        self.weights = np.zeros((4, 2))
        self.generator = np.random.default_rng(seed)

    def __call__(self, observations: np.ndarray) -> PolicyOutput:
        logits = observations @ self.weights
        probabilities = np.exp(logits - logits.max(axis=1, keepdims=True))
        probabilities /= probabilities.sum(axis=1, keepdims=True)
        draws = self.generator.random(len(observations))
        actions = (draws > probabilities[:, 0]).astype(np.int64)
        log_probs = np.log(probabilities[np.arange(len(actions)), actions])
        return PolicyOutput(actions, values=logits.sum(axis=1), log_probs=log_probs)


def learn(policy: SamplingLinear, batch) -> None:
    """A deterministic stand-in for an update: the weights move with the batch's observations
    and rewards (changed in place, as an optimizer does)."""
    signal = batch.observations.mean(axis=(0, 1))[:, None] * np.array([[0.3, -0.2]])
    policy.weights += signal - 0.01 * batch.rewards.mean()


def turn_taking_with_delayed_updates(collector, policy, collects: int) -> list:
    """The loop ``max_policy_lag=1`` must equal: collect and learn in turns, each update applied
    one batch late (batch ``k`` acted on by the policy learned from batches ``0 .. k - 2``)."""
    batches = []
    for k in range(collects):
        if k >= 2:
            learn(policy, batches[k - 2])
        batches.append(collector.collect())
    return batches


def overlapped(collector, policy, collects: int) -> list:
    """The overlapped loop: each batch is learned from as soon as it is handed out."""
    batches = []
    for _ in range(collects):
        batch = collector.collect()
        batches.append(batch)
        learn(policy, batch)
    return batches


def without_versions(batch):
    return dataclasses.replace(batch, policy_versions=None)


#: A network a module holds, for the policies below that reach it through this module.
MODULE_NETWORK = SamplingLinear()


def act_with_the_module_network(observations: np.ndarray):
    """Reads the network from this module's globals."""
    return MODULE_NETWORK(observations)


def scaled_module_network(scale: float, observations: np.ndarray):
    """Reads the network as an attribute of this module, imported in the body (`from pkg import models`)."""
    from tests import overlap_policies

    del scale
    return overlap_policies.MODULE_NETWORK(observations)


def act_through_a_relative_import(observations: np.ndarray):
    """Reads the network through a relative import in the body (`from . import models`)."""
    from . import overlap_policies

    return overlap_policies.MODULE_NETWORK(observations)
