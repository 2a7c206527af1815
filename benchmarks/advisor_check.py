"""Is the advisor right? Its recommendation against a separate, longer interleaved benchmark.

For each env (cheap, frames, costly), first ``parallel_rollouts.advise`` runs as a
user runs it (quick mode), then a separate run times the same options again:
each option's collector built once, two warm-up collects, then ``--rounds``
rounds in which every option, in a rotated order, runs a fixed number of whole
``collect()`` calls (chosen from its warm-up so that a trial lasts about
``--trial-seconds``). The verdict per env: ``winner`` when the recommendation has
the best median here too, ``within spread`` when its range of per-round rates
overlaps the winner's, else ``miss``.

    python -m benchmarks.advisor_check --out benchmarks/results/advisor_check.json
"""

from __future__ import annotations

import argparse
import time
from functools import partial
from pathlib import Path

import numpy as np

from parallel_rollouts import ParallelRolloutCollector, advise
from parallel_rollouts.conformance.advisor import _options
from parallel_rollouts.conformance.target import resolve_target
from parallel_rollouts.processes.slicing import usable_cores

from examples.atari_env import make_pong

from .envs import HalfMillisecondEnv
from .machine import format_machine_record, machine_record
from .report import write_json

__all__ = ["ENVS", "main"]


#: name -> (target given to the advisor, what it stands for)
ENVS = {
    "cheap": ("CartPole-v1", "Gymnasium CartPole-v1 (a few us per step; has a vector implementation)"),
    "frames": (make_pong, "ALE Pong, AtariPreprocessing + FrameStackObservation(4): 4x84x84 uint8 frames"),
    "costly": (partial(HalfMillisecondEnv), "HalfMillisecondEnv: ~0.5 ms of pure Python per step"),
}


def _benchmark(target, num_envs: int, horizon: int, rounds: int, trial_seconds: float) -> list[dict]:
    """The advisor's options, timed again: fixed collects per trial, interleaved rounds."""
    options = _options(resolve_target(target), num_envs, usable_cores(), False, False)
    entries = []
    collectors = []
    try:
        for option in options:
            collector = ParallelRolloutCollector(
                option.env_fns, None, option.backend, horizon, 0, **option.collector_kwargs()
            )
            collectors.append(collector)
            collector.collect()
            start = time.perf_counter()
            collector.collect()
            per_collect = time.perf_counter() - start
            collects = max(1, round(trial_seconds / max(per_collect, 1e-6)))
            entries.append({"label": option.label, "arguments": option.as_arguments(), "collects": collects, "rates": []})
        for round_index in range(rounds):
            order = list(range(len(options)))
            shift = round_index % len(order)
            for index in order[shift:] + order[:shift]:
                transitions = 0
                start = time.perf_counter()
                for _ in range(entries[index]["collects"]):
                    transitions += int(collectors[index].collect().valid.sum())
                entries[index]["rates"].append(transitions / (time.perf_counter() - start))
    finally:
        for collector in collectors:
            collector.close()
    for entry in entries:
        rates = np.asarray(entry["rates"])
        entry.update(median=float(np.median(rates)), min=float(rates.min()), max=float(rates.max()))
    return entries


def _verdict(recommended: str, entries: list[dict]) -> dict:
    winner = max(entries, key=lambda entry: entry["median"])
    chosen = next(entry for entry in entries if entry["label"] == recommended)
    ratios = np.asarray(chosen["rates"]) / np.asarray(winner["rates"])
    if chosen is winner:
        verdict = "winner"
    elif chosen["max"] >= winner["min"]:
        verdict = "within spread"
    else:
        verdict = "miss"
    return {
        "winner": winner["label"],
        "recommended": recommended,
        "verdict": verdict,
        "recommended_vs_winner_median_ratio": float(np.median(ratios)),
        "recommended_vs_winner_ratio_range": [float(ratios.min()), float(ratios.max())],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", default=",".join(ENVS), help=f"comma-separated subset of {sorted(ENVS)}")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--horizon", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--trial-seconds", type=float, default=3.0)
    parser.add_argument("--quick", action="store_true", help="a smoke run of seconds (tiny advisor and benchmark)")
    parser.add_argument("--out", type=Path, default=Path("benchmark-results/advisor_check.json"))
    args = parser.parse_args(argv)
    machine = machine_record()
    print(format_machine_record(machine), flush=True)
    advisor_settings = {"rounds": 2, "trial_seconds": 0.05} if args.quick else {}
    rounds, trial_seconds = (2, 0.05) if args.quick else (args.rounds, args.trial_seconds)
    results = {}
    for name in args.envs.split(","):
        target, description = ENVS[name]
        print(f"\n== {name}: {description}", flush=True)
        advice = advise(target, args.num_envs, horizon=args.horizon, **advisor_settings)
        print(advice, flush=True)
        entries = _benchmark(target, args.num_envs, args.horizon, rounds, trial_seconds)
        verdict = _verdict(advice.recommended.option.label, entries)
        print(f"\nseparate benchmark, {rounds} interleaved rounds (valid transitions/s):", flush=True)
        for entry in entries:
            print(
                f"  {entry['label']:<32} median {entry['median']:>9,.0f}  range {entry['min']:>9,.0f}-{entry['max']:<9,.0f}"
                f"  ({entry['collects']} collects per trial)",
                flush=True,
            )
        print(f"  verdict: {verdict['verdict']} (recommended {verdict['recommended']}, winner {verdict['winner']}, "
              f"median ratio {verdict['recommended_vs_winner_median_ratio']:.2f})", flush=True)
        results[name] = {"description": description, "advice": advice.to_dict(), "benchmark": entries, **verdict}
    settings = {"num_envs": args.num_envs, "horizon": args.horizon, "rounds": rounds, "trial_seconds": trial_seconds,
                "advisor_mode": "quick" if not args.quick else "smoke", "policy": "None (seeded action-space samples)"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json({"machine": machine, "settings": settings, "envs": results}, args.out)
    print(f"\nwrote {args.out.resolve()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
