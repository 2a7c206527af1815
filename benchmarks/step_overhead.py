"""Per-step cost of the collector against a bare loop, measured in interleaved rounds.

Each measurement runs in a fresh process (so contenders never share a warm heap)
and reports transitions per second of that process's CPU time over a few
``collect()`` calls after one warm-up (``STEP_OVERHEAD_CLOCK=wall`` for wall time). Contenders, on each workload:

``raw-loop``
    The bare Python loop of :class:`benchmarks.contenders.BareLoop`: steps the envs
    and writes preallocated arrays.
``sync``
    ``backend="sync"`` with default settings (a fresh batch per collect, which
    the caller owns; ``observation_check="warn"``).
``sync-check-off``
    The same with ``observation_check="off"``: the difference is the cost of the
    per-step observation value check.
``sync-reuse``
    ``reuse_buffers=True``.
``sync@base``
    ``backend="sync"`` with default settings, from another checkout
    (``--base PATH``, e.g. an export of an earlier commit built in place).

Rounds run every contender once, in an order that rotates each round; the
report gives per-contender median and best transitions/s and the ratios of the
medians and of the bests to ``raw-loop``. Usage::

    python -m benchmarks.step_overhead --workloads cartpole image --rounds 5 \\
        --base /tmp/base --out benchmarks/results/step_overhead.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONTENDERS = ("raw-loop", "sync", "sync-check-off", "sync-reuse")


def _measure(code_root: str, contender: str, workload_name: str, num_envs: int, horizon: int, collects: int) -> float:
    """Transitions per second of one contender (runs in its own process)."""
    sys.path.insert(0, code_root)
    from benchmarks.contenders import BareLoop
    from benchmarks.workloads import get_workload
    from parallel_rollouts import ParallelRolloutCollector

    workload = get_workload(workload_name)
    if contender == "raw-loop":
        runner = BareLoop(workload, num_envs, horizon, seed=0)
        collect = runner.collect
    else:
        options = {}
        if contender == "sync-check-off":
            options["observation_check"] = "off"
        if contender == "sync-reuse":
            options["reuse_buffers"] = True
        collector = ParallelRolloutCollector(
            workload.env_fns(num_envs), workload.policy, backend="sync", horizon=horizon, seed=0, **options
        )
        batches: list = []

        def collect() -> int:
            # As a training loop holds it: the previous batch is alive while the next is collected.
            batches[:] = [collector.collect()]
            return horizon * num_envs

    # Warm-up: the raw loop preallocates its arrays in its constructor; the collector's
    # batches are recycled from the third collect on (the caller holds one batch while
    # the next is collected), so two untimed collects reach the steady state.
    collect()
    collect()
    # CPU time of this process: on a shared machine, time other processes take is not ours.
    clock = time.process_time if os.environ.get("STEP_OVERHEAD_CLOCK", "process") == "process" else time.perf_counter
    start = clock()
    transitions = sum(collect() for _ in range(collects))
    return transitions / (clock() - start)


def _run_one(code_root: str, contender: str, args: argparse.Namespace, workload: str) -> float:
    command = [
        sys.executable, "-m", "benchmarks.step_overhead", "--measure", contender, "--code-root", code_root,
        "--workloads", workload, "--num-envs", str(args.num_envs), "--horizon", str(args.horizon),
        "--collects", str(args.collects),
    ]
    environment = dict(os.environ, PYTHONPATH=code_root)
    output = subprocess.run(command, check=True, capture_output=True, text=True, cwd=code_root, env=environment)
    return float(output.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", nargs="+", default=["cartpole", "image"])
    parser.add_argument("--contenders", nargs="+", default=list(CONTENDERS))
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--horizon", type=int, default=128)
    parser.add_argument("--collects", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--base", default=None, help="another checkout to run `sync@base` from")
    parser.add_argument("--out", default=None)
    parser.add_argument("--measure", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--code-root", default=str(REPO), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(_measure(args.code_root, args.measure, args.workloads[0], args.num_envs, args.horizon, args.collects))
        return

    runs = [(name, str(REPO), name) for name in args.contenders]
    if args.base:
        runs.append(("sync@base", str(Path(args.base).resolve()), "sync"))
    report = {
        "num_envs": args.num_envs, "horizon": args.horizon, "collects_per_measurement": args.collects,
        "rounds": args.rounds, "cpu_count": os.cpu_count(), "workloads": {},
    }
    for workload in args.workloads:
        samples: dict[str, list[float]] = {label: [] for label, _, _ in runs}
        for round_index in range(args.rounds):
            shift = round_index % len(runs)
            for label, code_root, contender in runs[shift:] + runs[:shift]:
                samples[label].append(_run_one(code_root, contender, args, workload))
            print(workload, round_index, {k: round(v[-1]) for k, v in samples.items()}, flush=True)
        bare_median = statistics.median(samples["raw-loop"]) if "raw-loop" in samples else None
        bare_best = max(samples["raw-loop"]) if "raw-loop" in samples else None
        summary = {}
        for label, values in samples.items():
            entry = {"samples": values, "median": statistics.median(values), "best": max(values)}
            if bare_median:
                entry["median_ratio_to_raw_loop"] = entry["median"] / bare_median
                entry["best_ratio_to_raw_loop"] = entry["best"] / bare_best
            # Per-round ratios to the raw loop of the same round: robust to load drifting between rounds.
            if "raw-loop" in samples:
                entry["median_of_round_ratios"] = statistics.median(
                    value / bare for value, bare in zip(values, samples["raw-loop"])
                )
            summary[label] = entry
        report["workloads"][workload] = summary
        for label, entry in summary.items():
            print(
                f"{workload:10s} {label:16s} median {entry['median']:9.0f}/s  best {entry['best']:9.0f}/s  "
                f"ratio median {entry.get('median_ratio_to_raw_loop', 0):.3f} best {entry.get('best_ratio_to_raw_loop', 0):.3f} "
                f"per-round {entry.get('median_of_round_ratios', 0):.3f}"
            )
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
