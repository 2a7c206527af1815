"""The last few observations side by side, for a policy that reads how the reports changed.

With late client reports (`report_delay_steps`) the throughput, latency and loss figures an
observation shows describe a step played before the level now shown as the user's last one, so a
policy reading one observation cannot tell which level produced the figures it sees. Laying the
previous observations beside the newest one gives it the levels sent back then, and the trend of
every server-side figure, at the cost of a wider input.

`ObservationHistory` keeps the env's layout shape, per user then shared, so the actor's per-user
head still applies: each user's block is that user's features at the newest step, then one step
earlier, and so on (`steps` copies); the shared features follow in the same order. A feature's
index inside the newest copy is its index in the plain env, so everything that reads a user's
last level or throughput history by index reads the newest values. At a reset the earlier copies
repeat the first observation (a session that was steady before it started).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from examples.vr_edge.synthetic_env import ObservationLayout, SyntheticVREdgeEnv

__all__ = ["ObservationHistory", "make_env"]


class ObservationHistory(gym.Wrapper):
    """`SyntheticVREdgeEnv` observed through its last `steps` (>= 2) observations."""

    def __init__(self, env: SyntheticVREdgeEnv | gym.Wrapper, steps: int) -> None:
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 2:
            raise ValueError(f"`steps` must be an int >= 2 (1 is the plain env); got {steps!r}.")
        super().__init__(env)
        self.steps = steps
        self.env_layout: ObservationLayout = env.observation_layout
        layout = self.env_layout
        # The actor and critic size themselves from this layout; feature indices stay the env's.
        self.observation_layout = ObservationLayout(
            num_users=layout.num_users,
            num_levels=layout.num_levels,
            per_user_features=steps * layout.per_user_features,
            shared_features=steps * layout.shared_features,
        )
        base = env.observation_space
        self.observation_space = spaces.Box(
            float(np.min(base.low)), float(np.max(base.high)), shape=(self.observation_layout.size,), dtype=base.dtype
        )
        # Newest first: `_history[0]` is the latest observation.
        self._history = np.zeros((steps, layout.size), dtype=base.dtype)

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        observation, info = self.env.reset(**kwargs)
        self._history[:] = observation
        return self._stacked(), info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        self._history[1:] = self._history[:-1].copy()
        self._history[0] = observation
        return self._stacked(), reward, terminated, truncated, info

    def _stacked(self) -> np.ndarray:
        layout = self.env_layout
        split = layout.num_users * layout.per_user_features
        # [steps, users, features] -> [users, steps, features]: each user's copies side by side.
        users = self._history[:, :split].reshape(self.steps, layout.num_users, layout.per_user_features)
        per_user = users.transpose(1, 0, 2).reshape(-1)
        return np.concatenate([per_user, self._history[:, split:].reshape(-1)])


def make_env(
    history_steps: int = 1, rate_forecast: dict[str, Any] | None = None, **env_kwargs: Any
) -> gym.Env:
    """`SyntheticVREdgeEnv(**env_kwargs)`, observed through its last `history_steps` observations
    (the plain env for 1). With `rate_forecast`, a rate predictor's JSON state, each observation
    first gains that predictor's per-user forecast (`examples.vr_edge.rate_forecast_features`)."""
    env = SyntheticVREdgeEnv(**env_kwargs)
    if rate_forecast is not None:
        from examples.vr_edge.rate_forecast_features import RateForecastFeatures

        env = RateForecastFeatures(env, rate_forecast)
    return env if history_steps == 1 else ObservationHistory(env, history_steps)
