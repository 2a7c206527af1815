"""A synthetic multi-user VR edge-rendering environment.

Several users stream rendered frames from one edge server over a shared link. Every step
(one decision interval of `STEP_DURATION_S` seconds) each user picks a bitrate level from a
fixed ladder. The link's total bandwidth follows a seeded stochastic process: a mean-reverting
AR(1) in log space (slow drift) times a Markov "degraded" state that cuts bandwidth for several
steps at a time (sudden drops). Bandwidth is therefore partly predictable from its history,
which the observation carries.

Within a step the link is shared max-min fairly: every user gets an equal share, and what a
user does not need is redistributed to the others. Each user asks for enough content to refill
its playout buffer; content that does not arrive in time lets the buffer run dry, and the
time the player waits on an empty buffer is stall time.

Reward per step, averaged over users::

    quality - stall_penalty_per_s * stall_s - smoothness_penalty_weight * |quality change|

where quality is the log-utility of the bitrate normalised to [0, 1] over the ladder (the
lowest level scores 0, the highest 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import gymnasium
import numpy as np
from gymnasium import spaces

__all__ = [
    "DEFAULT_BITRATE_LADDER_MBPS",
    "DecodedObservation",
    "ObservationLayout",
    "SyntheticVREdgeEnv",
    "make_env",
]

DEFAULT_BITRATE_LADDER_MBPS: tuple[float, ...] = (5.0, 10.0, 18.0, 30.0, 50.0, 80.0)

STEP_DURATION_S = 0.5
# VR streams keep little content buffered: a long buffer adds motion-to-photon latency.
MAX_BUFFER_S = 2.0
INITIAL_BUFFER_S = 1.0
THROUGHPUT_HISTORY_LEN = 4
LINK_HISTORY_LEN = 8
# Rates are observed relative to the mean per-user bandwidth; values above this are clipped
# so the observation space can declare finite bounds.
OBSERVED_RATE_CLIP = 10.0

# Bandwidth process. The log-bandwidth deviation is AR(1) with stationary standard deviation
# LOG_BANDWIDTH_STD, so drift is slow (phi close to 1) but never runs away.
LOG_BANDWIDTH_AR_COEFFICIENT = 0.9
LOG_BANDWIDTH_STD = 0.3
# A degraded period starts with the enter probability per step and lasts
# 1 / DEGRADED_EXIT_PROBABILITY steps on average.
DEGRADED_ENTER_PROBABILITY = 0.04
DEGRADED_EXIT_PROBABILITY = 0.25


class DecodedObservation(NamedTuple):
    """Observation features in physical units; leading dimensions follow the input."""

    buffer_s: np.ndarray
    """Playout buffer per user in seconds, shape `[..., num_users]`."""
    last_level: np.ndarray
    """Bitrate level chosen at the previous step, int64, shape `[..., num_users]`."""
    throughput_mbps: np.ndarray
    """Measured throughput per user, oldest first, shape `[..., num_users, history]`."""
    link_share_mbps: np.ndarray
    """Total link bandwidth divided by the number of users, oldest first, `[..., history]`."""


@dataclass(frozen=True)
class ObservationLayout:
    """Where each feature sits in the flat observation vector, and how it is scaled.

    The vector holds one block per user, `[buffer, last_level, throughput history...]`,
    followed by the link bandwidth history. Buffers are divided by `max_buffer_s`, levels by
    the top level index, and rates by `reference_bandwidth_mbps` (the link history after first
    dividing by the number of users, so both read as "share of a typical user's bandwidth").
    """

    num_users: int
    bitrate_ladder_mbps: tuple[float, ...]
    reference_bandwidth_mbps: float
    max_buffer_s: float = MAX_BUFFER_S
    throughput_history_len: int = THROUGHPUT_HISTORY_LEN
    link_history_len: int = LINK_HISTORY_LEN

    @property
    def per_user_features(self) -> int:
        return 2 + self.throughput_history_len

    @property
    def size(self) -> int:
        return self.num_users * self.per_user_features + self.link_history_len

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-feature `(low, high)` float32 bounds of the observation space."""
        low = np.zeros(self.size, dtype=np.float32)
        per_user_high = np.full(self.per_user_features, OBSERVED_RATE_CLIP, dtype=np.float32)
        per_user_high[:2] = 1.0  # buffer and level are fractions
        high = np.concatenate(
            [np.tile(per_user_high, self.num_users),
             np.full(self.link_history_len, OBSERVED_RATE_CLIP, dtype=np.float32)]
        )
        return low, high

    def decode(self, observations: np.ndarray) -> DecodedObservation:
        """Undo the scaling of a `[..., size]` observation array."""
        observations = np.asarray(observations, dtype=np.float64)
        if observations.shape[-1:] != (self.size,):
            raise ValueError(
                f"Expected observations with a last dimension of {self.size} "
                f"({self.num_users} users), got shape {observations.shape!r}."
            )
        leading = observations.shape[:-1]
        split = self.num_users * self.per_user_features
        per_user = observations[..., :split].reshape(
            *leading, self.num_users, self.per_user_features
        )
        top_level = len(self.bitrate_ladder_mbps) - 1
        return DecodedObservation(
            buffer_s=per_user[..., 0] * self.max_buffer_s,
            last_level=np.rint(per_user[..., 1] * top_level).astype(np.int64),
            throughput_mbps=per_user[..., 2:] * self.reference_bandwidth_mbps,
            link_share_mbps=observations[..., split:] * self.reference_bandwidth_mbps,
        )


def _max_min_fair_allocation(demand: np.ndarray, capacity: float) -> np.ndarray:
    """Split `capacity` so that no user can gain without taking from a poorer one.

    Users asking less than the water level get their full demand; the rest get the level.
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


def _check_positive(name: str, value: Any, allow_zero: bool = False) -> float:
    numeric_types = (int, float, np.integer, np.floating)
    valid = isinstance(value, numeric_types) and not isinstance(value, bool)
    if valid:
        valid = math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not valid:
        expected = "a finite number >= 0" if allow_zero else "a finite number > 0"
        raise ValueError(f"`{name}` must be {expected}, got {value!r}.")
    return float(value)


def _check_ladder(ladder: Any) -> tuple[float, ...]:
    try:
        rates = np.asarray(ladder, dtype=np.float64)
    except (TypeError, ValueError):
        rates = np.empty(0)
    if (rates.ndim != 1 or rates.size < 2 or not np.all(np.isfinite(rates))
            or rates[0] <= 0 or np.any(np.diff(rates) <= 0)):
        raise ValueError(
            "`bitrate_ladder_mbps` must be at least 2 positive, strictly increasing bitrates, "
            f"got {ladder!r}."
        )
    return tuple(float(rate) for rate in rates)


class SyntheticVREdgeEnv(gymnasium.Env):
    """Users sharing a fluctuating edge link each pick a streaming bitrate per step.

    Observation: float32 `Box` of shape `(num_users * (2 + 4) + 8,)`, laid out and scaled as
    `ObservationLayout` describes (`self.observation_layout.decode` undoes the scaling).
    All features lie in `[0, 1]` (buffer, last level) or `[0, 10]` (rates, clipped).

    Action: `MultiDiscrete([num_levels] * num_users)`, one bitrate level per user.

    Step info (every step; `reset` returns an empty info): scalar floats `"quality"`,
    `"stall_penalty"` and `"smoothness_penalty"`, each averaged over users, with
    `reward == quality - stall_penalty - smoothness_penalty`; and `"stall_time"`, the stall
    seconds of this step averaged over users.

    Episodes are truncated after `episode_length` steps and terminated when any user's
    cumulative stall exceeds `max_cumulative_stall_s` (the session has failed).

    `simulation_substeps` splits each step into that many frame-delivery slots, each sharing
    the link and draining buffers on its own; results move only slightly with it (stalls
    are timed more finely) and stay deterministic for a seed. Its purpose is to make steps as
    cheap or as costly as a benchmark needs. Measured with 8 users on a 2-core x86 machine
    with Python 3.11 and numpy 2.4 (`time.perf_counter` over 5000 steps): about 30-40 us of
    CPU per step with the default of 1, and about 0.5 ms per step with
    `simulation_substeps=45`; each slot adds roughly 10 us.

    Seeding: all randomness comes from `self.np_random`. `reset(seed=...)` seeds it as
    Gymnasium does; the constructor's `seed` is used by the first `reset` that is given none.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        num_users: int = 8,
        seed: int | None = None,
        episode_length: int = 200,
        simulation_substeps: int = 1,
        bitrate_ladder_mbps: tuple[float, ...] = DEFAULT_BITRATE_LADDER_MBPS,
        mean_bandwidth_per_user_mbps: float = 25.0,
        degraded_bandwidth_fraction: float = 0.3,
        max_cumulative_stall_s: float = 4.0,
        stall_penalty_per_s: float = 4.0,
        smoothness_penalty_weight: float = 1.5,
    ) -> None:
        self.num_users = _check_int("num_users", num_users, 1)
        self.episode_length = _check_int("episode_length", episode_length, 1)
        self.simulation_substeps = _check_int("simulation_substeps", simulation_substeps, 1)
        if seed is not None:
            _check_int("seed", seed, 0)
        self.bitrate_ladder_mbps = _check_ladder(bitrate_ladder_mbps)
        self.mean_bandwidth_per_user_mbps = _check_positive(
            "mean_bandwidth_per_user_mbps", mean_bandwidth_per_user_mbps
        )
        self.degraded_bandwidth_fraction = _check_positive(
            "degraded_bandwidth_fraction", degraded_bandwidth_fraction
        )
        if self.degraded_bandwidth_fraction > 1.0:
            raise ValueError(
                "`degraded_bandwidth_fraction` must be in (0, 1], "
                f"got {degraded_bandwidth_fraction!r}."
            )
        self.max_cumulative_stall_s = _check_positive(
            "max_cumulative_stall_s", max_cumulative_stall_s
        )
        self.stall_penalty_per_s = _check_positive(
            "stall_penalty_per_s", stall_penalty_per_s, allow_zero=True
        )
        self.smoothness_penalty_weight = _check_positive(
            "smoothness_penalty_weight", smoothness_penalty_weight, allow_zero=True
        )

        self.observation_layout = ObservationLayout(
            num_users=self.num_users,
            bitrate_ladder_mbps=self.bitrate_ladder_mbps,
            reference_bandwidth_mbps=self.mean_bandwidth_per_user_mbps,
        )
        low, high = self.observation_layout.bounds()
        self.observation_space = spaces.Box(low=low, high=high, dtype=np.float32)
        num_levels = len(self.bitrate_ladder_mbps)
        self.action_space = spaces.MultiDiscrete(np.full(self.num_users, num_levels, np.int64))

        self._ladder_mbps = np.asarray(self.bitrate_ladder_mbps)
        self._quality_of_level = np.log(self._ladder_mbps / self._ladder_mbps[0]) / math.log(
            self._ladder_mbps[-1] / self._ladder_mbps[0]
        )
        # Subtracting half the variance keeps the mean bandwidth at the configured value.
        self._mean_link_log_mbps = (
            math.log(self.num_users * self.mean_bandwidth_per_user_mbps) - LOG_BANDWIDTH_STD**2 / 2
        )
        self._rate_scale = 1.0 / self.mean_bandwidth_per_user_mbps
        self._link_scale = self._rate_scale / self.num_users
        self._level_scale = 1.0 / (num_levels - 1)
        self._user_mean_scale = 1.0 / self.num_users
        # The current observation, in float64 so histories shift without rounding drift.
        self._observed = np.zeros(self.observation_layout.size)
        self._pending_seed = seed
        self._episode_active = False

    @property
    def _observed_per_user(self) -> np.ndarray:
        """The per-user block of `_observed` as a `[num_users, features]` view."""
        # Rebuilt on each use: a stored view would come apart from `_observed` when the env
        # is pickled or deep-copied.
        return self._observed[:-LINK_HISTORY_LEN].reshape(
            self.num_users, self.observation_layout.per_user_features
        )

    # --- bandwidth process -------------------------------------------------------------------

    def _advance_bandwidth(self) -> float:
        """Step the link process once and return this step's total bandwidth in Mbps."""
        rng = self.np_random
        phi = LOG_BANDWIDTH_AR_COEFFICIENT
        self._log_bandwidth_deviation = (
            phi * self._log_bandwidth_deviation
            + LOG_BANDWIDTH_STD * math.sqrt(1.0 - phi * phi) * rng.standard_normal()
        )
        switch_probability = (
            DEGRADED_EXIT_PROBABILITY if self._degraded else DEGRADED_ENTER_PROBABILITY
        )
        if rng.random() < switch_probability:
            self._degraded = not self._degraded
        bandwidth = math.exp(self._mean_link_log_mbps + self._log_bandwidth_deviation)
        return bandwidth * self.degraded_bandwidth_fraction if self._degraded else bandwidth

    def _record_link(self, bandwidth_mbps: float, throughput_mbps: np.ndarray) -> None:
        """Push this step's link and per-user rates into the observed histories."""
        # The histories live in the observation itself, already scaled and clipped, so
        # building an observation is one copy.
        link_history = self._observed[-LINK_HISTORY_LEN:]
        link_history[:-1] = link_history[1:]
        link_history[-1] = min(bandwidth_mbps * self._link_scale, OBSERVED_RATE_CLIP)
        throughput_history = self._observed_per_user[:, 2:]
        throughput_history[:, :-1] = throughput_history[:, 1:]
        np.minimum(
            throughput_mbps * self._rate_scale, OBSERVED_RATE_CLIP, out=throughput_history[:, -1]
        )

    # --- gymnasium API -----------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        if seed is None:
            seed = self._pending_seed
        self._pending_seed = None
        super().reset(seed=seed)

        rng = self.np_random
        stationary_degraded = DEGRADED_ENTER_PROBABILITY / (
            DEGRADED_ENTER_PROBABILITY + DEGRADED_EXIT_PROBABILITY
        )
        self._log_bandwidth_deviation = LOG_BANDWIDTH_STD * rng.standard_normal()
        self._degraded = bool(rng.random() < stationary_degraded)
        # The session has been running before the agent takes over, so the histories hold
        # real link samples; users are taken to have received their equal share meanwhile.
        self._observed[:] = 0.0
        for _ in range(LINK_HISTORY_LEN):
            bandwidth = self._advance_bandwidth()
            self._record_link(bandwidth, np.full(self.num_users, bandwidth / self.num_users))

        self._buffer_s = np.full(self.num_users, INITIAL_BUFFER_S)
        self._cumulative_stall_s = np.zeros(self.num_users)
        self._last_levels = np.zeros(self.num_users, dtype=np.int64)
        observed_per_user = self._observed_per_user
        observed_per_user[:, 0] = self._buffer_s / MAX_BUFFER_S
        observed_per_user[:, 1] = 0.0
        self._steps_taken = 0
        self._episode_active = True
        return self._observed.astype(np.float32), {}

    def step(
        self, action: np.ndarray
    ) -> tuple[np.ndarray, float, bool, bool, dict[str, float]]:
        if not self._episode_active:
            raise RuntimeError(
                "`step` was called without an active episode; call `reset` first "
                "(also after an episode terminates or is truncated)."
            )
        levels = self._checked_levels(action)
        bandwidth_mbps = self._advance_bandwidth()
        bitrate_mbps = self._ladder_mbps[levels]
        stall_s, throughput_mbps = self._deliver(bitrate_mbps, bandwidth_mbps)
        self._record_link(bandwidth_mbps, throughput_mbps)

        observed_per_user = self._observed_per_user
        observed_per_user[:, 0] = self._buffer_s * (1.0 / MAX_BUFFER_S)
        observed_per_user[:, 1] = levels * self._level_scale

        quality = self._quality_of_level[levels]
        quality_change = np.abs(quality - self._quality_of_level[self._last_levels])
        self._last_levels = levels
        self._cumulative_stall_s += stall_s
        self._steps_taken += 1

        # Sums times a precomputed 1/n: `ndarray.mean` costs several times more per call.
        mean_quality = float(quality.sum()) * self._user_mean_scale
        mean_stall_s = float(stall_s.sum()) * self._user_mean_scale
        stall_penalty = self.stall_penalty_per_s * mean_stall_s
        smoothness_penalty = (
            self.smoothness_penalty_weight * float(quality_change.sum()) * self._user_mean_scale
        )
        reward = mean_quality - stall_penalty - smoothness_penalty

        terminated = bool(self._cumulative_stall_s.max() > self.max_cumulative_stall_s)
        truncated = not terminated and self._steps_taken >= self.episode_length
        self._episode_active = not (terminated or truncated)
        info = {
            "quality": mean_quality,
            "stall_penalty": stall_penalty,
            "smoothness_penalty": smoothness_penalty,
            "stall_time": mean_stall_s,
        }
        return self._observed.astype(np.float32), reward, terminated, truncated, info

    # --- internals ---------------------------------------------------------------------------

    def _checked_levels(self, action: Any) -> np.ndarray:
        levels = np.asarray(action)
        if levels.shape != (self.num_users,) or levels.dtype.kind not in "iu":
            raise ValueError(
                f"Expected an integer action of shape ({self.num_users},), one bitrate level "
                f"per user, got {levels.dtype} array of shape {levels.shape!r}."
            )
        if levels.min() < 0 or levels.max() >= self._ladder_mbps.size:
            raise ValueError(
                f"Bitrate levels must lie in [0, {self._ladder_mbps.size - 1}], got {action!r}."
            )
        return levels.astype(np.int64)

    def _deliver(
        self, bitrate_mbps: np.ndarray, bandwidth_mbps: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """Share the link over the step's delivery slots; return per-user stall and throughput.

        Each user asks for the content that would leave its buffer full at the end of the
        step. In every slot the link carries `bandwidth * slot duration` megabits, split
        max-min fairly over what users still want; arrivals fill the buffer, then playout
        drains it, and playout time the buffer cannot cover is stall.
        """
        slots = self.simulation_substeps
        slot_s = STEP_DURATION_S / slots
        slot_capacity_mbit = bandwidth_mbps * slot_s
        remaining_mbit = bitrate_mbps * (MAX_BUFFER_S - self._buffer_s + STEP_DURATION_S)
        received_mbit = np.zeros(self.num_users)
        stall_s = np.zeros(self.num_users)
        buffer_s = self._buffer_s
        for _ in range(slots):
            delivered_mbit = _max_min_fair_allocation(remaining_mbit, slot_capacity_mbit)
            remaining_mbit = remaining_mbit - delivered_mbit
            received_mbit += delivered_mbit
            buffer_s = buffer_s + delivered_mbit / bitrate_mbps - slot_s
            stall_s -= np.minimum(buffer_s, 0.0)
            buffer_s = np.maximum(buffer_s, 0.0)
        # Playback pauses during a stall, so a late burst can overfill; the player drops it.
        self._buffer_s = np.minimum(buffer_s, MAX_BUFFER_S)
        return stall_s, received_mbit / STEP_DURATION_S


def make_env(num_users: int = 8, seed: int | None = None, **kwargs: Any) -> SyntheticVREdgeEnv:
    """Build a `SyntheticVREdgeEnv`; a top-level function, so it pickles for spawned workers."""
    return SyntheticVREdgeEnv(num_users=num_users, seed=seed, **kwargs)
