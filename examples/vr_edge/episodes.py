"""Play whole evaluation episodes with a batched policy and report QoE apart from the reward.

`play_episodes` runs one episode per seed, all seeds in lockstep so the policy sees one batch
per step (a network or a vectorised controller costs about the same for 200 observations as for
one). Each episode's record holds its return and the QoE a viewer would notice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from examples.vr_edge.observation_history import make_env
from examples.vr_edge.synthetic_env import STEP_DURATION_S

__all__ = ["QOE_METRICS", "play_episodes"]

# Per-episode QoE: name -> description (units).
QOE_METRICS = {
    "quality": "displayed quality per user-step (0-1; late frames count half, dropped none)",
    "late_rate": "share of frames late (shown reprojected)",
    "drop_rate": "share of frames dropped (frozen screen)",
    "stall_s_per_min": "frozen seconds per user per minute of session",
    "stall_events_per_min": "freeze onsets per user per minute",
    "switches_per_min": "level changes per user per minute",
    "latency_p50_ms": "median motion-to-photon latency of sampled frames (ms)",
    "latency_p95_ms": "95th percentile latency (ms)",
    "latency_p99_ms": "99th percentile latency (ms)",
    "fairness": "Jain's index of the user slots' mean displayed quality",
    "terminated": "1 if a user's session failed (too much frozen time)",
}


def play_episodes(
    policy: Callable[[np.ndarray], Any],
    seeds: Sequence[int],
    env_kwargs: dict[str, Any] | None = None,
    history_steps: int = 1,
    rate_forecast: dict[str, Any] | None = None,
) -> list[dict[str, float]]:
    """One episode per seed (`env.reset(seed=s)`); a record of return, length and QoE each.

    `policy` maps `[num_envs, observation_size]` observations to `[num_envs, num_users]`
    levels (array-like; torch tensors are converted). With `history_steps` > 1 it reads the
    env through its last that many observations (`examples.vr_edge.observation_history`); the
    episodes are the same env's; with `rate_forecast` (a rate predictor's JSON state) each
    observation also carries that predictor's per-user forecast.
    """
    env_kwargs = dict(env_kwargs or {})
    envs = [make_env(history_steps, rate_forecast, **env_kwargs) for _ in seeds]
    observations = np.stack([env.reset(seed=int(seed))[0] for env, seed in zip(envs, seeds)])
    num_users = envs[0].unwrapped.num_users
    running = np.ones(len(envs), dtype=bool)
    totals = [_EpisodeTotals(num_users) for _ in envs]
    while running.any():
        actions = np.asarray(_to_numpy(policy(observations)))
        for index in np.flatnonzero(running):
            observation, reward, terminated, truncated, info = envs[index].step(actions[index])
            observations[index] = observation
            totals[index].add(reward, info)
            if terminated or truncated:
                totals[index].terminated = terminated
                running[index] = False
    return [total.record() for total in totals]


def _to_numpy(actions: Any) -> Any:
    if hasattr(actions, "actions"):  # a PolicyOutput
        actions = actions.actions
    if hasattr(actions, "detach"):  # a torch tensor
        actions = actions.detach().cpu().numpy()
    return actions


class _EpisodeTotals:
    def __init__(self, num_users: int) -> None:
        self.episode_return = 0.0
        self.steps = 0
        self.user_steps = 0.0
        self.sums = {"quality": 0.0, "late_rate": 0.0, "drop_rate": 0.0, "stall_time": 0.0,
                     "stall_events": 0.0, "switches": 0.0}
        self.user_quality = np.zeros(num_users)
        self.user_present = np.zeros(num_users)
        self.latencies: list[np.ndarray] = []
        self.terminated = False

    def add(self, reward: float, info: dict[str, Any]) -> None:
        self.episode_return += reward
        self.steps += 1
        users = info["active_users"]
        self.user_steps += users
        # Rates are means over the users present; weigh them by how many were present.
        for key in ("quality", "late_rate", "drop_rate", "stall_time"):
            self.sums[key] += info[key] * users
        self.sums["stall_events"] += info["stall_events"]
        self.sums["switches"] += info["switches"]
        present = info["users_present"]
        self.user_quality[present] += info["user_quality"][present]
        self.user_present += present
        self.latencies.append(info["frame_latency_ms"][present].ravel())

    def record(self) -> dict[str, float]:
        user_steps = max(self.user_steps, 1.0)
        user_minutes = user_steps * STEP_DURATION_S / 60.0
        latencies = np.concatenate(self.latencies) if self.latencies else np.zeros(1)
        p50, p95, p99 = np.percentile(latencies, [50, 95, 99]) if latencies.size else (0.0, 0.0, 0.0)
        seen = self.user_present > 0
        slot_quality = self.user_quality[seen] / self.user_present[seen]
        fairness = float(slot_quality.sum() ** 2 / (slot_quality.size * (slot_quality**2).sum())) if seen.any() and (slot_quality**2).sum() > 0 else 1.0
        return {
            "return": self.episode_return,
            "length": float(self.steps),
            "quality": self.sums["quality"] / user_steps,
            "late_rate": self.sums["late_rate"] / user_steps,
            "drop_rate": self.sums["drop_rate"] / user_steps,
            "stall_s_per_min": self.sums["stall_time"] / user_minutes,
            "stall_events_per_min": self.sums["stall_events"] / user_minutes,
            "switches_per_min": self.sums["switches"] / user_minutes,
            "latency_p50_ms": float(p50),
            "latency_p95_ms": float(p95),
            "latency_p99_ms": float(p99),
            "fairness": fairness,
            "terminated": float(self.terminated),
        }
