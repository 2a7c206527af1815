"""Measure the clairvoyant gap of the env's variants: how much knowing the truth is worth in each.

    python -m examples.vr_edge.env_variants                  # writes docs/vr-edge-env-variants.json

For each variant of `SyntheticVREdgeEnv` in `VARIANTS` (today's env, late and noisy client
reports, a keyframe per level switch, both), the same test-trace seeds are played by the best
causal controllers with their tuned parameters (`CAUSAL_CONTROLLERS`; tuned on today's env and
*not* re-tuned for a variant), by a reference told the true present (`knows_future=False` in
`examples.vr_edge.clairvoyant`) and by the clairvoyant reference told the next step. The joint
controllers' and the references' reward model charges a switch the env's keyframe
(`JointRewardModel(keyframe_extra_frames=...)`), a published property of the variant; the
deadline rule has no model to tell. Reported per
variant: every return with a 95% interval, the best causal controller (highest mean), and paired
differences: clairvoyant minus best causal (the gap), present-knowing reference minus best causal
(what a better reading of the observation could win) and clairvoyant minus present-knowing (what
one step of foresight adds).

The seeds are `evaluate.py`'s development-check seeds (test traces, 2,000,000 on): choosing an
env is a development decision, and the final comparison's seeds stay unplayed.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from examples.vr_edge.baselines import load_tuned, tuned_baselines
from examples.vr_edge.clairvoyant import play_clairvoyant
from examples.vr_edge.episodes import play_episodes
from examples.vr_edge.evaluate import _difference_cell, _interval
from examples.vr_edge.joint_model import JointRewardModel
from examples.vr_edge.synthetic_env import SyntheticVREdgeEnv

__all__ = ["CAUSAL_CONTROLLERS", "VARIANTS", "measure_variants"]

# One step of delay: a report of the interval just played reaches the server after the next
# decision (a 100 ms interval's feedback, sent at its end, needs a few tens of ms to come back).
# A log-std of 0.15: a rate estimated from one interval's packets is off by about 15%.
_LATE_REPORTS = {"report_delay_steps": 1, "report_noise": 0.15}
# A keyframe about five times a mean frame (four extra), a common intra-to-inter frame size ratio.
_KEYFRAME = {"keyframe_extra_frames": 4.0}

VARIANTS: dict[str, dict[str, Any]] = {
    "today (all off)": {},
    "late noisy reports": _LATE_REPORTS,
    "keyframe per switch": _KEYFRAME,
    "both": {**_LATE_REPORTS, **_KEYFRAME},
    # Each knob of the report change alone, and a longer delay, to see which one moves the gap.
    "reports delayed 1 step": {"report_delay_steps": 1},
    "reports noisy (0.15)": {"report_noise": 0.15},
    "reports delayed 2 steps, noisy": {"report_delay_steps": 2, "report_noise": 0.15},
    "keyframe per switch (2 extra frames)": {"keyframe_extra_frames": 2.0},
}
CAUSAL_CONTROLLERS = ("predictive lookahead", "joint lookahead", "deadline rule")
CLAIRVOYANT = "clairvoyant (1 step ahead)"
PRESENT = "told the present"
DEFAULT_FIRST_SEED = 2_000_000
DEFAULT_EPISODES = 100


def measure_variant(env_kwargs: dict[str, Any], seeds: list[int]) -> dict[str, Any]:
    """Every causal controller and both references on `seeds` of the variant; returns and gaps."""
    env = SyntheticVREdgeEnv(**env_kwargs)
    controllers = tuned_baselines(env.observation_layout)
    for controller in controllers.values():
        # The keyframe's size is published with the env, like the reward's weights: the joint
        # controllers' reward model charges it, as the references' does.
        if hasattr(controller, "reward_model"):
            controller.reward_model = JointRewardModel(keyframe_extra_frames=env.keyframe_extra_frames)
    started = time.perf_counter()
    returns = {}
    for name in CAUSAL_CONTROLLERS:
        returns[name] = [record["return"] for record in play_episodes(controllers[name], seeds, env_kwargs)]
    returns[PRESENT] = [record["return"] for record in play_clairvoyant(seeds, env_kwargs, knows_future=False)]
    returns[CLAIRVOYANT] = [record["return"] for record in play_clairvoyant(seeds, env_kwargs, horizon=1)]
    arrays = {name: np.array(values) for name, values in returns.items()}
    best = max(CAUSAL_CONTROLLERS, key=lambda name: arrays[name].mean())
    return {
        "env_kwargs": env_kwargs,
        "returns": {name: _interval(values) for name, values in arrays.items()},
        "best_causal": best,
        "gap_clairvoyant_minus_best_causal": _interval(arrays[CLAIRVOYANT] - arrays[best]),
        "present_minus_best_causal": _interval(arrays[PRESENT] - arrays[best]),
        "clairvoyant_minus_present": _interval(arrays[CLAIRVOYANT] - arrays[PRESENT]),
        "per_episode_returns": returns,
        "seconds": time.perf_counter() - started,
    }


def measure_variants(names: list[str], episodes: int, first_seed: int) -> dict[str, Any]:
    seeds = list(range(first_seed, first_seed + episodes))
    base = {"traces": "test", "trace_jitter": 0.0}
    results = {}
    for name in names:
        results[name] = measure_variant({**base, **VARIANTS[name]}, seeds)
        gap = results[name]["gap_clairvoyant_minus_best_causal"]
        print(f"{name}: best causal {results[name]['best_causal']}, gap {_difference_cell(gap)} "
              f"({results[name]['seconds']:.0f} s)", flush=True)
    return {
        "episodes": episodes,
        "first_seed": first_seed,
        "traces": "test",
        "causal_controllers": list(CAUSAL_CONTROLLERS),
        "causal_tuning": "tuned on today's env (tuned_baselines.json), not re-tuned for any variant; "
        "the joint controllers' reward model is told the variant's keyframe size",
        "tuned_parameters": {name: load_tuned()[name] for name in CAUSAL_CONTROLLERS},
        "variants": results,
    }


def add_changes_from_today(result: dict[str, Any], today: str = "today (all off)") -> None:
    """Add each variant's paired change from `today` (same seeds, same traces): of the gap, of the
    best causal controller's return and of the clairvoyant's (nothing if `today` was not measured)."""
    if today not in result["variants"]:
        return
    base = {name: np.array(values) for name, values in result["variants"][today]["per_episode_returns"].items()}
    base_gap = base[CLAIRVOYANT] - base[result["variants"][today]["best_causal"]]
    for measured in result["variants"].values():
        returns = {name: np.array(values) for name, values in measured["per_episode_returns"].items()}
        best = measured["best_causal"]
        measured["change_from_today"] = {
            "gap": _interval(returns[CLAIRVOYANT] - returns[best] - base_gap),
            "best_causal": _interval(returns[best] - base[best]),
            "clairvoyant": _interval(returns[CLAIRVOYANT] - base[CLAIRVOYANT]),
        }


def markdown_table(result: dict[str, Any]) -> str:
    """One row per variant: each controller's return, the references', and the paired gaps."""
    names = [*CAUSAL_CONTROLLERS, PRESENT, CLAIRVOYANT]
    lines = [
        "| variant | " + " | ".join(names) + " | best causal | clairvoyant minus best causal "
        "| present minus best causal | clairvoyant minus present |",
        "|---|" + "---:|" * len(names) + "---|---:|---:|---:|",
    ]
    for variant, measured in result["variants"].items():
        cells = [f"{measured['returns'][name]['mean']:.1f}" for name in names]
        cells.append(measured["best_causal"])
        cells += [_difference_cell(measured[key]) for key in
                  ("gap_clairvoyant_minus_best_causal", "present_minus_best_causal", "clairvoyant_minus_present")]
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description="Measure the clairvoyant gap of each env variant on the same test-trace seeds.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--episodes", type=int, default=DEFAULT_EPISODES)
    parser.add_argument("--first-seed", type=int, default=DEFAULT_FIRST_SEED)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS), metavar="NAME")
    parser.add_argument("--json", default="docs/vr-edge-env-variants.json")
    args = parser.parse_args(argv)
    if args.episodes < 2:
        parser.error(f"--episodes must be >= 2 (a confidence interval needs two); got {args.episodes}.")
    result = measure_variants(args.variants, args.episodes, args.first_seed)
    add_changes_from_today(result)
    print(markdown_table(result))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2, allow_nan=False) + "\n")
    print(f"wrote {args.json}")
    return result


if __name__ == "__main__":
    main()
