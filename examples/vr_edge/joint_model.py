"""The shared cell and GPU as a controller can infer them from one observation, the expected
reward of a joint choice of levels under them, and a local search over joint choices.

Inference (`estimate_conditions`), from what the observation holds and the published stream
model only:

- The airtime load of the last step. A user's measured throughput is its rate on the air over
  the share of air left by the others, `r_i = rate_i x (1 - L)`, and the load is the sum of
  `bitrate_i / rate_i`; so with `S = sum_i bitrate_i / r_i` (what the users streamed over what
  they measured), `L = S / (1 + S)`.
- Each user's rate with the air to itself: `r_i / (1 - L)`, from the harmonic mean of its last
  `window` samples.
- The GPU's free capacity: the reported render time over a level's nominal render time is the
  stretch `1 / (1 - GPU_CONTENTION x load)`, which gives the last step's GPU load; the frames
  the users asked for over that load give the capacity.
- The video each user still has queued (its queue delay times its last bitrate).

The expected reward (`JointRewardModel.objective`) mirrors the env's published timing model:
transmission time grows as `1 / (1 - airtime load)`, render time as the GPU stretch, frames past
the airtime or GPU capacity are lost, and each frame's time carries a log-normal factor of
log-std `frame_time_std` (size jitter and fading), to which a forecast's own uncertainty adds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from examples.vr_edge.controller import DecodedObservation
from examples.vr_edge.synthetic_env import (
    GPU_CONTENTION,
    LATE_FRAME_CREDIT,
    MAX_AIRTIME_LOAD,
    MOTION_TO_PHOTON_BUDGET_MS,
    PIPELINE_OVERHEAD_MS,
    STEP_DURATION_S,
)

__all__ = ["Conditions", "JointRewardModel", "estimate_conditions", "local_search", "normal_tail"]

# A GPU whose load cannot be read (no user measured yet) is assumed to have this much free
# capacity (GPU-seconds per second): the mean free share of the edge GPU.
_FALLBACK_GPU_CAPACITY = 3.2
# A user without measurements (it just joined) is assumed to get this rate with the air to itself.
_FALLBACK_RATE_MBPS = 300.0


@dataclass
class Conditions:
    """Conditions of the next `horizon` steps, as a controller estimates (or a reference knows) them.

    `rate_mbps` `[horizon, batch, users]`: each user's rate with the air to itself (the mean
    frame factor folded in); `rate_log_std` (same shape, or broadcastable): the forecast's own
    log-std, added to the frame-time spread; `gpu_capacity` `[horizon, batch]` in GPU-seconds
    per second; `backlog_mbit` `[batch, users]`: what each sender still holds before the first
    step; `frame_time_std` (scalar or `[batch, users]`): the log-std of a frame's time factor.
    """

    rate_mbps: np.ndarray
    rate_log_std: np.ndarray | float
    gpu_capacity: np.ndarray
    backlog_mbit: np.ndarray
    frame_time_std: np.ndarray | float


def normal_tail(z: np.ndarray) -> np.ndarray:
    """P(Z > z) for a standard normal, vectorised (Abramowitz-Stegun 7.1.26, error below 1e-7)."""
    x = np.abs(z) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    upper = 0.5 * poly * np.exp(-x * x)
    return np.where(z >= 0, upper, 1.0 - upper)


def estimate_conditions(decoded: DecodedObservation, window: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`(rate_mbps [batch, users], gpu_capacity [batch], backlog_mbit [batch, users])` of the last step."""
    eligible = decoded.active & decoded.measured
    last = decoded.last_level[..., None]
    last_bitrate = np.take_along_axis(decoded.bitrate, last, axis=-1)[..., 0]
    latest = np.maximum(decoded.throughput_mbps[..., -1], 1e-6)
    streamed_over_measured = np.where(eligible, last_bitrate / latest, 0.0).sum(axis=-1)
    load = np.minimum(streamed_over_measured / (1.0 + streamed_over_measured), MAX_AIRTIME_LOAD)
    # A user that joined less than `window` steps ago has zeros (no sample) in its history.
    recent = decoded.throughput_mbps[..., -window:]
    samples = np.maximum((recent > 0).sum(axis=-1), 1)
    harmonic = samples / np.where(recent > 0, 1.0 / np.maximum(recent, 1e-6), 0.0).sum(axis=-1).clip(1e-9)
    rate = harmonic / (1.0 - load)[:, None]
    count = eligible.sum(axis=-1)
    mean_rate = np.where(count > 0, np.where(eligible, rate, 0.0).sum(axis=-1) / np.maximum(count, 1), _FALLBACK_RATE_MBPS)
    rate = np.where(eligible, rate, mean_rate[:, None])

    last_nominal = np.take_along_axis(decoded.nominal_render, last, axis=-1)[..., 0]
    stretch = np.where(eligible, decoded.render_ms / np.maximum(last_nominal, 1e-6), 0.0)
    mean_stretch = stretch.sum(axis=-1) / np.maximum(count, 1)
    gpu_load = np.clip((1.0 - 1.0 / np.maximum(mean_stretch, 1.0)) / GPU_CONTENTION, 0.02, 1.0)
    demand = np.where(eligible, decoded.frame_rate * last_nominal, 0.0).sum(axis=-1) * 1e-3
    capacity = np.where(count > 0, demand / gpu_load, _FALLBACK_GPU_CAPACITY)

    backlog = np.where(eligible, decoded.queue_ms * 1e-3 * last_bitrate, 0.0)
    return rate, capacity, backlog


class JointRewardModel:
    """Expected per-step reward of joint choices of levels, with the env's published weights.

    `keyframe_extra_frames` is the env's option of that name: a user that switches level queues
    that many mean frames of its new level ahead of the first step's frames (0, the default env,
    leaves the model as it was).
    """

    def __init__(
        self,
        late_penalty: float = 0.5,
        drop_penalty: float = 2.0,
        switch_penalty: float = 0.5,
        keyframe_extra_frames: float = 0.0,
    ) -> None:
        self.late_penalty, self.drop_penalty, self.switch_penalty = late_penalty, drop_penalty, switch_penalty
        self.keyframe_extra_frames = keyframe_extra_frames

    def loads(
        self, decoded: DecodedObservation, conditions: Conditions, levels: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """`(airtime load, GPU load)`, each `[horizon, batch, candidates]`, of `levels` `[batch, candidates, users]`."""
        present = decoded.active[:, None, :]
        bitrate = _gather(decoded.bitrate, levels)
        nominal = _gather(decoded.nominal_render, levels)
        rate = conditions.rate_mbps[:, :, None, :]
        air = (present * bitrate / rate).sum(axis=-1) + self._backlog_air(decoded, conditions, levels).sum(axis=-1)
        gpu = (present * decoded.frame_rate[:, None, :] * nominal).sum(axis=-1) * 1e-3
        return air, gpu / conditions.gpu_capacity[:, :, None]

    def _backlog_air(self, decoded: DecodedObservation, conditions: Conditions, levels: np.ndarray) -> np.ndarray:
        """`[horizon, batch, 1 or candidates, users]` airtime the queued video takes (first step
        only), with the keyframes of the users that `levels` switch if the env charges them."""
        if not self.keyframe_extra_frames:
            backlog_air = np.zeros(conditions.rate_mbps.shape)
            backlog_air[0] = conditions.backlog_mbit / (STEP_DURATION_S * conditions.rate_mbps[0])
            return backlog_air[:, :, None, :]
        eligible = (decoded.active & decoded.measured)[:, None, :]
        switching = eligible & (levels != decoded.last_level[:, None, :])
        keyframe_mbit = self.keyframe_extra_frames * _gather(decoded.bitrate, levels) / decoded.frame_rate[:, None, :]
        backlog = conditions.backlog_mbit[:, None, :] + switching * keyframe_mbit
        backlog_air = np.zeros((conditions.rate_mbps.shape[0], *backlog.shape))
        backlog_air[0] = backlog / (STEP_DURATION_S * conditions.rate_mbps[0][:, None, :])
        return backlog_air

    def user_values(
        self,
        decoded: DecodedObservation,
        conditions: Conditions,
        levels: np.ndarray,
        air_load: np.ndarray,
        gpu_load: np.ndarray,
        discount: float = 1.0,
    ) -> np.ndarray:
        """`[batch, candidates, users]` each user's discounted expected reward over the horizon,
        less its switching cost, at `levels` `[batch, candidates, users]` under the given loads
        (`[horizon, batch, candidates]`); 0 for empty slots."""
        present = decoded.active[:, None, :]
        bitrate, nominal, quality = (_gather(table, levels) for table in (decoded.bitrate, decoded.nominal_render, decoded.quality))
        frame_rate = decoded.frame_rate[:, None, :]
        rate = conditions.rate_mbps[:, :, None, :]
        air_load, gpu_load = air_load[..., None], gpu_load[..., None]
        served = np.minimum(1.0, MAX_AIRTIME_LOAD / np.maximum(air_load, 1e-9))
        free_air = 1.0 - np.minimum(air_load, MAX_AIRTIME_LOAD)
        rendered = np.minimum(1.0, 1.0 / np.maximum(gpu_load, 1e-9))
        stretch = 1.0 / (1.0 - GPU_CONTENTION * np.minimum(gpu_load, 1.0))

        # The queue drains first; frames are sent evenly through the step, so a frame waits
        # for what is left of it: on average Q^2 / (2 x step) for a queue shorter than a step.
        step_ms = STEP_DURATION_S * 1e3
        queue_ms = 1e3 * self._backlog_air(decoded, conditions, levels) * STEP_DURATION_S / free_air
        wait_ms = np.where(queue_ms < step_ms, queue_ms**2 / (2.0 * step_ms), queue_ms - step_ms / 2.0)
        fixed = PIPELINE_OVERHEAD_MS + nominal * stretch + wait_ms
        transmit = 1e3 * bitrate / frame_rate / (rate * free_air)
        std = np.sqrt(np.square(conditions.frame_time_std) + np.square(conditions.rate_log_std))
        std = np.broadcast_to(std, conditions.rate_mbps.shape)[:, :, None, :]
        late_after = MOTION_TO_PHOTON_BUDGET_MS - fixed
        drop_after = late_after + 1e3 / frame_rate

        def exceeds(limit: np.ndarray) -> np.ndarray:
            # log F ~ N(-std^2 / 2, std^2), so the mean factor is 1.
            z = (np.log(np.maximum(limit, 1e-9) / transmit) + 0.5 * std * std) / std
            return np.where(limit > 0, normal_tail(z), 1.0)

        late_or_drop, drop_in_time = exceeds(late_after), exceeds(drop_after)
        delivered = served * rendered
        dropped = 1.0 - delivered * (1.0 - drop_in_time)
        late = delivered * (late_or_drop - drop_in_time)
        on_time = 1.0 - dropped - late
        reward = quality * (on_time + LATE_FRAME_CREDIT * late) - self.late_penalty * late - self.drop_penalty * dropped
        weights = discount ** np.arange(reward.shape[0])
        value = np.tensordot(weights, reward, axes=1)
        last_quality = np.take_along_axis(decoded.quality, decoded.last_level[..., None], axis=-1)[..., 0][:, None, :]
        eligible = (decoded.active & decoded.measured)[:, None, :]
        switching = self.switch_penalty * eligible * np.abs(quality - last_quality)
        return present * (value - switching)

    def objective(
        self, decoded: DecodedObservation, conditions: Conditions, levels: np.ndarray, discount: float = 1.0
    ) -> np.ndarray:
        """`[batch, candidates]` value of holding each candidate `levels` `[batch, candidates, users]`
        for the conditions' horizon: the discounted sum of the users' expected rewards, less the
        switching cost paid once (by users that streamed before)."""
        air_load, gpu_load = self.loads(decoded, conditions, levels)
        return self.user_values(decoded, conditions, levels, air_load, gpu_load, discount).sum(axis=-1)

    def best_responses(
        self,
        decoded: DecodedObservation,
        conditions: Conditions,
        air_loads: np.ndarray,
        gpu_loads: np.ndarray,
        num_levels: int,
        discount: float = 1.0,
    ) -> np.ndarray:
        """`[batch, candidates, users]`: for each assumed pair of loads (`[horizon, batch, candidates]`
        each), every user's best level if the loads were those."""
        batch, users = decoded.active.shape
        candidates = air_loads.shape[-1]
        levels = np.broadcast_to(np.arange(num_levels)[None, None, :, None], (batch, candidates, num_levels, users))
        flat = levels.reshape(batch, candidates * num_levels, users)
        values = self.user_values(
            decoded, conditions, flat, np.repeat(air_loads, num_levels, axis=-1), np.repeat(gpu_loads, num_levels, axis=-1),
            discount,
        )
        return values.reshape(batch, candidates, num_levels, users).argmax(axis=2)


def _gather(table: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """`table` `[batch, users, levels]` at `levels` `[batch, candidates, users]`."""
    return np.take_along_axis(table[:, None], levels[..., None], axis=-1)[..., 0]


def local_search(value_of: Callable, start: np.ndarray, eligible: np.ndarray, num_levels: int, max_moves: int) -> np.ndarray:
    """Steepest ascent from `start` `[batch, users]` over moves of one eligible user one level up or down.

    Each round scores every move at once (`value_of([batch, candidates, users]) -> [batch,
    candidates]`) and takes the best improving one, until none improves or `max_moves` rounds
    have run.
    """
    batch, users = eligible.shape
    mover = np.repeat(np.arange(users), 2)
    step = np.tile([-1, 1], users)
    rows = np.arange(batch)
    levels = np.where(eligible, start, 0).astype(np.int64)
    value = value_of(levels[:, None, :])[:, 0]
    for _ in range(max_moves):
        candidates = np.repeat(levels[:, None, :], mover.size, axis=1)
        moved = levels[:, mover] + step
        candidates[:, np.arange(mover.size), mover] = np.clip(moved, 0, num_levels - 1)
        allowed = eligible[:, mover] & (moved >= 0) & (moved < num_levels)
        values = np.where(allowed, value_of(candidates), -np.inf)
        move = values.argmax(axis=1)
        improves = values[rows, move] > value + 1e-9
        if not improves.any():
            break
        changed = rows[improves]
        levels[changed] = candidates[changed, move[changed]]
        value = np.where(improves, values[rows, move], value)
    return levels
