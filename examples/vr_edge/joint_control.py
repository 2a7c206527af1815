"""Controllers that choose every user's level jointly, for the best expected reward of the cell
and the GPU they share (`examples.vr_edge.joint_model` says how they read the shared state).

- `JointExpectedReward`: the next step only: estimates each user's rate with the air to itself
  and the GPU's free capacity from the observation, and searches the joint choice of levels for
  the highest expected reward of all users together (switching costs included).
- `JointLookahead`: the same over `horizon` steps of a forecast: each user's rate follows the
  log-linear trend of its recent samples (weighted by `trend`), its uncertainty grows with the
  square root of the lead time, and the chosen levels are held over the horizon, so a switch
  must pay for itself within it.
- `PredictiveLookahead`: `JointLookahead` whose forecast comes from a small learned predictor
  of next-step rate and GPU capacity (`examples.vr_edge.forecast`), with the predictor's own
  uncertainty, in the manner of a model-predictive controller fed by a learned transfer-time
  predictor.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from examples.vr_edge.controller import Controller, DecodedObservation, check_fraction, check_window, log_trend
from examples.vr_edge.joint_model import Conditions, JointRewardModel, estimate_conditions, local_search
from examples.vr_edge.synthetic_env import ObservationLayout

__all__ = ["JointExpectedReward", "JointLookahead", "PredictiveLookahead"]

# The loads the first stage of the search assumes (see `choose_jointly`).
AIR_LOAD_GRID = np.array([0.2, 0.4, 0.6, 0.75, 0.9])
GPU_LOAD_FACTORS = np.array([1.0])
# Rounds of one-level moves that refine the first stage's choice.
LOCAL_MOVES = 1


def _check_int_range(name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not low <= value <= high:
        raise ValueError(f"`{name}` must be an integer in [{low}, {high}], got {value!r}.")
    return int(value)


def _check_range(name: str, value: Any, low: float, high: float) -> float:
    numeric = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if not (numeric and low <= value <= high):
        raise ValueError(f"`{name}` must be a number in [{low}, {high}], got {value!r}.")
    return float(value)


class JointExpectedReward(Controller):
    """Joint choice of all users' levels for the best expected reward of the next step.

    Each user's rate is `rate_margin` x its estimated rate with the air to itself; frame times
    carry a log-normal factor of log-std `frame_time_std`.
    """

    horizon = 1

    def __init__(
        self,
        layout: ObservationLayout,
        window: int = 3,
        frame_time_std: float = 0.4,
        rate_margin: float = 1.0,
        stall_guard: float = 1.0,
    ) -> None:
        super().__init__(layout, stall_guard)
        self.window = check_window(window)
        self.frame_time_std = check_fraction("frame_time_std", frame_time_std, upper=2.0)
        self.rate_margin = _check_range("rate_margin", rate_margin, 0.1, 2.0)
        self.reward_model = JointRewardModel()

    def conditions(self, decoded: DecodedObservation) -> Conditions:
        rate, capacity, backlog = estimate_conditions(decoded, self.window)
        return Conditions(
            rate_mbps=(self.rate_margin * rate)[None], rate_log_std=0.0, gpu_capacity=capacity[None],
            backlog_mbit=backlog, frame_time_std=self.frame_time_std,
        )

    def choose(self, decoded: DecodedObservation) -> np.ndarray:
        conditions = self.conditions(decoded)
        return choose_jointly(self.reward_model, decoded, conditions, self.layout.num_levels)

    def params(self) -> dict[str, Any]:
        return {
            "window": self.window, "frame_time_std": self.frame_time_std, "rate_margin": self.rate_margin,
            **super().params(),
        }


def choose_jointly(
    model: JointRewardModel, decoded: DecodedObservation, conditions: Conditions, num_levels: int, discount: float = 1.0
) -> np.ndarray:
    """The best joint choice found, `[batch, users]`.

    Users interact only through the two loads they share, so the search first asks, for each
    assumed pair of loads (a grid of airtime loads times the GPU load of holding every level,
    scaled by `GPU_LOAD_FACTORS`), what each user would pick on its own; those choices, holding
    every level and everyone at the lowest level are scored with the loads they really cause,
    and the best is improved by one-level moves (`local_search`).
    """
    eligible = decoded.active & decoded.measured
    batch, users = eligible.shape
    hold = np.where(eligible, decoded.last_level, 0)
    hold_gpu = model.loads(decoded, conditions, hold[:, None, :])[1][..., 0]
    air_loads = np.broadcast_to(AIR_LOAD_GRID[None, None, :, None], (*hold_gpu.shape[:2], AIR_LOAD_GRID.size, GPU_LOAD_FACTORS.size))
    gpu_loads = np.broadcast_to(hold_gpu[..., None, None] * GPU_LOAD_FACTORS, air_loads.shape)
    horizon = hold_gpu.shape[0]
    responses = model.best_responses(
        decoded, conditions, air_loads.reshape(horizon, batch, -1), gpu_loads.reshape(horizon, batch, -1), num_levels, discount
    )
    candidates = np.concatenate([responses, hold[:, None, :], np.zeros_like(hold)[:, None, :]], axis=1)
    candidates = np.where(eligible[:, None, :], candidates, 0)
    values = model.objective(decoded, conditions, candidates, discount)
    best = candidates[np.arange(batch), values.argmax(axis=1)]

    def value_of(levels: np.ndarray) -> np.ndarray:
        return model.objective(decoded, conditions, levels, discount)

    return local_search(value_of, best, eligible, num_levels, LOCAL_MOVES)


class JointLookahead(JointExpectedReward):
    """`JointExpectedReward` over `horizon` steps of a trend forecast, the levels held throughout.

    A user's rate `k` steps ahead is its estimate times `exp(trend x slope x k)` (the slope of
    its log throughput over the last `window` samples, the exponent capped at 1 either way),
    with a forecast log-std of `forecast_std x sqrt(k)`; future steps count `discount` per step.
    """

    def __init__(
        self,
        layout: ObservationLayout,
        horizon: int = 3,
        window: int = 3,
        frame_time_std: float = 0.4,
        rate_margin: float = 1.0,
        trend: float = 0.5,
        forecast_std: float = 0.1,
        discount: float = 0.9,
        stall_guard: float = 1.0,
    ) -> None:
        super().__init__(layout, window, frame_time_std, rate_margin, stall_guard)
        self.horizon = _check_int_range("horizon", horizon, 1, 10)
        self.trend = _check_range("trend", trend, 0.0, 2.0)
        self.forecast_std = _check_range("forecast_std", forecast_std, 0.0, 1.0)
        self.discount = _check_range("discount", discount, 0.0, 1.0)

    def conditions(self, decoded: DecodedObservation) -> Conditions:
        rate, capacity, backlog = estimate_conditions(decoded, self.window)
        leads = np.arange(1, self.horizon + 1, dtype=np.float64)[:, None, None]
        slope = log_trend(decoded.throughput_mbps, max(self.window, 2))
        exponent = np.clip(self.trend * slope[None] * leads, -1.0, 1.0)
        return Conditions(
            rate_mbps=self.rate_margin * rate[None] * np.exp(exponent),
            rate_log_std=self.forecast_std * np.sqrt(leads) * np.ones_like(exponent),
            gpu_capacity=np.repeat(capacity[None], self.horizon, axis=0),
            backlog_mbit=backlog,
            frame_time_std=self.frame_time_std,
        )

    def choose(self, decoded: DecodedObservation) -> np.ndarray:
        return choose_jointly(self.reward_model, decoded, self.conditions(decoded), self.layout.num_levels, self.discount)

    def params(self) -> dict[str, Any]:
        return {
            "horizon": self.horizon, "trend": self.trend, "forecast_std": self.forecast_std,
            "discount": self.discount, **super().params(),
        }


class PredictiveLookahead(JointExpectedReward):
    """A joint lookahead over `horizon` steps whose forecast comes from a learned predictor.

    The predictor (`examples.vr_edge.forecast.RatePredictor`, loaded from `predictor_path`)
    gives each user's next-step rate with the air to itself and the GPU's next-step capacity,
    each as a log-normal mean and spread; a spread `k` steps ahead is `sqrt(k)` times the
    predicted one (times `uncertainty`), and the mean stays where the predictor put it.
    """

    def __init__(
        self,
        layout: ObservationLayout,
        horizon: int = 2,
        frame_time_std: float = 0.4,
        rate_margin: float = 1.0,
        uncertainty: float = 1.0,
        discount: float = 0.9,
        stall_guard: float = 1.0,
        predictor_path: str | None = None,
    ) -> None:
        super().__init__(layout, 3, frame_time_std, rate_margin, stall_guard)
        from examples.vr_edge.forecast import DEFAULT_PREDICTOR_PATH, load_predictor

        self.horizon = _check_int_range("horizon", horizon, 1, 10)
        self.uncertainty = _check_range("uncertainty", uncertainty, 0.0, 3.0)
        self.discount = _check_range("discount", discount, 0.0, 1.0)
        self.predictor_path = str(predictor_path or DEFAULT_PREDICTOR_PATH)
        if not Path(self.predictor_path).is_file():
            raise FileNotFoundError(
                f"no rate predictor at {self.predictor_path!r}; fit one with `python -m examples.vr_edge.forecast`."
            )
        self.predictor = load_predictor(self.predictor_path)

    def conditions(self, decoded: DecodedObservation) -> Conditions:
        forecast = self.predictor.predict(decoded)
        leads = np.sqrt(np.arange(1, self.horizon + 1, dtype=np.float64))[:, None, None]
        return Conditions(
            rate_mbps=np.repeat((self.rate_margin * forecast.rate_mbps)[None], self.horizon, axis=0),
            rate_log_std=self.uncertainty * forecast.rate_log_std[None] * leads,
            gpu_capacity=np.repeat(forecast.gpu_capacity[None], self.horizon, axis=0),
            backlog_mbit=forecast.backlog_mbit,
            frame_time_std=self.frame_time_std,
        )

    def choose(self, decoded: DecodedObservation) -> np.ndarray:
        return choose_jointly(self.reward_model, decoded, self.conditions(decoded), self.layout.num_levels, self.discount)

    def params(self) -> dict[str, Any]:
        params = {
            "horizon": self.horizon, "frame_time_std": self.frame_time_std, "rate_margin": self.rate_margin,
            "uncertainty": self.uncertainty, "discount": self.discount, "stall_guard": self.stall_guard,
        }
        if self.predictor_path != str(_default_predictor_path()):
            params["predictor_path"] = self.predictor_path
        return params


def _default_predictor_path() -> Path:
    from examples.vr_edge.forecast import DEFAULT_PREDICTOR_PATH

    return DEFAULT_PREDICTOR_PATH
