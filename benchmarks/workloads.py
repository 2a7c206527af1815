"""Named workloads: an env factory and a deterministic batched policy for each.

A workload is what every contender of a comparison runs, so the factories are
``functools.partial`` objects of importable callables (the async backend and
``AsyncVectorEnv`` pickle them into spawned workers), and each policy is a cheap
NumPy function of the batched observations: the benchmarks measure collection,
not inference, and a deterministic policy makes every contender take the same
actions from the same observations.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from examples.vr_edge.synthetic_env import ObservationLayout, SyntheticVREdgeEnv

from .envs import DictObservationEnv, FrameImageEnv, HalfMillisecondEnv, RowBurnPolicy, slow_cartpole

__all__ = ["WORKLOADS", "Workload", "get_workload"]

# `simulation_substeps` that makes a SyntheticVREdgeEnv step costly: about 0.7 ms with the current
# env (about 0.5 ms with the version before sender queues; docs/vr-edge.md).
VR_EDGE_COSTLY_SUBSTEPS = 15
VR_EDGE_USERS = 8
# One env in this many is the straggler of the `straggler` workload.
STRAGGLER_EVERY = 8
# A fifth of HalfMillisecondEnv's burn: about 0.1 ms per env step, and per policy row.
COSTLY_POLICY_BURN = 1120
VR_EDGE_LAYOUT = ObservationLayout(VR_EDGE_USERS)


@dataclass(frozen=True)
class Workload:
    """One benchmark workload.

    Attributes
    ----------
    name:
        The name used on the command line.
    description:
        One line for reports.
    env_factory:
        A picklable zero-argument callable returning one env; every env of a run uses it
        (envs differ by their reset seeds).
    policy:
        ``policy(observations) -> actions`` for batched ``[num_envs, ...]`` observations
        (a dict of them for Dict spaces); deterministic and cheap.
    episode_length:
        Steps per episode when it is fixed, else the typical length under ``policy``; used
        to explain the share of autoreset rows in Gymnasium's vector envs.
    envpool_task:
        EnvPool's own task id for the same env, if it has one (its C++ implementation).
    """

    name: str
    description: str
    env_factory: Callable[[], gym.Env]
    policy: Callable[[Any], Any]
    episode_length: int
    envpool_task: str | None = None
    straggler_factory: Callable[[], gym.Env] | None = None

    def env_fns(self, num_envs: int, first_column: int = 0) -> list[Callable[[], gym.Env]]:
        """Factories of columns ``first_column`` to ``first_column + num_envs - 1`` of a run.

        With a ``straggler_factory``, every ``STRAGGLER_EVERY``-th column (0, 8, 16, ...) is a straggler.
        """
        return [
            self.straggler_factory
            if self.straggler_factory is not None and column % STRAGGLER_EVERY == 0
            else self.env_factory
            for column in range(first_column, first_column + num_envs)
        ]


def cartpole_policy(observations: np.ndarray) -> np.ndarray:
    """Push toward the side the pole leans to: episodes of about 40 steps, as mid-training."""
    return (observations[:, 2] > 0).astype(np.int64)


def vr_edge_rate_policy(observations: np.ndarray) -> np.ndarray:
    """Pick a higher quality level the more throughput a user measured last step (a rate rule)."""
    latest = VR_EDGE_LAYOUT.per_user(observations)[:, :, VR_EDGE_LAYOUT.feature("throughput_1")]
    return np.minimum((latest * 2.0).astype(np.int64), VR_EDGE_LAYOUT.num_levels - 1)


def sign_policy(observations: np.ndarray) -> np.ndarray:
    """Action 1 where the first observation entry is positive."""
    return (observations[:, 0] > 0).astype(np.int64)


def image_policy(observations: np.ndarray) -> np.ndarray:
    """Action from the low bits of one pixel: touches the frame without costing much."""
    return (observations[:, 0, 0, 0] & 3).astype(np.int64)


def dict_policy(observations: dict[str, np.ndarray]) -> np.ndarray:
    """Cycle the mode: reads one entry of the Dict observation."""
    return ((np.asarray(observations["mode"]) + 1) % 3).astype(np.int64)


WORKLOADS: dict[str, Workload] = {
    workload.name: workload
    for workload in (
        Workload(
            "null",
            "HalfMillisecondEnv with no work: a step does almost nothing (the per-step overhead alone)",
            functools.partial(HalfMillisecondEnv, episode_length=200, burn_iterations=0),
            sign_policy,
            200,
        ),
        Workload(
            "cartpole",
            "Gymnasium CartPole-v1 (gymnasium.make), a few microseconds per step",
            functools.partial(gym.make, "CartPole-v1"),
            cartpole_policy,
            episode_length=40,
            envpool_task="CartPole-v1",
        ),
        Workload(
            "straggler",
            f"CartPole-v1 where one env in {STRAGGLER_EVERY} (columns 0, {STRAGGLER_EVERY}, ...) waits 1 ms "
            "more per step: the slowest env sets the pace of every step",
            functools.partial(gym.make, "CartPole-v1"),
            cartpole_policy,
            episode_length=40,
            straggler_factory=slow_cartpole,
        ),
        Workload(
            "vr_edge_cheap",
            "SyntheticVREdgeEnv, 8 users, default substeps (~0.1 ms per step)",
            functools.partial(SyntheticVREdgeEnv, num_users=VR_EDGE_USERS),
            vr_edge_rate_policy,
            episode_length=200,
        ),
        Workload(
            "vr_edge_costly",
            f"SyntheticVREdgeEnv, 8 users, simulation_substeps={VR_EDGE_COSTLY_SUBSTEPS} (~0.7 ms per step)",
            functools.partial(
                SyntheticVREdgeEnv, num_users=VR_EDGE_USERS, simulation_substeps=VR_EDGE_COSTLY_SUBSTEPS
            ),
            vr_edge_rate_policy,
            episode_length=200,
        ),
        Workload(
            "half_ms",
            "HalfMillisecondEnv: fixed pure-Python arithmetic, ~0.5 ms per step, 200-step episodes",
            functools.partial(HalfMillisecondEnv, episode_length=200),
            sign_policy,
            episode_length=200,
        ),
        Workload(
            "costly_policy",
            f"HalfMillisecondEnv at ~0.1 ms per step with a policy costing one env step per row "
            f"({COSTLY_POLICY_BURN} iterations each): a batched call costs as much as stepping every env",
            functools.partial(HalfMillisecondEnv, episode_length=200, burn_iterations=COSTLY_POLICY_BURN),
            RowBurnPolicy(COSTLY_POLICY_BURN),
            episode_length=200,
        ),
        Workload(
            "image",
            "FrameImageEnv: 84x84x4 uint8 observations, cheap step, 100-step episodes",
            functools.partial(FrameImageEnv, episode_length=100),
            image_policy,
            episode_length=100,
        ),
        Workload(
            "dict_obs",
            "DictObservationEnv: Dict of Box and Discrete entries, cheap step, <=100-step episodes",
            functools.partial(DictObservationEnv, episode_length=100),
            dict_policy,
            episode_length=100,
        ),
    )
}


def get_workload(name: str) -> Workload:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise ValueError(f"unknown workload {name!r}; choose one of {sorted(WORKLOADS)!r}.") from None
