"""A synthetic multi-user VR edge-rendering environment.

Up to `num_users` headsets stream frames rendered on one edge GPU over one shared wireless cell.
Every step (a decision interval of `STEP_DURATION_S`) the controller picks a quality level per
user. A level sets both how detailed the frame is rendered (GPU time per frame) and the video
bitrate it is encoded at; the two shared resources couple every user's choice to the others'.

Users differ: frame rate (60, 72 or 90 fps), render resolution, content complexity (how fast
quality saturates with bitrate, and how costly a frame is to render), distance from the access
point and mobility (their own slow and fast fading). A user's slow fading follows its movement,
so its channel drifts in trends that last a second or two. Users join and leave during an
episode.

Per frame, the motion-to-photon latency is a fixed pipeline overhead (tracking, encode, decode,
scan-out) plus the render time, stretched when the GPU is busy, plus the transmission time of
the frame, which grows as 1 / (1 - airtime load) because the cell's air is shared (processor
sharing). A frame later than `MOTION_TO_PHOTON_BUDGET_MS` is late (shown reprojected); one more
than a frame interval past the budget, or never sent because the cell or the GPU was overloaded,
is dropped, and dropped frames are frozen-screen (stall) time. Bits the cell could not carry
stay in the user's sender queue (up to the frames of one drop threshold) and go out first in
the next interval, delaying that interval's frames: an overshoot costs the next frames too.
Frame-level randomness (frame-size jitter, fast fading) is sampled for `FRAME_SAMPLES` frames
per user per simulation substep.

Reward per step, averaged over the users present::

    quality * (on_time + LATE_FRAME_CREDIT * late)          displayed quality only
    - late_penalty * late - drop_penalty * dropped          per-frame rates
    - switch_penalty * |quality change|                     only after the user's first step

Partial observability: each client observes only its own measurements (throughput while its
frames were on the air over the last `THROUGHPUT_HISTORY_LEN` steps, latency, late and dropped
rates, the server-reported render time and send queue, and how long its screen has been frozen
this session), its own stream's parameters and the number of users present, never the cell's or the GPU's capacity.

Cell capacity follows a trace regime drawn per episode from the seed, from the `traces` split
given to the constructor (`"train"` or `"test"`, see `examples.vr_edge.traces`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from examples.vr_edge.client_reports import ReportDelayLine
from examples.vr_edge.traces import TRACE_SPLITS, CellTrace, GpuTrace, jittered_regime

__all__ = [
    "DEFAULT_BITRATE_LADDER_MBPS",
    "ObservationLayout",
    "SyntheticVREdgeEnv",
    "StreamModel",
    "make_env",
]

# Encoder bitrate per level for a reference stream (72 fps, resolution scale 1); a user's
# bitrate scales with its pixel rate.
DEFAULT_BITRATE_LADDER_MBPS: tuple[float, ...] = (10.0, 18.0, 30.0, 45.0, 65.0, 90.0)
# GPU time to render one frame at each level for the reference stream.
RENDER_MS_PER_LEVEL: tuple[float, ...] = (2.5, 3.0, 3.6, 4.3, 5.2, 6.2)
REFERENCE_FPS = 72.0
FRAME_RATES = (60.0, 72.0, 90.0)

STEP_DURATION_S = 0.1
FRAME_SAMPLES = 8
MOTION_TO_PHOTON_BUDGET_MS = 20.0
PIPELINE_OVERHEAD_MS = 6.0
# Quality credited for a late frame, which the headset shows reprojected from an old pose.
LATE_FRAME_CREDIT = 0.5
# Quality saturates as 1 - exp(-bitrate / (QUALITY_SCALE_MBPS * complexity)).
QUALITY_SCALE_MBPS = 20.0
# Airtime and GPU load above which the schedulers refuse work (frames are dropped).
MAX_AIRTIME_LOAD = 0.95
# Render time is stretched by 1 / (1 - GPU_CONTENTION * min(load, 1)).
GPU_CONTENTION = 0.7
FRAME_SIZE_LOG_STD = 0.25
# A user's slow channel gain follows its movement: the log gain has a velocity that persists
# (CHANNEL_MOMENTUM per step) and a pull back toward the user's mean (CHANNEL_RESTORING), so a
# user walking away from the access point keeps losing gain for a second or two (a damped
# oscillation with a period of about 5 s, see `_channel_innovation`).
CHANNEL_MOMENTUM = 0.9
CHANNEL_RESTORING = 0.015
# A user leaves with this probability per step; an empty slot is taken with the other.
LEAVE_PROBABILITY = 0.004
JOIN_PROBABILITY = 0.02
INITIAL_ACTIVE_PROBABILITY = 0.75
THROUGHPUT_HISTORY_LEN = 8
# Ratio features are clipped here so the observation space has finite bounds.
OBSERVED_RATIO_CLIP = 5.0
RATE_SCALE_MBPS = 200.0
RENDER_SCALE_MS = 20.0

FEATURES = (
    "active", "frame_rate", "resolution", "complexity", "last_level",
    *(f"throughput_{lag}" for lag in range(THROUGHPUT_HISTORY_LEN, 0, -1)),
    "mean_latency", "max_latency", "late_rate", "drop_rate", "render_time", "queue_delay",
    "frozen_share",
)

_LAST_LEVEL = FEATURES.index("last_level")
_THROUGHPUT = FEATURES.index(f"throughput_{THROUGHPUT_HISTORY_LEN}")
_THROUGHPUT_LATEST = FEATURES.index("throughput_1")
_MEAN_LATENCY = FEATURES.index("mean_latency")
_FROZEN_SHARE = FEATURES.index("frozen_share")
# What the headset measures and reports back (delayed by `report_delay_steps`); the level sent,
# the render time and the send queue are known at the server when they happen.
_CLIENT_REPORT = np.array(
    [FEATURES.index(name) for name in ("throughput_1", "mean_latency", "max_latency", "late_rate", "drop_rate", "frozen_share")]
)
_MEASUREMENT_SCALE = np.array(
    [1.0 / MOTION_TO_PHOTON_BUDGET_MS, 1.0 / MOTION_TO_PHOTON_BUDGET_MS, 1.0, 1.0, 1.0 / RENDER_SCALE_MS,
     1.0 / MOTION_TO_PHOTON_BUDGET_MS]
)


def _channel_innovation(log_std: np.ndarray) -> np.ndarray:
    """Per-step innovation std that gives the slow channel process a stationary std of `log_std`.

    With velocity `v` and deviation `x` (log gain minus its mean), one step is
    `v <- CHANNEL_MOMENTUM * v - CHANNEL_RESTORING * x + s * noise`, then `x <- x + v`: an AR(2)
    in `x` with coefficients `a1 = 1 + momentum - restoring` and `a2 = -momentum`, whose
    stationary variance is `s^2 (1 - a2) / ((1 + a2) ((1 - a2)^2 - a1^2))`.
    """
    a1 = 1.0 + CHANNEL_MOMENTUM - CHANNEL_RESTORING
    a2 = -CHANNEL_MOMENTUM
    variance_per_unit = (1.0 - a2) / ((1.0 + a2) * ((1.0 - a2) ** 2 - a1**2))
    return np.asarray(log_std) / math.sqrt(variance_per_unit)


# Stationary std of the channel velocity relative to the gain's (the lag-1 autocorrelation of
# the AR(2) is a1 / (1 - a2); the velocity is the first difference).
_VELOCITY_STD_RATIO = math.sqrt(
    2.0 * (1.0 - (1.0 + CHANNEL_MOMENTUM - CHANNEL_RESTORING) / (1.0 + CHANNEL_MOMENTUM))
)


@dataclass(frozen=True)
class ObservationLayout:
    """Where each feature sits in the flat observation vector, and how it is scaled.

    The vector holds one block of `per_user_features` per user slot, in the order of
    `FEATURES` (active flag; frame rate / 90; resolution scale / 1.5; content complexity / 2;
    last level / top level; measured throughput of the last `THROUGHPUT_HISTORY_LEN` steps /
    `RATE_SCALE_MBPS`, oldest first; mean and worst sampled latency / budget; late and dropped
    frame rates of the last step; render time / `RENDER_SCALE_MS`; the video still queued at
    the user's sender, in ms of video / budget; the frozen time of the user's session so far
    as a share of `max_cumulative_stall_s`), then `shared_features` values common to all
    users (the fraction of slots in use). An empty slot's block is all zeros.
    """

    num_users: int
    num_levels: int = len(DEFAULT_BITRATE_LADDER_MBPS)
    per_user_features: int = len(FEATURES)
    shared_features: int = 1

    @property
    def size(self) -> int:
        return self.num_users * self.per_user_features + self.shared_features

    def feature(self, name: str) -> int:
        """Index of a per-user feature inside a user's block."""
        return FEATURES.index(name)

    def per_user(self, observations: np.ndarray) -> np.ndarray:
        """The `[..., num_users, per_user_features]` view of `[..., size]` observations."""
        observations = np.asarray(observations)
        if observations.shape[-1:] != (self.size,):
            raise ValueError(
                f"Expected observations with a last dimension of {self.size} "
                f"({self.num_users} users), got shape {observations.shape!r}."
            )
        split = self.num_users * self.per_user_features
        return observations[..., :split].reshape(*observations.shape[:-1], self.num_users, self.per_user_features)


class StreamModel:
    """The published per-level stream model: what a level costs a user and what it is worth.

    Controllers may use it (the MPC baseline does); it is a function of a user's observed
    stream parameters only, not of any hidden state.
    """

    def __init__(self, ladder_mbps: tuple[float, ...] = DEFAULT_BITRATE_LADDER_MBPS) -> None:
        self.ladder_mbps = np.asarray(ladder_mbps, dtype=np.float64)
        self.render_ms = np.asarray(RENDER_MS_PER_LEVEL, dtype=np.float64)

    def bitrate_mbps(self, frame_rate: np.ndarray, resolution: np.ndarray) -> np.ndarray:
        """`[..., num_levels]` encoder bitrate of each level for streams of these parameters."""
        pixel_rate = (np.asarray(resolution) * np.asarray(frame_rate) / REFERENCE_FPS)[..., None]
        return self.ladder_mbps * pixel_rate

    def render_ms_per_frame(self, resolution: np.ndarray, complexity: np.ndarray) -> np.ndarray:
        """`[..., num_levels]` GPU milliseconds per frame at an idle GPU."""
        factor = (np.asarray(resolution) * (0.7 + 0.3 * np.asarray(complexity)))[..., None]
        return self.render_ms * factor

    def quality(self, complexity: np.ndarray) -> np.ndarray:
        """`[..., num_levels]` quality in [0, 1] of each level for content of this complexity."""
        return 1.0 - np.exp(-self.ladder_mbps / (QUALITY_SCALE_MBPS * np.asarray(complexity)[..., None]))


def _max_min_fair_allocation(demand: np.ndarray, capacity: float) -> np.ndarray:
    """Split `capacity` so that no user can gain without taking from a poorer one.

    Walking the demands in ascending order, the level after satisfying the first k users is
    `(capacity - their total) / (n - k)`; the first user whose demand exceeds it sets the level.
    """
    sorted_demand = np.sort(demand)
    satisfied_before = np.cumsum(sorted_demand) - sorted_demand
    levels = (capacity - satisfied_before) / np.arange(demand.size, 0, -1)
    exceeds = sorted_demand > levels
    if not exceeds.any():
        return demand.copy()
    return np.minimum(demand, levels[exceeds.argmax()])


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"`{name}` must be an integer >= {minimum}, got {value!r}.")
    return int(value)


def _check_non_negative(name: str, value: Any) -> float:
    numeric = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if not (numeric and math.isfinite(value) and value >= 0):
        raise ValueError(f"`{name}` must be a finite number >= 0, got {value!r}.")
    return float(value)


class SyntheticVREdgeEnv(gymnasium.Env):
    """Headsets sharing an edge GPU and a wireless cell; one quality level per user per step.

    Observation: float32 `Box` of shape `(num_users * 20 + 1,)`, laid out as
    `ObservationLayout` describes; every feature lies in `[0, 5]`.

    Action: `MultiDiscrete([6] * num_users)`, one quality level per user slot (ignored for
    empty slots).

    Step info (every step; `reset` returns only `"regime"`): scalar floats `"quality"`,
    `"late_penalty"`, `"drop_penalty"` and `"switch_penalty"` with
    `reward == quality - late_penalty - drop_penalty - switch_penalty`; QoE measures averaged
    over the users present: `"late_rate"`, `"drop_rate"`, `"stall_time"` (frozen seconds this
    step), `"stall_events"` (users whose screen froze this step after not being frozen),
    `"switches"` (users that changed level), `"active_users"`; and arrays for QoE reports:
    `"users_present"` (`[num_users]` bool), `"user_quality"` (`[num_users]`, displayed
    quality, 0 for empty slots: a NaN would make two identical steps compare unequal) and
    `"frame_latency_ms"` (`[num_users, FRAME_SAMPLES]`, the last substep's sampled frames,
    0 for empty slots). Every info entry has the same shape on every step, so vector envs can
    stack them.

    Episodes are truncated after `episode_length` steps and terminated when a present user's
    frozen time exceeds `max_cumulative_stall_s` (that session has failed).

    `simulation_substeps` splits each step into that many intervals, each with its own
    airtime sharing, sender queue and sampled frames (the slow channel moves once per step).
    Results stay deterministic for a seed but move with it: with finer intervals a queue built
    early in a step also delays the rest of that step. It also lets benchmarks make a step as cheap or as costly as they
    need; docs/vr-edge.md gives measured costs.

    Variants closer to what an edge operator faces (all off by default, which is the env every
    result in docs/vr-edge-results.md was measured on; docs/vr-edge.md says what each stands for):

    - `report_delay_steps=k`: the headset's feedback (its throughput sample, mean and worst
      latency, late and dropped rates, frozen share) reaches the observation `k` steps after it
      was measured; the level sent, the render time and the send queue, which the server knows
      itself, stay current. A user that just joined reads zeros until its first report arrives.
    - `report_noise=s`: each throughput sample is reported times a log-normal factor of log-std
      `s` and mean 1 (a rate estimated from one interval's packets). The noise comes from its
      own generator (the episode's jumped far ahead, which draws nothing from it), so a seed
      plays the same traces, channels and frames with the noise on or off.
    - `keyframe_extra_frames=f`: a user that changes level costs its encoder a keyframe, `f`
      mean frames' worth of extra bits at the new level, queued at the sender ahead of that
      step's frames (they take air from everyone and delay the user's frames). A user's first
      step pays none.

    Seeding: all randomness comes from `self.np_random`. `reset(seed=...)` seeds it as
    Gymnasium does; the constructor's `seed` is used by the first `reset` that is given none.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        num_users: int = 8,
        seed: int | None = None,
        episode_length: int = 200,
        traces: str = "train",
        trace_jitter: float = 0.0,
        simulation_substeps: int = 1,
        late_penalty: float = 0.5,
        drop_penalty: float = 2.0,
        switch_penalty: float = 0.5,
        max_cumulative_stall_s: float = 3.0,
        report_delay_steps: int = 0,
        report_noise: float = 0.0,
        keyframe_extra_frames: float = 0.0,
    ) -> None:
        self.num_users = _check_int("num_users", num_users, 1)
        self.episode_length = _check_int("episode_length", episode_length, 1)
        self.simulation_substeps = _check_int("simulation_substeps", simulation_substeps, 1)
        if seed is not None:
            _check_int("seed", seed, 0)
        if traces not in TRACE_SPLITS:
            raise ValueError(f"`traces` must be one of {sorted(TRACE_SPLITS)}, got {traces!r}.")
        self.traces = traces
        self.trace_jitter = _check_non_negative("trace_jitter", trace_jitter)
        self.late_penalty = _check_non_negative("late_penalty", late_penalty)
        self.drop_penalty = _check_non_negative("drop_penalty", drop_penalty)
        self.switch_penalty = _check_non_negative("switch_penalty", switch_penalty)
        self.max_cumulative_stall_s = _check_non_negative("max_cumulative_stall_s", max_cumulative_stall_s)
        if self.max_cumulative_stall_s == 0:
            raise ValueError("`max_cumulative_stall_s` must be > 0, got 0.")
        self.report_delay_steps = _check_int("report_delay_steps", report_delay_steps, 0)
        self.report_noise = _check_non_negative("report_noise", report_noise)
        self.keyframe_extra_frames = _check_non_negative("keyframe_extra_frames", keyframe_extra_frames)

        self.observation_layout = ObservationLayout(num_users=self.num_users)
        layout = self.observation_layout
        self.observation_space = spaces.Box(0.0, OBSERVED_RATIO_CLIP, shape=(layout.size,), dtype=np.float32)
        self.action_space = spaces.MultiDiscrete(np.full(self.num_users, layout.num_levels, np.int64))
        self.stream_model = StreamModel()
        self._top_level = layout.num_levels - 1
        self._pending_seed = seed
        self._episode_active = False

    # --- users -------------------------------------------------------------------------------

    def _draw_users(self, slots: np.ndarray) -> None:
        """Give the users arriving in `slots` (a bool mask) their own stream and channel."""
        count = int(slots.sum())
        if count == 0:
            return
        rng = self.np_random
        frame_rate = np.asarray(FRAME_RATES)[rng.integers(0, len(FRAME_RATES), count)]
        resolution = rng.uniform(0.7, 1.3, count)
        complexity = rng.uniform(0.4, 2.0, count)
        channel_log_mean = np.log(rng.uniform(0.45, 1.4, count))
        channel_log_std = rng.uniform(0.15, 0.45, count)
        fading_std = rng.uniform(0.1, 0.4, count)
        # The slow channel starts from its stationary distribution (deviation and velocity).
        deviation = channel_log_std * rng.standard_normal(count)
        velocity = channel_log_std * _VELOCITY_STD_RATIO * rng.standard_normal(count)

        self._frame_rate[slots] = frame_rate
        self._resolution[slots] = resolution
        self._complexity[slots] = complexity
        self._channel_mean[slots] = channel_log_mean
        self._channel_deviation[slots] = deviation
        self._channel_velocity[slots] = velocity
        self._channel_innovation_std[slots] = _channel_innovation(channel_log_std)
        # A frame's transmission time scales with size / fading, both log-normal with mean 1;
        # 1 / fading has mean exp(std^2), so the product is log-normal with these parameters.
        factor_std = np.sqrt(FRAME_SIZE_LOG_STD**2 + fading_std**2)
        self._frame_factor_std[slots, 0] = factor_std
        self._frame_factor_shift[slots, 0] = fading_std**2 - 0.5 * factor_std**2
        self._drop_after_ms[slots, 0] = MOTION_TO_PHOTON_BUDGET_MS + 1e3 / frame_rate
        self._stale_s[slots] = self._drop_after_ms[slots, 0] * 1e-3
        self._backlog_mbit[slots] = 0.0
        model = self.stream_model
        self._tables[slots, 0] = model.bitrate_mbps(frame_rate, resolution)
        self._tables[slots, 1] = model.render_ms_per_frame(resolution, complexity)
        self._tables[slots, 2] = model.quality(complexity)
        self._cumulative_stall_s[slots] = 0.0
        self._has_previous_level[slots] = False
        self._was_frozen[slots] = False
        features = self._features
        features[slots] = 0.0
        if self._reports_in_flight is not None:
            self._reports_in_flight.forget(slots)
        features[slots, 0] = 1.0
        features[slots, 1] = frame_rate * (1.0 / 90.0)
        features[slots, 2] = resolution * (1.0 / 1.5)
        features[slots, 3] = complexity * 0.5

    def _set_present(self, active: np.ndarray) -> None:
        self._active = active
        self._present = active.astype(np.float64)
        self._present_column = self._present[:, None]
        self._count = int(active.sum())

    # --- gymnasium API -----------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        if seed is None:
            seed = self._pending_seed
        self._pending_seed = None
        super().reset(seed=seed)
        rng = self.np_random
        regimes = TRACE_SPLITS[self.traces]
        self._regime = regimes[int(rng.integers(len(regimes)))]
        if self.trace_jitter:
            self._regime = jittered_regime(self._regime, self.trace_jitter, rng)
        self._cell = CellTrace(self._regime, rng)
        self._gpu = GpuTrace(rng)

        n, levels = self.num_users, self.observation_layout.num_levels
        self._slots = np.arange(n)
        self._ones = np.ones(n)
        self._frame_rate = np.full(n, REFERENCE_FPS)
        self._resolution = np.ones(n)
        self._complexity = np.ones(n)
        self._channel_mean = np.zeros(n)
        self._channel_deviation = np.zeros(n)
        self._channel_velocity = np.zeros(n)
        self._channel_innovation_std = np.zeros(n)
        # Bits each user's sender still holds at the end of a step (carried into the next).
        self._backlog_mbit = np.zeros(n)
        # How long a frame may wait before its sender discards it (the drop threshold).
        self._stale_s = np.zeros(n)
        # When each sampled frame of a substep is sent, from the substep's start.
        interval_ms = STEP_DURATION_S * 1e3 / self.simulation_substeps
        self._frame_offsets_ms = (np.arange(FRAME_SAMPLES) + 0.5) * (interval_ms / FRAME_SAMPLES)
        self._interval_s = interval_ms * 1e-3
        self._frame_factor_std = np.zeros((n, 1))
        self._frame_factor_shift = np.zeros((n, 1))
        self._drop_after_ms = np.zeros((n, 1))
        # Per slot and level: bitrate (Mbps), render time per frame (ms), quality.
        self._tables = np.zeros((n, 3, levels))
        self._cumulative_stall_s = np.zeros(n)
        self._has_previous_level = np.zeros(n, dtype=bool)
        self._was_frozen = np.zeros(n, dtype=bool)
        self._last_levels = np.zeros(n, dtype=np.int64)
        self._last_quality = np.zeros(n)
        # Each slot's observed features in observation units (scaled, not yet clipped); the
        # observation is this block masked by presence, so one step writes it only once.
        self._features = np.zeros((n, self.observation_layout.per_user_features))
        self._reports_in_flight = (
            ReportDelayLine(self.report_delay_steps, n, _CLIENT_REPORT.size) if self.report_delay_steps else None
        )
        self._draw_users(np.ones(n, dtype=bool))
        self._set_present(rng.random(n) < INITIAL_ACTIVE_PROBABILITY)
        # The report noise has its own stream, a copy of the episode's generator jumped 2^127
        # draws ahead (which draws nothing from it), so a seed plays the same traces, channels
        # and frames with the noise on or off.
        self._report_rng = np.random.Generator(rng.bit_generator.jumped()) if self.report_noise else None
        self._steps_taken = 0
        self._episode_active = True
        return self._observation(), {"regime": self._regime.name}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if not self._episode_active:
            raise RuntimeError(
                "`step` was called without an active episode; call `reset` first "
                "(also after an episode terminates or is truncated)."
            )
        levels = self._checked_levels(action)
        n = self.num_users
        rng = self.np_random
        substeps = self.simulation_substeps
        normals = rng.standard_normal(2 + n + n * FRAME_SAMPLES * substeps)
        uniforms = rng.random(1 + n)
        cell_mbps = self._cell.advance(normals[0], uniforms[0])
        gpu_capacity = self._gpu.advance(normals[1])
        # Every per-user array covers all slots; `present` (1.0 or 0.0) masks the empty ones,
        # which is cheaper than gathering the present users on every step.
        present = self._present
        count = self._count
        bitrate, render_ms, quality = self._tables[self._slots, :, levels].T
        frame_rate = self._frame_rate

        # The GPU: frames it cannot render in time are skipped; busy GPUs render slower.
        gpu_load = float(present @ (frame_rate * render_ms)) * 1e-3 / gpu_capacity
        rendered = 1.0 / gpu_load if gpu_load > 1.0 else 1.0
        render_latency_ms = render_ms * (1.0 / (1.0 - GPU_CONTENTION * min(gpu_load, 1.0)))
        fixed_ms = (PIPELINE_OVERHEAD_MS + render_latency_ms)[:, None]
        frame_mbit = bitrate / frame_rate

        # Each user's slow channel moves once per step (its movement); see `_channel_innovation`.
        self._channel_velocity = (
            CHANNEL_MOMENTUM * self._channel_velocity - CHANNEL_RESTORING * self._channel_deviation
            + self._channel_innovation_std * normals[2 : 2 + n]
        )
        self._channel_deviation = self._channel_deviation + self._channel_velocity
        phy_mbps = cell_mbps * np.exp(self._channel_mean + self._channel_deviation)
        # Hidden state kept for reference controllers that may know it (`examples.vr_edge.clairvoyant`).
        self._true_capacities = (phy_mbps, gpu_capacity)
        inverse_phy = 1.0 / phy_mbps
        airtime = present * bitrate * inverse_phy
        switched = self._has_previous_level & (levels != self._last_levels)
        if self.keyframe_extra_frames:
            # A new level restarts the encoder's stream with an intra frame, which references no
            # earlier frame and so is several times a mean frame: its extra bits go out first.
            self._backlog_mbit = self._backlog_mbit + switched * (self.keyframe_extra_frames * frame_mbit)

        # The cell, once per substep. Each user's sender queue is served first: bits left over
        # from earlier intervals (frames the air could not carry) hold the air and delay the
        # new frames. The cell shares its air by processor sharing; past MAX_AIRTIME_LOAD the
        # scheduler serves each user a max-min fair share and the rest waits in the queue,
        # where frames older than the drop threshold are discarded.
        frame_normals = normals[2 + n :].reshape(substeps, n, FRAME_SAMPLES)
        interval_s = self._interval_s
        served = late = dropped = latency_sum = latency_max = measured_rate = 0.0
        for frame_normal in frame_normals:
            backlog_air = self._backlog_mbit * inverse_phy * (1.0 / interval_s)
            demand = airtime + backlog_air
            airtime_load = float(demand @ self._ones)
            if airtime_load > MAX_AIRTIME_LOAD:
                allocated = _max_min_fair_allocation(demand, MAX_AIRTIME_LOAD)
                airtime_load = MAX_AIRTIME_LOAD
            else:
                allocated = demand
            # The share of this interval's frames that got air after the queue ahead of them.
            served = served + np.clip((allocated - backlog_air) / np.maximum(airtime, 1e-12), 0.0, 1.0)
            slowdown = 1e3 / (1.0 - airtime_load)
            queue_ms = (slowdown * self._backlog_mbit * inverse_phy)[:, None]
            self._backlog_mbit = np.minimum((demand - allocated) * phy_mbps * interval_s, bitrate * self._stale_s)
            # Transmission time of a mean-size frame after contention (processor sharing),
            # times one log-normal factor per sampled frame: its size jitter over its fading;
            # a frame also waits for what is left of the queue when it is sent.
            transmit_ms = (slowdown * frame_mbit * inverse_phy)[:, None]
            frame_factors = np.exp(self._frame_factor_std * frame_normal + self._frame_factor_shift)
            latency_ms = fixed_ms + np.maximum(queue_ms - self._frame_offsets_ms, 0.0) + transmit_ms * frame_factors
            late = late + (latency_ms > MOTION_TO_PHOTON_BUDGET_MS).sum(axis=1)
            dropped = dropped + (latency_ms > self._drop_after_ms).sum(axis=1)
            latency_sum = latency_sum + latency_ms.sum(axis=1)
            latency_max = np.maximum(latency_max, latency_ms.max(axis=1))
            # Bits sent over time on the air: the harmonic mean of the frames' rates.
            measured_rate = measured_rate + phy_mbps * (1.0 - airtime_load) / frame_factors.sum(axis=1)
        inverse_substeps = 1.0 / substeps
        inverse_samples = inverse_substeps / FRAME_SAMPLES
        delivered = served * (rendered * inverse_substeps)
        dropped_rate = present * (1.0 - delivered * (1.0 - dropped * inverse_samples))
        late_rate = present * delivered * ((late - dropped) * inverse_samples)
        on_time_rate = present - dropped_rate - late_rate

        displayed_quality = quality * (on_time_rate + LATE_FRAME_CREDIT * late_rate)
        quality_change = np.abs(quality - self._last_quality) * switched

        stall_s = dropped_rate * STEP_DURATION_S
        self._cumulative_stall_s += stall_s
        frozen = dropped_rate >= 0.5
        stall_events = int((frozen & ~self._was_frozen).sum())
        self._was_frozen = frozen
        self._last_levels = levels
        self._last_quality = quality
        self._has_previous_level = self._active.copy()

        # What each client measures: its throughput while on the air (bits sent over time on
        # the air: the harmonic mean of its frames' rates), its frame timing, and the render
        # time the server reports.
        features = self._features
        features[:, _LAST_LEVEL] = levels * (1.0 / self._top_level)
        features[:, _THROUGHPUT : _THROUGHPUT_LATEST] = features[:, _THROUGHPUT + 1 : _THROUGHPUT_LATEST + 1]
        features[:, _THROUGHPUT_LATEST] = measured_rate * (FRAME_SAMPLES * inverse_substeps / RATE_SCALE_MBPS)
        measured = features[:, _MEAN_LATENCY:_FROZEN_SHARE]
        np.stack(
            [latency_sum * inverse_samples, latency_max, late_rate, dropped_rate, render_latency_ms,
             self._backlog_mbit * 1e3 / bitrate],
            axis=1, out=measured,
        )
        measured *= _MEASUREMENT_SCALE
        # A headset knows how long its screen has been frozen this session: the share of the
        # failure budget used tells how close the session is to failing.
        features[:, _FROZEN_SHARE] = self._cumulative_stall_s * (1.0 / self.max_cumulative_stall_s)
        if self.report_noise or self._reports_in_flight is not None:
            self._report()

        scale = 1.0 / count if count else 0.0
        ones = self._ones
        mean_quality = float(displayed_quality @ ones) * scale
        late_sum = float(late_rate @ ones)
        drop_sum = float(dropped_rate @ ones)
        late_penalty = self.late_penalty * late_sum * scale
        drop_penalty = self.drop_penalty * drop_sum * scale
        switch_penalty = self.switch_penalty * float(quality_change @ ones) * scale
        reward = mean_quality - late_penalty - drop_penalty - switch_penalty

        info = {
            "quality": mean_quality,
            "late_penalty": late_penalty,
            "drop_penalty": drop_penalty,
            "switch_penalty": switch_penalty,
            "late_rate": late_sum * scale,
            "drop_rate": drop_sum * scale,
            "stall_time": drop_sum * scale * STEP_DURATION_S,
            "stall_events": float(stall_events),
            "switches": float(switched.sum()),
            "active_users": float(count),
            "users_present": self._active.copy(),
            "user_quality": displayed_quality * present,
            "frame_latency_ms": latency_ms * self._present_column,
        }

        terminated = bool(self._cumulative_stall_s.max() > self.max_cumulative_stall_s)
        self._steps_taken += 1
        truncated = not terminated and self._steps_taken >= self.episode_length
        self._episode_active = not (terminated or truncated)
        self._churn(uniforms[1:])
        return self._observation(), reward, terminated, truncated, info

    # --- internals ---------------------------------------------------------------------------

    def _report(self) -> None:
        """Replace this step's client measurements in the features by what the server has received."""
        features = self._features
        measured = features[:, _CLIENT_REPORT]
        if self.report_noise:
            spread = self.report_noise
            measured[:, 0] *= np.exp(spread * self._report_rng.standard_normal(self.num_users) - 0.5 * spread * spread)
        if self._reports_in_flight is not None:
            measured = self._reports_in_flight.deliver(measured)
        # The throughput history was shifted before this step's sample was written, so it holds
        # the samples received, oldest first.
        features[:, _CLIENT_REPORT] = measured

    def _churn(self, uniforms: np.ndarray) -> None:
        # Leaving is rarer than joining, so one comparison finds every slot that may change.
        candidates = uniforms < JOIN_PROBABILITY
        if not candidates.any():
            return
        leaving = self._active & (uniforms < LEAVE_PROBABILITY)
        joining = ~self._active & candidates
        self._draw_users(joining)
        self._cumulative_stall_s[leaving] = 0.0
        self._backlog_mbit[leaving] = 0.0
        self._has_previous_level[leaving] = False
        self._set_present((self._active & ~leaving) | joining)

    def _observation(self) -> np.ndarray:
        observation = np.empty(self.observation_layout.size, dtype=np.float32)
        np.minimum(
            self._features * self._present_column, OBSERVED_RATIO_CLIP,
            out=observation[:-1].reshape(self._features.shape),
        )
        observation[-1] = self._count / self.num_users
        return observation

    def _checked_levels(self, action: Any) -> np.ndarray:
        levels = np.asarray(action)
        if levels.shape != (self.num_users,) or levels.dtype.kind not in "iu":
            raise ValueError(
                f"Expected an integer action of shape ({self.num_users},), one quality level "
                f"per user, got {levels.dtype} array of shape {levels.shape!r}."
            )
        if levels.min() < 0 or levels.max() > self._top_level:
            raise ValueError(f"Quality levels must lie in [0, {self._top_level}], got {action!r}.")
        return levels.astype(np.int64, copy=False)


def make_env(num_users: int = 8, seed: int | None = None, **kwargs: Any) -> SyntheticVREdgeEnv:
    """Build a `SyntheticVREdgeEnv`; a top-level function, so it pickles for spawned workers."""
    return SyntheticVREdgeEnv(num_users=num_users, seed=seed, **kwargs)
