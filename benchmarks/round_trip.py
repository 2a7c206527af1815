"""The async backend's per-step round trip: what waking the workers and waiting for them costs a step.

    python -m benchmarks.round_trip --num-envs 16 --num-workers 2 --work-us 0,10,50 [--json PATH]

Each env's step burns about ``work_us`` microseconds of pure-Python arithmetic
(``HalfMillisecondEnv`` with a scaled burn count; 0 leaves its few microseconds of
bookkeeping). For each work size, ``sync``, ``async`` (the policy here, one round trip
per step) and ``async/workers`` (the policy in the workers, one exchange per collect)
collect ``horizon`` steps in interleaved rounds. Reported per round, then median [min, max]:
microseconds per step of each, and the round trip ``h = async - sync / W``, the part of an
async step that is not a worker's share of the envs' work. With ``N`` envs and per-env cost
``c``, async beats sync when ``N * c * (1 - 1/W) > h`` (``docs/benchmarks.md``).
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import statistics
import sys
import time
from pathlib import Path

from parallel_rollouts import ParallelRolloutCollector
from parallel_rollouts.conformance.rounds import DEFAULT_ROUNDS, run_rounds

from .envs import BURN_ITERATIONS, HalfMillisecondEnv
from .report import format_machine_record, machine_record, write_json
from .workloads import sign_policy

__all__ = ["MODES", "main", "measure"]

#: Collector settings per mode.
MODES = {
    "sync": {"backend": "sync"},
    "async": {"backend": "async"},
    "async/workers": {"backend": "async", "policy_placement": "workers"},
}
# HalfMillisecondEnv burns BURN_ITERATIONS in about 500 us on the 2-core development machine.
ITERATIONS_PER_US = BURN_ITERATIONS / 500


def _step_seconds(collector: ParallelRolloutCollector) -> float:
    start = time.perf_counter()
    collector.collect()
    return (time.perf_counter() - start) / collector.horizon


def measure(work_us: int, num_envs: int, num_workers: int, horizon: int, rounds: int, warmup: int = 2) -> dict:
    """One work size: every mode's µs per step and the round trip, per round and summarized."""
    factory = functools.partial(HalfMillisecondEnv, episode_length=200, burn_iterations=round(work_us * ITERATIONS_PER_US))
    collectors = []
    try:
        for options in MODES.values():
            workers = {"num_workers": num_workers} if options["backend"] == "async" else {}
            collectors.append(
                ParallelRolloutCollector([factory] * num_envs, sign_policy, horizon=horizon, seed=0, **options, **workers)
            )
            for _ in range(warmup):
                collectors[-1].collect()
        measured = run_rounds(collectors, _step_seconds, rounds, order="rotate")
    finally:
        for collector in collectors:
            collector.close()
    per_step = {mode: [s * 1e6 for s in samples] for mode, samples in zip(MODES, measured.samples)}
    round_trip = [a - s / num_workers for a, s in zip(per_step["async"], per_step["sync"])]
    summary = {mode: _summary(values) for mode, values in per_step.items()}
    return {"work_us": work_us, "us_per_step": summary, "round_trip_us": _summary(round_trip)}


def _summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "per_round": values}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.round_trip", description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--horizon", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    parser.add_argument("--warmup", type=int, default=2, help="untimed collects per mode (default 2)")
    parser.add_argument("--work-us", default="0,10,50", help="per-env step work in µs, comma-separated")
    parser.add_argument("--json", type=Path, help="write the result as JSON to this path")
    args = parser.parse_args(argv)
    try:
        work_sizes = tuple(int(value) for value in args.work_us.split(","))
    except ValueError:
        work_sizes = (-1,)
    if min(work_sizes) < 0:
        parser.error(f"--work-us takes integers >= 0 like 0,10,50; got {args.work_us!r}.")
    for option in ("num_envs", "num_workers", "horizon", "rounds"):
        if getattr(args, option) < 1:
            parser.error(f"--{option.replace('_', '-')} must be >= 1; got {getattr(args, option)!r}.")
    machine = machine_record()
    print(format_machine_record(machine) + "\n", flush=True)
    results = []
    for work_us in work_sizes:
        entry = measure(work_us, args.num_envs, args.num_workers, args.horizon, args.rounds, args.warmup)
        results.append(entry)
        cells = ", ".join(f"{mode} {entry['us_per_step'][mode]['median']:.1f}" for mode in MODES)
        trip = entry["round_trip_us"]
        print(f"work {work_us} us/env: µs per step {cells}; round trip {trip['median']:.1f} "
              f"[{trip['min']:.1f}, {trip['max']:.1f}]", flush=True)
    report = {
        "machine": machine,
        "settings": {"num_envs": args.num_envs, "num_workers": args.num_workers, "horizon": args.horizon,
                     "rounds": args.rounds, "warmup": args.warmup},
        "results": results,
    }
    if args.json:
        write_json(report, args.json)
        print(f"wrote {args.json.resolve()}")
    return 0


if __name__ == "__main__":
    multiprocessing.freeze_support()
    sys.exit(main())
