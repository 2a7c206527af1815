"""A clairvoyant reference: the joint controller told the truth about the next steps.

`play_clairvoyant` plays episodes like `episodes.play_episodes`, but before every step it reads
what no causal controller can know: each user's true rate with the air to itself over the next
`horizon` steps (its slow channel times the cell's trace), the GPU's true free capacity over
them, each user's true frame-time spread and the video its sender really holds. It learns the
future by stepping a copy of each env (the traces and channels draw the same random numbers
whatever the levels, so the copy's future is the env's). It then chooses every user's level
with the same reward model and search as `joint_control.JointLookahead`. The gap between it and
the best causal controller bounds how much better forecasting could do in this env.

With `knows_future=False` it is told the present instead: the true conditions of the step just
played (each user's rate, the GPU's capacity, frame-time spreads and queues), nothing of the
next. Between it and the causal controllers lies what a better reading of the observation could
win (large when the headsets' reports arrive late or noisy); between it and the clairvoyant one,
what foresight adds.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np

from examples.vr_edge.controller import DecodedObservation
from examples.vr_edge.episodes import _EpisodeTotals
from examples.vr_edge.joint_control import choose_jointly
from examples.vr_edge.joint_model import Conditions, JointRewardModel
from examples.vr_edge.synthetic_env import StreamModel, SyntheticVREdgeEnv

__all__ = ["play_clairvoyant", "present_conditions", "true_conditions"]


def _mean_frame_factor(env: SyntheticVREdgeEnv) -> tuple[np.ndarray, np.ndarray]:
    """`(spread, mean)` of each user's log-normal frame-time factor; the model divides out its
    mean, as a measured rate does."""
    spread = env._frame_factor_std[:, 0]
    return spread, np.exp(env._frame_factor_shift[:, 0] + 0.5 * spread**2)


def present_conditions(env: SyntheticVREdgeEnv) -> Conditions:
    """The true conditions of the step `env` just played (`[1, 1, users]`), as if they held for the next.

    Before the first step there is no step played; every user is then unmeasured, and the
    controllers stream everyone at the lowest level whatever the conditions say, so the mean
    free capacities stand in.
    """
    spread, mean_factor = _mean_frame_factor(env)
    phy_mbps, gpu_capacity = getattr(env, "_true_capacities", (np.full(env.num_users, 300.0), 3.2))
    return Conditions(
        rate_mbps=(phy_mbps / mean_factor)[None, None, :],
        rate_log_std=0.0,
        gpu_capacity=np.array([[gpu_capacity]]),
        backlog_mbit=env._backlog_mbit[None].copy(),
        frame_time_std=np.maximum(spread, 1e-3)[None],
    )


def true_conditions(env: SyntheticVREdgeEnv, horizon: int) -> Conditions:
    """The next `horizon` steps' true conditions of `env` (`[horizon, 1, users]`), from a copy of it."""
    future = copy.deepcopy(env)
    rates, capacities = [], []
    spread, mean_factor = _mean_frame_factor(env)
    for _ in range(horizon):
        _, _, terminated, truncated, _ = future.step(np.zeros(env.num_users, dtype=np.int64))
        phy_mbps, gpu_capacity = future._true_capacities
        rates.append(phy_mbps / mean_factor)
        capacities.append(gpu_capacity)
        if terminated or truncated:
            break
    while len(rates) < horizon:
        rates.append(rates[-1])
        capacities.append(capacities[-1])
    return Conditions(
        rate_mbps=np.array(rates)[:, None, :],
        rate_log_std=0.0,
        gpu_capacity=np.array(capacities)[:, None],
        backlog_mbit=env._backlog_mbit[None].copy(),
        frame_time_std=np.maximum(spread, 1e-3)[None],
    )


def play_clairvoyant(
    seeds: Sequence[int],
    env_kwargs: dict[str, Any] | None = None,
    horizon: int = 1,
    discount: float = 0.9,
    knows_future: bool = True,
) -> list[dict[str, float]]:
    """One episode per seed, all in lockstep, with the records `episodes.play_episodes` returns.

    `knows_future=False` tells the reference the present instead of the next `horizon` steps
    (`present_conditions`; `horizon` must then be 1).
    """
    if not knows_future and horizon != 1:
        raise ValueError(f"A reference told only the present looks one step ahead; got `horizon`={horizon!r}.")
    env_kwargs = dict(env_kwargs or {})
    envs = [SyntheticVREdgeEnv(**env_kwargs) for _ in seeds]
    # Told the truth, the reference also knows what a switch costs in keyframe bits.
    model, stream_model = JointRewardModel(keyframe_extra_frames=envs[0].keyframe_extra_frames), StreamModel()
    observations = np.stack([env.reset(seed=int(seed))[0] for env, seed in zip(envs, seeds)])
    layout = envs[0].observation_layout
    totals = [_EpisodeTotals(env.num_users) for env in envs]
    running = np.ones(len(envs), dtype=bool)
    while running.any():
        index = np.flatnonzero(running)
        decoded = DecodedObservation(layout, observations[index], stream_model)
        truths = [true_conditions(envs[i], horizon) if knows_future else present_conditions(envs[i]) for i in index]
        conditions = Conditions(
            rate_mbps=np.concatenate([truth.rate_mbps for truth in truths], axis=1),
            rate_log_std=0.0,
            gpu_capacity=np.concatenate([truth.gpu_capacity for truth in truths], axis=1),
            backlog_mbit=np.concatenate([truth.backlog_mbit for truth in truths]),
            frame_time_std=np.concatenate([truth.frame_time_std for truth in truths]),
        )
        levels = np.where(decoded.active, choose_jointly(model, decoded, conditions, layout.num_levels, discount), 0)
        for row, i in enumerate(index):
            observation, reward, terminated, truncated, info = envs[i].step(levels[row])
            observations[i] = observation
            totals[i].add(reward, info)
            if terminated or truncated:
                totals[i].terminated = terminated
                running[i] = False
    return [total.record() for total in totals]
