"""Hand-written batched policies for `SyntheticVREdgeEnv`.

Each policy is a callable mapping observations `[num_envs, observation_size]` to actions
`[num_envs, num_users]` int64, using nothing but the observation, so it can drive a rollout
collector directly and serve as a yardstick for learned policies.
"""

from __future__ import annotations

import numpy as np

from examples.vr_edge.synthetic_env import ObservationLayout

__all__ = ["BandwidthShareHeuristic", "LowestBitratePolicy"]


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _check_batch(observations: np.ndarray, observation_size: int | None) -> np.ndarray:
    observations = np.asarray(observations)
    if observations.ndim != 2 or (
        observation_size is not None and observations.shape[1] != observation_size
    ):
        expected = "[num_envs, observation_size]" if observation_size is None else (
            f"[num_envs, {observation_size}]"
        )
        raise ValueError(
            f"Expected batched observations of shape {expected}, got shape "
            f"{observations.shape!r}; add a leading env dimension for a single observation."
        )
    return observations


class LowestBitratePolicy:
    """Always streams at the lowest level: the cautious floor, scoring no quality.

    It stalls only when the link cannot carry even the lowest bitrate for every user.
    """

    def __init__(self, num_users: int) -> None:
        if not (_is_int(num_users) and num_users >= 1):
            raise ValueError(f"`num_users` must be an integer >= 1, got {num_users!r}.")
        self.num_users = int(num_users)

    def __call__(self, observations: np.ndarray) -> np.ndarray:
        observations = _check_batch(observations, None)
        return np.zeros((observations.shape[0], self.num_users), dtype=np.int64)


class BandwidthShareHeuristic:
    """Picks, per user, the highest bitrate under a safe fraction of its expected share.

    The link is shared max-min fairly, so a user can count on at least an equal share of the
    total bandwidth. That share is predicted from the last `prediction_window` link samples
    as their harmonic mean (which weighs dips heavily), capped by the latest sample so a
    sudden drop is believed at once. A user's own measured throughput is not used: it is
    limited by what the user asked for, so it understates what the link could carry. The
    chosen bitrate stays under `safety_fraction` of the prediction, and that budget shrinks in
    proportion to the buffer when the buffer is below `low_buffer_s`, so a draining buffer
    can refill.
    """

    def __init__(
        self,
        layout: ObservationLayout,
        safety_fraction: float = 0.8,
        low_buffer_s: float = 1.0,
        prediction_window: int = 4,
    ) -> None:
        if not isinstance(layout, ObservationLayout):
            raise TypeError(
                "`layout` must be an ObservationLayout (use `env.observation_layout`), "
                f"got {type(layout).__name__}."
            )
        if not (_is_real(safety_fraction) and 0.0 < safety_fraction <= 1.0):
            raise ValueError(f"`safety_fraction` must be in (0, 1], got {safety_fraction!r}.")
        if not (_is_real(low_buffer_s) and 0.0 <= low_buffer_s <= layout.max_buffer_s):
            raise ValueError(
                f"`low_buffer_s` must be in [0, {layout.max_buffer_s}], got {low_buffer_s!r}."
            )
        if not (
            _is_int(prediction_window) and 1 <= prediction_window <= layout.link_history_len
        ):
            raise ValueError(
                f"`prediction_window` must be an integer in [1, {layout.link_history_len}], "
                f"got {prediction_window!r}."
            )
        self.layout = layout
        self.safety_fraction = float(safety_fraction)
        self.low_buffer_s = float(low_buffer_s)
        self.prediction_window = int(prediction_window)
        self._ladder_mbps = np.asarray(layout.bitrate_ladder_mbps)

    def __call__(self, observations: np.ndarray) -> np.ndarray:
        observations = _check_batch(observations, self.layout.size)
        decoded = self.layout.decode(observations)

        # A tiny floor keeps the harmonic mean finite when a rate was observed as zero.
        recent_share = np.maximum(decoded.link_share_mbps[:, -self.prediction_window :], 1e-6)
        harmonic_share = recent_share.shape[1] / np.sum(1.0 / recent_share, axis=1)
        expected_share = np.minimum(harmonic_share, recent_share[:, -1])

        if self.low_buffer_s > 0:
            buffer_factor = np.minimum(decoded.buffer_s / self.low_buffer_s, 1.0)
        else:
            buffer_factor = np.ones_like(decoded.buffer_s)
        budget_mbps = self.safety_fraction * expected_share[:, None] * buffer_factor
        levels = np.searchsorted(self._ladder_mbps, budget_mbps, side="right") - 1
        return np.maximum(levels, 0).astype(np.int64)
