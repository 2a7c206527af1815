"""Seeded wireless-cell and edge-GPU traces for `SyntheticVREdgeEnv`, in train and test regimes.

A trace regime describes how the cell's capacity moves: a mean-reverting AR(1) in log space
(slow drift, with the regime's volatility and memory) times a Markov "degraded" state that cuts
capacity for several steps at a time (handovers, interference bursts, a crowd arriving). Each
episode picks one regime from its split with the episode's seed, so a policy cannot know the
regime in advance and has to infer it from what its users measure.

The train and test splits hold the same four kinds of place (a quiet room, walking, a moving
vehicle, a congested cell) with different parameters, so a held-out evaluation measures how a
policy copes with conditions it was not trained or tuned on, as a trace-driven study would with
disjoint trace sets.

Capacities are per-user PHY rates in Mbps: the rate a user with an average channel gets when it
has the air to itself. The edge GPU's free capacity moves with the load of other tenants.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["TRACE_SPLITS", "TRAINING_TRACE_JITTER", "CellTrace", "GpuTrace", "TraceRegime", "jittered_regime"]


@dataclass(frozen=True)
class TraceRegime:
    """One kind of radio environment."""

    name: str
    mean_capacity_mbps: float
    """Long-run mean of the per-user PHY rate outside degraded periods."""
    log_std: float
    """Stationary standard deviation of the log capacity (how far it drifts)."""
    ar_coefficient: float
    """Per-step memory of the log capacity; lower values vary faster."""
    degraded_enter_probability: float
    degraded_exit_probability: float
    degraded_fraction: float
    """Capacity multiplier while degraded."""


TRACE_SPLITS: dict[str, tuple[TraceRegime, ...]] = {
    "train": (
        TraceRegime("static", 620.0, 0.10, 0.97, 0.004, 0.30, 0.55),
        TraceRegime("walking", 520.0, 0.25, 0.92, 0.015, 0.25, 0.45),
        TraceRegime("vehicle", 440.0, 0.40, 0.80, 0.030, 0.30, 0.35),
        TraceRegime("congested", 320.0, 0.30, 0.90, 0.050, 0.20, 0.40),
    ),
    "test": (
        TraceRegime("static-b", 580.0, 0.13, 0.96, 0.006, 0.25, 0.50),
        TraceRegime("walking-b", 480.0, 0.30, 0.90, 0.020, 0.25, 0.40),
        TraceRegime("vehicle-b", 400.0, 0.45, 0.75, 0.035, 0.35, 0.30),
        TraceRegime("congested-b", 350.0, 0.35, 0.88, 0.060, 0.25, 0.45),
    ),
}


# The spread `train.py` and `tune_baselines.py` train and tune with by default (evaluation never
# jitters: it plays the test split as it is).
TRAINING_TRACE_JITTER = 0.25


def jittered_regime(regime: TraceRegime, spread: float, rng: np.random.Generator) -> TraceRegime:
    """`regime` with each parameter scaled by its own factor drawn log-uniformly in [1/(1+spread), 1+spread].

    Training on regimes jittered this way (domain randomisation) teaches a policy to cope with
    places whose statistics differ from the ones it trained on, as the test split's do. The
    scaled quantities are the mean capacity, the volatility, the memory's complement
    `1 - ar_coefficient` (how fast the capacity varies), the degraded state's entry and exit
    probabilities, and its capacity loss `1 - degraded_fraction`. Exactly six uniforms are
    drawn, so the rest of the episode's draws do not depend on the regime picked.
    """
    if not (math.isfinite(spread) and spread >= 0):
        raise ValueError(f"`spread` must be a finite number >= 0, got {spread!r}.")
    width = math.log1p(spread)
    scale = np.exp(rng.uniform(-width, width, 6))
    return TraceRegime(
        name=regime.name,
        mean_capacity_mbps=regime.mean_capacity_mbps * scale[0],
        log_std=regime.log_std * scale[1],
        ar_coefficient=min(max(1.0 - (1.0 - regime.ar_coefficient) * scale[2], 0.0), 0.995),
        degraded_enter_probability=min(regime.degraded_enter_probability * scale[3], 1.0),
        degraded_exit_probability=min(regime.degraded_exit_probability * scale[4], 1.0),
        degraded_fraction=min(max(1.0 - (1.0 - regime.degraded_fraction) * scale[5], 0.05), 1.0),
    )


class CellTrace:
    """The shared cell's per-user PHY capacity, one value per step."""

    def __init__(self, regime: TraceRegime, rng: np.random.Generator) -> None:
        self.regime = regime
        # Subtracting half the variance keeps the mean capacity at the regime's value.
        self._log_mean = math.log(regime.mean_capacity_mbps) - regime.log_std**2 / 2
        self._innovation_std = regime.log_std * math.sqrt(1.0 - regime.ar_coefficient**2)
        stationary_degraded = regime.degraded_enter_probability / (
            regime.degraded_enter_probability + regime.degraded_exit_probability
        )
        self._deviation = regime.log_std * float(rng.standard_normal())
        self._degraded = bool(rng.random() < stationary_degraded)

    def advance(self, normal: float, uniform: float) -> float:
        """Step once with one standard-normal and one uniform draw; return the capacity."""
        regime = self.regime
        self._deviation = regime.ar_coefficient * self._deviation + self._innovation_std * normal
        switch = regime.degraded_exit_probability if self._degraded else regime.degraded_enter_probability
        if uniform < switch:
            self._degraded = not self._degraded
        capacity = math.exp(self._log_mean + self._deviation)
        return capacity * regime.degraded_fraction if self._degraded else capacity


# The edge GPU: other tenants take a slowly varying share of it.
GPU_CAPACITY_GPU_SECONDS_PER_S = 4.0
BACKGROUND_LOAD_MEAN = 0.2
BACKGROUND_LOAD_STD = 0.12
BACKGROUND_LOAD_AR_COEFFICIENT = 0.95
BACKGROUND_LOAD_MAX = 0.6


class GpuTrace:
    """Free edge-GPU capacity in GPU-seconds per second, one value per step."""

    def __init__(self, rng: np.random.Generator) -> None:
        self._load = BACKGROUND_LOAD_MEAN + BACKGROUND_LOAD_STD * float(rng.standard_normal())
        self._innovation_std = BACKGROUND_LOAD_STD * math.sqrt(1.0 - BACKGROUND_LOAD_AR_COEFFICIENT**2)

    def advance(self, normal: float) -> float:
        phi = BACKGROUND_LOAD_AR_COEFFICIENT
        self._load = phi * self._load + (1.0 - phi) * BACKGROUND_LOAD_MEAN + self._innovation_std * normal
        load = min(max(self._load, 0.0), BACKGROUND_LOAD_MAX)
        return GPU_CAPACITY_GPU_SECONDS_PER_S * (1.0 - load)
