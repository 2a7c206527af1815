"""Rollout throughput: one backend on one workload, or ``--compare`` everything interleaved.

One backend (timed collects after untimed warm-up collects)::

    python -m benchmarks.run_rollout_benchmark --backend async --num-envs 4 --env vr_edge_cheap

The comparison (every backend and core against hand-written loops; see ``compare``)::

    python -m benchmarks.run_rollout_benchmark --compare --envs cartpole,half_ms,image \\
        --num-envs-list 4,16 --num-workers 2 --plot
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from pathlib import Path

from parallel_rollouts import ParallelRolloutCollector

from .cli import parse_counts, parse_names
from .compare import ComparisonSettings, run_comparison
from .contenders import COLLECTOR_CONTENDERS, HEADLINE_CONTENDERS, PEER_CONTENDERS

BACKENDS = ("serial", "sync", "async")
ALL_CONTENDERS = tuple(COLLECTOR_CONTENDERS) + PEER_CONTENDERS
from .machine import format_machine_record, machine_record
from .report import ceiling_rows, comparison_markdown, format_group_table, plot_throughput, target_rows, write_json
from .summary import summarize_throughputs
from .workloads import WORKLOADS, get_workload

# Relative to the working directory and untracked, so that a run never overwrites the
# results committed in benchmarks/results/; pass `--out benchmarks/results` to refresh those.
DEFAULT_RESULTS_DIR = Path("benchmark-results")

# Settings left unset on the command line take these values; --quick swaps in the second
# set, sized for a CI smoke run of seconds.
FULL_DEFAULTS = {
    "horizon": 128, "repeats": 5, "rounds": 7, "warmup_seconds": 1.0, "envs": "cartpole,half_ms,image",
    "num_envs_list": "4,16",
}
QUICK_DEFAULTS = {
    "horizon": 8, "repeats": 2, "rounds": 2, "warmup_seconds": 0.0, "envs": "cartpole", "num_envs_list": "2",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run_rollout_benchmark",
        description="Transitions per second of rollout collection; --compare runs every "
        "backend and core against hand-written loops, interleaved.",
    )
    parser.add_argument("--backend", choices=BACKENDS, default="sync", help="single mode: the backend (default sync)")
    parser.add_argument("--num-envs", type=int, default=4, help="single mode: number of envs (default 4)")
    parser.add_argument("--env", choices=sorted(WORKLOADS), default="vr_edge_cheap", help="single mode: the workload")
    parser.add_argument("--core", choices=("auto", "compiled", "python"), default="auto", help="single mode: per-step core")
    parser.add_argument("--repeats", type=int, help="single mode: timed collects after the warm-up (default 5)")
    parser.add_argument(
        "--warmup", type=int, default=2, help="untimed collects before timing, per contender (default 2)"
    )
    parser.add_argument(
        "--warmup-seconds",
        type=float,
        help="comparison mode: warm each contender up for at least this long as well (default 1.0; quick: 0)",
    )
    parser.add_argument("--horizon", type=int, help="steps per env per collect (default 128)")
    parser.add_argument("--num-workers", type=int, help="async backend worker count (default: the collector's)")
    parser.add_argument("--seed", type=int, default=0, help="root seed of every contender (default 0)")
    parser.add_argument(
        "--reuse-buffers",
        action="store_true",
        help="single mode: reuse_buffers=True (every collect overwrites the same arrays); the default is "
        "the collector's default, a fresh batch per collect",
    )
    parser.add_argument(
        "--policy-placement", choices=("main", "workers"), help="single mode, async: where the policy runs"
    )
    parser.add_argument("--pipelined", action="store_true", help="single mode, async: pipelined=True")
    parser.add_argument("--json", type=Path, help="write the result as JSON to this path")
    parser.add_argument("--quick", action="store_true", help="tiny sizes for a CI smoke run")
    compare = parser.add_argument_group("comparison mode")
    compare.add_argument("--compare", action="store_true", help="run the interleaved comparison")
    compare.add_argument("--envs", help="workloads, comma-separated (default cartpole,half_ms,image)")
    compare.add_argument("--num-envs-list", help="env counts, comma-separated (default 4,16)")
    compare.add_argument("--rounds", type=int, help="timed rounds per group (default 7)")
    compare.add_argument(
        "--contenders",
        default=",".join(HEADLINE_CONTENDERS),
        help=f"contenders, comma-separated, from {', '.join(ALL_CONTENDERS)} (default: {','.join(HEADLINE_CONTENDERS)})",
    )
    compare.add_argument("--out", type=Path, default=DEFAULT_RESULTS_DIR, help="directory for comparison.{json,md,png} (default ./benchmark-results)")
    compare.add_argument("--plot", action="store_true", help="also draw throughput against number of envs")
    return parser


def _resolve_defaults(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    defaults = QUICK_DEFAULTS if args.quick else FULL_DEFAULTS
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    try:
        args.envs = parse_names(args.envs, WORKLOADS, "--envs")
        args.num_envs_list = parse_counts(args.num_envs_list, "--num-envs-list")
        args.contenders = parse_names(args.contenders, ALL_CONTENDERS, "--contenders")
    except argparse.ArgumentTypeError as error:
        parser.error(str(error))
    for option in ("horizon", "repeats", "rounds", "num_envs"):
        if getattr(args, option) < 1:
            parser.error(f"--{option.replace('_', '-')} must be >= 1; got {getattr(args, option)!r}.")
    if args.warmup < 0:
        parser.error(f"--warmup must be >= 0; got {args.warmup!r}.")
    if args.warmup_seconds < 0:
        parser.error(f"--warmup-seconds must be >= 0; got {args.warmup_seconds!r}.")
    if not args.compare and args.backend != "async":
        for option in ("num_workers", "policy_placement", "pipelined"):
            if getattr(args, option):
                parser.error(f"--{option.replace('_', '-')} applies to --backend async only; got --backend {args.backend}.")


def run_single(args: argparse.Namespace) -> dict:
    """Time ``args.repeats`` collects of one collector after ``args.warmup`` untimed ones."""
    workload = get_workload(args.env)
    async_options = {}
    if args.backend == "async":
        async_options = {"num_workers": args.num_workers, "policy_placement": args.policy_placement, "pipelined": args.pipelined}
    collector = ParallelRolloutCollector(
        workload.env_fns(args.num_envs),
        workload.policy,
        backend=args.backend,
        horizon=args.horizon,
        seed=args.seed,
        core=args.core,
        reuse_buffers=args.reuse_buffers,
        **async_options,
    )
    with collector:
        for _ in range(args.warmup):
            collector.collect()
        durations = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            collector.collect()
            durations.append(time.perf_counter() - start)
        core = collector.core
    transitions = args.horizon * args.num_envs
    return {
        "settings": {
            "env": workload.name,
            "description": workload.description,
            "backend": args.backend,
            "core": core,
            "num_envs": args.num_envs,
            "num_workers": args.num_workers,
            "horizon": args.horizon,
            "repeats": args.repeats,
            "warmup_collects": args.warmup,
            "seed": args.seed,
            "reuse_buffers": args.reuse_buffers,
            "policy_placement": args.policy_placement,
            "pipelined": args.pipelined,
        },
        "result": {
            "transitions_per_collect": transitions,
            "seconds_per_collect": durations,
            "transitions_per_s": summarize_throughputs([transitions / elapsed for elapsed in durations]),
        },
    }


def _format_single(report: dict) -> str:
    settings, rates = report["settings"], report["result"]["transitions_per_s"]
    return (
        f"{settings['env']}: backend={settings['backend']} core={settings['core']} "
        f"num_envs={settings['num_envs']} horizon={settings['horizon']} repeats={settings['repeats']}\n"
        f"transitions/s: median {rates['median']:,.0f}  min {rates['min']:,.0f}  max {rates['max']:,.0f}  "
        f"best-of {rates['best']:,.0f}  spread {rates['spread']:.2f}x"
    )


def run_compare(args: argparse.Namespace, machine: dict) -> dict:
    settings = ComparisonSettings(
        workloads=args.envs,
        num_envs_list=args.num_envs_list,
        horizon=args.horizon,
        rounds=args.rounds,
        seed=args.seed,
        contenders=args.contenders,
        num_workers=args.num_workers,
        warmup_collects=args.warmup,
        warmup_seconds=args.warmup_seconds,
    )
    load_before = os.getloadavg()
    result = {"machine": machine, **run_comparison(settings, progress=lambda line: print(line, flush=True))}
    # Other programs' load while this ran (1, 5, 15-minute averages): with more runnable processes
    # than cores, multi-process contenders get less than their share and wall-time ratios move.
    result["load_average"] = {"before": load_before, "after": os.getloadavg()}
    for group in result["groups"]:
        print("\n" + format_group_table(group), flush=True)
    result["targets"] = target_rows(result)
    result["ceilings"] = ceiling_rows(result)
    for row in result["targets"]:
        verdict = "met" if row["met"] else "MISSED"
        print(f"target {row['label']}: {row['median']:.2f}x [{row['min']:.2f}, {row['max']:.2f}] "
              f"(at least {row['target']:.2f}x) {verdict}", flush=True)
    for row in result["ceilings"]:
        print(f"context {row['label']}: {row['median']:.2f}x [{row['min']:.2f}, {row['max']:.2f}]", flush=True)
    json_path = args.json or args.out / "comparison.json"
    write_json(result, json_path)
    markdown_path = args.out / "comparison.md"
    markdown_path.parent.mkdir(parents=True, exist_ok=True)
    markdown_path.write_text(comparison_markdown(result), encoding="utf-8")
    written = [json_path, markdown_path]
    if args.plot:
        plot_path = args.out / "comparison.png"
        plot_throughput(result, plot_path)
        written.append(plot_path)
    print("\nwrote " + ", ".join(str(path.resolve()) for path in written))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _resolve_defaults(args, parser)
    machine = machine_record()
    print(format_machine_record(machine) + "\n", flush=True)
    if args.compare:
        run_compare(args, machine)
        return 0
    report = {"machine": machine, **run_single(args)}
    print(_format_single(report))
    if args.json:
        write_json(report, args.json)
        print(f"wrote {args.json.resolve()}")
    return 0


if __name__ == "__main__":
    multiprocessing.freeze_support()
    sys.exit(main())
