"""The rate predictor's per-user forecast appended to the observation a policy reads.

The predictive lookahead owes its lead in the volatile channels (a congested cell, a moving
vehicle) to `RatePredictor`, which forecasts each user's rate for the step a choice is for from
the observation alone. `RateForecastFeatures` hands that same forecast to a learned policy: each
user's block gains two features after the env's own, the predicted log rate change and the log
of its spread (`RatePredictor.rate_change`), computed from the observation the step returned, so
the policy reads nothing a controller could not.

The wrapped layout keeps the env's feature indices (the two features follow the env's in each
user's block, the shared features are unchanged), so the actor's per-user head and everything that
reads a feature by index still apply; `ObservationHistory` may wrap it, and then each copy of a
user's block carries the forecast made at that step.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from examples.vr_edge.controller import DecodedObservation
from examples.vr_edge.forecast import RatePredictor
from examples.vr_edge.synthetic_env import ObservationLayout, StreamModel, SyntheticVREdgeEnv

__all__ = ["FORECAST_FEATURES", "RateForecastFeatures"]

# Appended to each user's block, in this order.
FORECAST_FEATURES = ("forecast_log_rate_change", "forecast_log_std")
# The bounds `RatePredictor.rate_change` clips its outputs to.
_LOWEST_LOG_STD, _LARGEST_CHANGE = -5.0, 2.0


class RateForecastFeatures(gym.Wrapper):
    """`SyntheticVREdgeEnv` whose users' blocks end with the rate predictor's forecast.

    `predictor_state` is the predictor's JSON state (what `forecast.py` writes), plain data so
    the wrapper pickles to async workers and a checkpoint can hold it.
    """

    def __init__(self, env: SyntheticVREdgeEnv, predictor_state: dict[str, Any]) -> None:
        if not isinstance(predictor_state, dict) or "layers" not in predictor_state:
            raise ValueError(
                "`predictor_state` must be a rate predictor's JSON state (a dict with 'layers', as "
                f"`python -m examples.vr_edge.forecast` writes); got {type(predictor_state).__name__}."
            )
        super().__init__(env)
        self.predictor = RatePredictor(predictor_state)
        self.env_layout: ObservationLayout = env.observation_layout
        layout = self.env_layout
        self.observation_layout = ObservationLayout(
            num_users=layout.num_users,
            num_levels=layout.num_levels,
            per_user_features=layout.per_user_features + len(FORECAST_FEATURES),
            shared_features=layout.shared_features,
        )
        base = env.observation_space
        self.observation_space = spaces.Box(
            min(float(np.min(base.low)), _LOWEST_LOG_STD), max(float(np.max(base.high)), _LARGEST_CHANGE),
            shape=(self.observation_layout.size,), dtype=base.dtype,
        )
        self._stream_model = StreamModel()

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        observation, info = self.env.reset(**kwargs)
        return self._with_forecast(observation), info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        return self._with_forecast(observation), reward, terminated, truncated, info

    def _with_forecast(self, observation: np.ndarray) -> np.ndarray:
        layout = self.env_layout
        decoded = DecodedObservation(layout, observation[None], self._stream_model)
        change, log_std = self.predictor.rate_change(decoded)
        users = np.concatenate([layout.per_user(observation), change[0][:, None], log_std[0][:, None]], axis=1)
        split = layout.num_users * layout.per_user_features
        return np.concatenate([users.reshape(-1), observation[split:]]).astype(observation.dtype)
