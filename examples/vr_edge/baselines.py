"""Hand-written batched controllers for `SyntheticVREdgeEnv`, the yardsticks for learned ones.

Each controller maps observations `[num_envs, observation_size]` to levels `[num_envs,
num_users]` int64 using nothing but the observation and the env's published stream model
(`StreamModel`: what a level costs a user in bitrate and render time, and what it is worth), so
it can drive a rollout collector directly. Their parameters are chosen by
`examples.vr_edge.tune_baselines` on seeds disjoint from the evaluation seeds; `tuned_baselines.json` holds
the values it found, and `tuned_baselines` builds every controller with them.

- `ConstantLevel`: every user at one level.
- `ThroughputRule`: per user, the highest level whose frames are predicted to reach the headset
  in time at a safe fraction of the throughput the user measured recently.
- `DeadlineRule`: per user, step down after late or dropped frames, up after a run of frames
  with latency to spare (the feedback idea of buffer-based rules, with the frame deadline as the
  buffer).
- `LookaheadController`: per user, model-predictive control: predicts throughput from the
  measured history (discounted by its recent spread, as robust MPC does), predicts each level's
  late and dropped frame rates with a log-normal frame-time model and scores the next
  `horizon` steps, switching cost included.
- `JointGreedyAllocator`: a joint heuristic over all users: starts everyone at the lowest level
  and repeatedly upgrades the user with the best predicted quality gain per unit of shared
  airtime and GPU time, until the estimated load of either resource reaches its budget.
- `JointExpectedReward`, `JointLookahead`, `PredictiveLookahead` (`examples.vr_edge.joint_control`):
  estimate the shared cell's and GPU's state from the observation and choose all users' levels
  jointly for the best expected reward, over the next step, over a short forecast horizon, or
  over a learned predictor's forecast.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from examples.vr_edge.controller import (
    DEFAULT_WINDOW,
    Controller,
    DecodedObservation,
    check_fraction,
    check_window,
    harmonic_mean,
    log_trend,
)
from examples.vr_edge.joint_control import JointExpectedReward, JointLookahead, PredictiveLookahead
from examples.vr_edge.synthetic_env import (
    GPU_CONTENTION,
    LATE_FRAME_CREDIT,
    MOTION_TO_PHOTON_BUDGET_MS,
    PIPELINE_OVERHEAD_MS,
    ObservationLayout,
)

__all__ = [
    "ConstantLevel",
    "DeadlineRule",
    "JointGreedyAllocator",
    "LookaheadController",
    "ThroughputRule",
    "load_tuned",
    "tuned_baselines",
]


def _highest_fitting(fits: np.ndarray) -> np.ndarray:
    """Index of the highest level with `fits` true along the last axis, 0 if none."""
    levels = np.arange(fits.shape[-1])
    return np.max(np.where(fits, levels, 0), axis=-1)


class ConstantLevel(Controller):
    """Every user streams at `level`."""

    def __init__(self, layout: ObservationLayout, level: int = 0, stall_guard: float = 1.0) -> None:
        super().__init__(layout, stall_guard)
        if isinstance(level, bool) or not isinstance(level, (int, np.integer)) or not 0 <= level < layout.num_levels:
            raise ValueError(f"`level` must be an integer in [0, {layout.num_levels - 1}], got {level!r}.")
        self.level = int(level)

    def choose(self, decoded: DecodedObservation) -> np.ndarray:
        return np.full(decoded.active.shape, self.level)

    def params(self) -> dict[str, Any]:
        return {"level": self.level, **super().params()}


class ThroughputRule(Controller):
    """Highest level whose mean frame arrives in time at `safety` x the predicted throughput.

    The prediction is the harmonic mean of the last `window` throughput samples (it weighs
    dips heavily), extrapolated along the samples' trend: times `exp(trend x slope x (window +
    1) / 2)`, the log-throughput slope per step carried from the window's centre to the next
    step (capped at a factor of e either way); `trend=0` ignores it. A frame must be rendered
    and sent within the budget left after the fixed pipeline overhead; the render time of each
    level is scaled from the last measured one.
    """

    def __init__(
        self,
        layout: ObservationLayout,
        safety: float = 0.6,
        window: int = DEFAULT_WINDOW,
        trend: float = 0.0,
        stall_guard: float = 1.0,
    ) -> None:
        super().__init__(layout, stall_guard)
        self.safety = check_fraction("safety", safety)
        self.window = check_window(window)
        numeric = isinstance(trend, (int, float, np.integer, np.floating)) and not isinstance(trend, bool)
        if not (numeric and 0.0 <= trend <= 2.0):
            raise ValueError(f"`trend` must be a number in [0, 2], got {trend!r}.")
        self.trend = float(trend)

    def choose(self, decoded: DecodedObservation) -> np.ndarray:
        rate = self.safety * harmonic_mean(decoded.throughput_mbps, self.window)
        if self.trend:
            extrapolation = self.trend * log_trend(decoded.throughput_mbps, self.window) * (self.window + 1) / 2.0
            rate = rate * np.exp(np.clip(extrapolation, -1.0, 1.0))
        latency = PIPELINE_OVERHEAD_MS + decoded.predicted_render_ms() + decoded.transmit_ms(rate)
        levels = _highest_fitting(latency <= MOTION_TO_PHOTON_BUDGET_MS)
        return np.where(decoded.measured, levels, 0)

    def params(self) -> dict[str, Any]:
        return {"safety": self.safety, "window": self.window, "trend": self.trend, **super().params()}


class DeadlineRule(Controller):
    """Step down by one level after late frames above `late_threshold` (two after drops),
    up by one when the worst sampled frame of the last step beat the budget by `headroom`."""

    def __init__(
        self, layout: ObservationLayout, late_threshold: float = 0.1, headroom: float = 0.7, stall_guard: float = 1.0
    ) -> None:
        super().__init__(layout, stall_guard)
        self.late_threshold = check_fraction("late_threshold", late_threshold)
        self.headroom = check_fraction("headroom", headroom)

    def choose(self, decoded: DecodedObservation) -> np.ndarray:
        down = (decoded.late_rate + decoded.drop_rate) > self.late_threshold
        up = decoded.max_latency_ms < self.headroom * MOTION_TO_PHOTON_BUDGET_MS
        step = np.where(down, np.where(decoded.drop_rate > 0, -2, -1), np.where(up, 1, 0))
        levels = np.clip(decoded.last_level + step, 0, self.layout.num_levels - 1)
        return np.where(decoded.measured, levels, 0)

    def params(self) -> dict[str, Any]:
        return {"late_threshold": self.late_threshold, "headroom": self.headroom, **super().params()}


def _normal_tail(z: np.ndarray) -> np.ndarray:
    """P(Z > z) for a standard normal."""
    return 0.5 * _erfc(z / math.sqrt(2.0))


_erfc = np.frompyfunc(math.erfc, 1, 1)


class LookaheadController(Controller):
    """Per-user MPC over `horizon` steps with a robust throughput forecast.

    Forecast: the harmonic mean of the last `window` throughput samples, discounted by their
    relative spread ((max - min) / max), as robust MPC discounts by its recent prediction error. Each level's
    late and dropped rates come from a log-normal frame-time factor with log-std
    `frame_time_std`; its per-step value is the env's reward for that user (published
    weights), and a switch costs once. With a constant forecast the best plan keeps one level
    for the horizon, so the controller compares `horizon` steps of each level less the switch.
    """

    def __init__(
        self,
        layout: ObservationLayout,
        horizon: int = 5,
        frame_time_std: float = 0.4,
        window: int = DEFAULT_WINDOW,
        late_penalty: float = 0.5,
        drop_penalty: float = 2.0,
        switch_penalty: float = 0.5,
        stall_guard: float = 1.0,
    ) -> None:
        super().__init__(layout, stall_guard)
        if isinstance(horizon, bool) or not isinstance(horizon, (int, np.integer)) or horizon < 1:
            raise ValueError(f"`horizon` must be an integer >= 1, got {horizon!r}.")
        self.horizon = int(horizon)
        self.frame_time_std = check_fraction("frame_time_std", frame_time_std, upper=2.0)
        self.window = check_window(window)
        self.late_penalty, self.drop_penalty, self.switch_penalty = late_penalty, drop_penalty, switch_penalty

    def level_values(self, decoded: DecodedObservation) -> np.ndarray:
        """`[batch, users, levels]` predicted reward per step of each level."""
        history = decoded.throughput_mbps[..., -self.window :]
        spread = (history.max(axis=-1) - history.min(axis=-1)) / np.maximum(history.max(axis=-1), 1e-6)
        rate = harmonic_mean(history, self.window) / (1.0 + spread)
        transmit = decoded.transmit_ms(rate)
        fixed = PIPELINE_OVERHEAD_MS + decoded.predicted_render_ms()
        std = self.frame_time_std
        late_after = np.maximum(MOTION_TO_PHOTON_BUDGET_MS - fixed, 1e-6)
        drop_after = np.maximum(late_after + 1e3 / decoded.frame_rate[..., None], 1e-6)
        # Frame time = transmit * F with log F ~ N(-std^2 / 2, std^2).
        late_or_drop = _normal_tail((np.log(late_after / transmit) + 0.5 * std * std) / std).astype(np.float64)
        drop = _normal_tail((np.log(drop_after / transmit) + 0.5 * std * std) / std).astype(np.float64)
        late = late_or_drop - drop
        on_time = 1.0 - late_or_drop
        return (
            decoded.quality * (on_time + LATE_FRAME_CREDIT * late)
            - self.late_penalty * late - self.drop_penalty * drop
        )

    def choose(self, decoded: DecodedObservation) -> np.ndarray:
        values = self.horizon * self.level_values(decoded)
        last_quality = np.take_along_axis(decoded.quality, decoded.last_level[..., None], axis=-1)
        values -= self.switch_penalty * np.abs(decoded.quality - last_quality)
        return np.where(decoded.measured, values.argmax(axis=-1), 0)

    def params(self) -> dict[str, Any]:
        return {
            "horizon": self.horizon, "frame_time_std": self.frame_time_std, "window": self.window, **super().params()
        }


class JointGreedyAllocator(Controller):
    """Upgrades users one level at a time by quality gained per unit of shared resources.

    A user's airtime at a level is estimated as its bitrate over its measured throughput, and
    its GPU share as frames per second times the predicted render time. Starting from the
    lowest level, the upgrade with the best quality gain per (airtime + GPU share) is taken
    while the summed airtime stays within `airtime_budget` and the summed GPU time within
    `gpu_budget` seconds per second (as a multiple of the load the GPU carried last step,
    corrected by how stretched its render times were).
    """

    def __init__(
        self, layout: ObservationLayout, airtime_budget: float = 0.5, gpu_budget: float = 0.6, stall_guard: float = 1.0
    ) -> None:
        super().__init__(layout, stall_guard)
        self.airtime_budget = check_fraction("airtime_budget", airtime_budget, upper=5.0)
        self.gpu_budget = check_fraction("gpu_budget", gpu_budget, upper=1.0)

    def choose(self, decoded: DecodedObservation) -> np.ndarray:
        batch, users = decoded.active.shape
        rate = harmonic_mean(decoded.throughput_mbps, DEFAULT_WINDOW)
        airtime = decoded.bitrate / np.maximum(rate, 1e-6)[..., None]
        gpu_time = decoded.frame_rate[..., None] * decoded.nominal_render * 1e-3
        # Invert the render-time stretch 1 / (1 - c * load) to estimate last step's GPU load,
        # and from it the GPU's capacity in the same units as `gpu_time`.
        eligible = decoded.active & decoded.measured
        last_gpu = np.take_along_axis(gpu_time, decoded.last_level[..., None], axis=-1)[..., 0]
        last_nominal = np.take_along_axis(decoded.nominal_render, decoded.last_level[..., None], axis=-1)[..., 0]
        stretch = np.where(eligible, decoded.render_ms / np.maximum(last_nominal, 1e-6), 0.0)
        mean_stretch = stretch.sum(axis=1) / np.maximum(eligible.sum(axis=1), 1)
        load = np.clip((1.0 - 1.0 / np.maximum(mean_stretch, 1.0)) / GPU_CONTENTION, 0.05, 1.0)
        capacity = np.where(eligible, last_gpu, 0.0).sum(axis=1) / load

        levels = np.zeros((batch, users), dtype=np.int64)
        rows = np.arange(batch)[:, None]
        cols = np.arange(users)[None, :]
        used_air = np.where(eligible, airtime[..., 0], 0.0).sum(axis=1)
        used_gpu = np.where(eligible, gpu_time[..., 0], 0.0).sum(axis=1)
        top = self.layout.num_levels - 1
        for _ in range(users * top):
            nxt = np.minimum(levels + 1, top)
            gain = decoded.quality[rows, cols, nxt] - decoded.quality[rows, cols, levels]
            extra_air = airtime[rows, cols, nxt] - airtime[rows, cols, levels]
            extra_gpu = gpu_time[rows, cols, nxt] - gpu_time[rows, cols, levels]
            fits = (
                eligible & (levels < top)
                & (used_air[:, None] + extra_air <= self.airtime_budget)
                & (used_gpu[:, None] + extra_gpu <= self.gpu_budget * capacity[:, None])
            )
            if not fits.any():
                break
            cost = extra_air / self.airtime_budget + extra_gpu / np.maximum(self.gpu_budget * capacity[:, None], 1e-6)
            score = np.where(fits, gain / np.maximum(cost, 1e-9), -np.inf)
            best = score.argmax(axis=1)
            upgrade = np.isfinite(score[np.arange(batch), best])
            chosen = np.arange(batch)[upgrade]
            used_air[chosen] += extra_air[chosen, best[upgrade]]
            used_gpu[chosen] += extra_gpu[chosen, best[upgrade]]
            levels[chosen, best[upgrade]] += 1
        return levels

    def params(self) -> dict[str, Any]:
        return {"airtime_budget": self.airtime_budget, "gpu_budget": self.gpu_budget, **super().params()}


BASELINES: dict[str, type[Controller]] = {
    "constant level": ConstantLevel,
    "throughput rule": ThroughputRule,
    "deadline rule": DeadlineRule,
    "lookahead (MPC)": LookaheadController,
    "joint greedy": JointGreedyAllocator,
    "joint expected reward": JointExpectedReward,
    "joint lookahead": JointLookahead,
    "predictive lookahead": PredictiveLookahead,
}

# Written by `python -m examples.vr_edge.tune_baselines` (docs/vr-edge-results.md says how).
TUNED_PATH = Path(__file__).with_name("tuned_baselines.json")


def load_tuned(path: str | Path = TUNED_PATH) -> dict[str, dict[str, Any]]:
    """The tuned parameters of the baselines in `path` (today's env's: `TUNED_PATH`), read on each call."""
    return json.loads(Path(path).read_text())


def tuned_baselines(layout: ObservationLayout, path: str | Path = TUNED_PATH) -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    """The baselines `path` has parameters for (every one in `TUNED_PATH`), tuned, by name in `BASELINES` order.

    A file tuned on an env variant may hold only the controllers re-tuned for it.
    """
    tuned = load_tuned(path)
    unknown = sorted(set(tuned) - set(BASELINES))
    if unknown:
        raise ValueError(f"{str(path)!r} tunes controllers that do not exist: {unknown}; known: {list(BASELINES)}.")
    return {name: BASELINES[name](layout, **tuned[name]) for name in BASELINES if name in tuned}
