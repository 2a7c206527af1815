"""What every hand-written controller shares: the observation decoded into physical units, and
the base class that applies the session guard.

`DecodedObservation` reads only what the observation holds and the published stream model
(`StreamModel`), so a controller built on it uses no hidden state of the env.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from examples.vr_edge.synthetic_env import (
    MOTION_TO_PHOTON_BUDGET_MS,
    RATE_SCALE_MBPS,
    RENDER_SCALE_MS,
    THROUGHPUT_HISTORY_LEN,
    ObservationLayout,
    StreamModel,
)

__all__ = ["DEFAULT_WINDOW", "Controller", "DecodedObservation", "check_fraction", "check_window", "harmonic_mean", "log_trend"]

class DecodedObservation:
    """The observation features the controllers read, in physical units, `[batch, users]`."""

    def __init__(self, layout: ObservationLayout, observations: np.ndarray, model: StreamModel) -> None:
        observations = np.asarray(observations, dtype=np.float64)
        if observations.ndim != 2:
            raise ValueError(
                f"Expected batched observations of shape [num_envs, {layout.size}], got shape "
                f"{observations.shape!r}; add a leading env dimension for a single observation."
            )
        users = layout.per_user(observations)
        feature = layout.feature
        self.active = users[..., feature("active")] > 0.5
        self.frame_rate = np.where(self.active, users[..., feature("frame_rate")] * 90.0, 72.0)
        resolution = np.where(self.active, users[..., feature("resolution")] * 1.5, 1.0)
        complexity = np.where(self.active, users[..., feature("complexity")] * 2.0, 1.0)
        top_level = layout.num_levels - 1
        self.last_level = np.rint(users[..., feature("last_level")] * top_level).astype(np.int64)
        first = feature(f"throughput_{THROUGHPUT_HISTORY_LEN}")
        self.throughput_mbps = users[..., first : first + THROUGHPUT_HISTORY_LEN] * RATE_SCALE_MBPS
        self.max_latency_ms = users[..., feature("max_latency")] * MOTION_TO_PHOTON_BUDGET_MS
        self.late_rate = users[..., feature("late_rate")]
        self.drop_rate = users[..., feature("drop_rate")]
        self.render_ms = users[..., feature("render_time")] * RENDER_SCALE_MS
        self.frozen_share = users[..., feature("frozen_share")]
        # Video still queued at the user's sender, in ms of video at the level it streamed.
        self.queue_ms = users[..., feature("queue_delay")] * MOTION_TO_PHOTON_BUDGET_MS
        self.bitrate = model.bitrate_mbps(self.frame_rate, resolution)
        self.nominal_render = model.render_ms_per_frame(resolution, complexity)
        self.quality = model.quality(complexity)
        # A user without measurements yet (it just joined) has no throughput history.
        self.measured = self.throughput_mbps[..., -1] > 0

    def predicted_render_ms(self) -> np.ndarray:
        """`[batch, users, levels]` render time, scaling the last measured one by the level's cost."""
        last_nominal = np.take_along_axis(self.nominal_render, self.last_level[..., None], axis=-1)[..., 0]
        contention = np.where(self.render_ms > 0, self.render_ms / last_nominal, 1.5)
        return self.nominal_render * contention[..., None]

    def transmit_ms(self, rate_mbps: np.ndarray) -> np.ndarray:
        """`[batch, users, levels]` transmission time of a mean frame at `rate_mbps` `[batch, users]`."""
        frame_mbit = self.bitrate / self.frame_rate[..., None]
        return 1e3 * frame_mbit / np.maximum(rate_mbps, 1e-6)[..., None]


# The throughput samples a controller forecasts from unless tuned otherwise (the newest ones).
DEFAULT_WINDOW = 3


def harmonic_mean(history: np.ndarray, window: int) -> np.ndarray:
    recent = np.maximum(history[..., -window:], 1e-6)
    return window / np.sum(1.0 / recent, axis=-1)


def log_trend(history: np.ndarray, window: int) -> np.ndarray:
    """Least-squares slope per step of the log of the last `window` samples (0 for one sample)."""
    if window < 2:
        return np.zeros(history.shape[:-1])
    logs = np.log(np.maximum(history[..., -window:], 1e-6))
    steps = np.arange(window) - (window - 1) / 2.0
    return logs @ steps / float(steps @ steps)


def check_window(window: Any) -> int:
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or not 1 <= window <= THROUGHPUT_HISTORY_LEN:
        raise ValueError(f"`window` must be an integer in [1, {THROUGHPUT_HISTORY_LEN}], got {window!r}.")
    return int(window)


class Controller:
    """Holds the layout and stream model; subclasses implement `choose(decoded)`.

    Every controller also has a session guard: a user whose frozen time has used more than
    `stall_guard` of the session's failure budget (the `frozen_share` its headset reports)
    streams at the lowest level, the one least likely to freeze again. `stall_guard=1` never
    fires before the session has failed, so it turns the guard off.
    """

    def __init__(self, layout: ObservationLayout, stall_guard: float = 1.0) -> None:
        if not isinstance(layout, ObservationLayout):
            raise TypeError(
                "`layout` must be an ObservationLayout (use `env.observation_layout`), "
                f"got {type(layout).__name__}."
            )
        self.layout = layout
        self.model = StreamModel()
        self.stall_guard = check_fraction("stall_guard", stall_guard)

    def __call__(self, observations: np.ndarray) -> np.ndarray:
        decoded = DecodedObservation(self.layout, observations, self.model)
        levels = np.where(decoded.frozen_share > self.stall_guard, 0, self.choose(decoded))
        return np.where(decoded.active, levels, 0).astype(np.int64)

    def choose(self, decoded: DecodedObservation) -> np.ndarray:
        raise NotImplementedError

    def __repr__(self) -> str:
        params = ", ".join(f"{key}={value!r}" for key, value in self.params().items())
        return f"{type(self).__name__}({params})"

    def params(self) -> dict[str, Any]:
        return {"stall_guard": self.stall_guard}


def check_fraction(name: str, value: Any, upper: float = 1.0) -> float:
    numeric = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if not (numeric and 0.0 < value <= upper):
        raise ValueError(f"`{name}` must be in (0, {upper}], got {value!r}.")
    return float(value)
