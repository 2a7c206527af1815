"""Soak run of the async backend: does the process tree hold memory or descriptors it should free?

Runs ``--collects`` collects (each returning a fresh batch, the default) and
samples the resident memory (RSS) and the open file descriptors summed over the
whole process tree: this process, the async workers and multiprocessing's
helper processes. The baseline is taken after the first collect, once buffers,
workers and lazy imports exist; then every ``--sample-every`` collects and at
the end. Exits with status 1 when the end exceeds the baseline by more than the
tolerances: RSS by more than ``max(--rss-tolerance-mb, --rss-tolerance-fraction
x baseline)``, descriptors by more than ``--fd-tolerance`` (0). Linux and macOS.

    python -m benchmarks.soak --collects 1000 [--env cartpole] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing
import sys
import time
from pathlib import Path

import psutil

from parallel_rollouts import ParallelRolloutCollector

from .report import format_machine_record, machine_record, write_json
from .workloads import get_workload

SOAK_WORKLOADS = ("cartpole", "vr_edge_cheap")
MEGABYTE = 2**20


def tree_usage() -> dict[str, int]:
    """RSS bytes, open descriptors and process count summed over this process and its descendants."""
    root = psutil.Process()
    rss = fds = count = 0
    for process in [root] + root.children(recursive=True):
        try:
            rss += process.memory_info().rss
            fds += process.num_fds()
            count += 1
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue  # a process that exited between listing and reading holds nothing
    return {"rss_bytes": rss, "fds": fds, "processes": count}


def _sample(collects_done: int, started: float) -> dict:
    # Cyclic garbage is freed when the garbage collector gets to it; only what survives a
    # full collection can be a leak.
    gc.collect()
    usage = tree_usage()
    return {"collects": collects_done, "elapsed_s": time.perf_counter() - started, **usage}


def _format_sample(sample: dict) -> str:
    return (
        f"after {sample['collects']:>6} collects ({sample['elapsed_s']:7.1f} s): "
        f"RSS {sample['rss_bytes'] / MEGABYTE:8.1f} MB, {sample['fds']:4d} fds, "
        f"{sample['processes']} processes"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.soak",
        description="Many async collects; fail if the process tree's memory or descriptors grow.",
    )
    parser.add_argument("--collects", type=int, default=1000, help="collects to run (default 1000)")
    parser.add_argument("--env", choices=SOAK_WORKLOADS, default="cartpole", help="workload (default cartpole)")
    parser.add_argument("--num-envs", type=int, default=4, help="envs (default 4)")
    parser.add_argument("--num-workers", type=int, default=2, help="async workers (default 2)")
    parser.add_argument("--horizon", type=int, default=32, help="steps per env per collect (default 32)")
    parser.add_argument("--sample-every", type=int, default=100, help="collects between samples (default 100)")
    parser.add_argument("--seed", type=int, default=0, help="root seed (default 0)")
    parser.add_argument("--rss-tolerance-mb", type=float, default=20.0, help="allowed RSS growth in MB (default 20)")
    parser.add_argument(
        "--rss-tolerance-fraction", type=float, default=0.10, help="allowed RSS growth as a fraction (default 0.10)"
    )
    parser.add_argument("--fd-tolerance", type=int, default=0, help="allowed descriptor growth (default 0)")
    parser.add_argument("--json", type=Path, help="write the samples and verdict as JSON to this path")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    for option in ("collects", "num_envs", "num_workers", "horizon", "sample_every"):
        if getattr(args, option) < 1:
            parser.error(f"--{option.replace('_', '-')} must be >= 1; got {getattr(args, option)!r}.")
    workload = get_workload(args.env)
    samples = []
    started = time.perf_counter()
    with ParallelRolloutCollector(
        workload.env_fns(args.num_envs),
        workload.policy,
        backend="async",
        horizon=args.horizon,
        seed=args.seed,
        num_workers=args.num_workers,
    ) as collector:
        for collects_done in range(1, args.collects + 1):
            collector.collect()
            if collects_done == 1 or collects_done % args.sample_every == 0 or collects_done == args.collects:
                samples.append(_sample(collects_done, started))
                print(_format_sample(samples[-1]), flush=True)

    # Recorded after the run: it may import PyTorch, whose memory would otherwise swell the
    # baseline and with it the fractional RSS tolerance.
    machine = machine_record()
    print("\n" + format_machine_record(machine))

    baseline, end = samples[0], samples[-1]
    rss_growth = end["rss_bytes"] - baseline["rss_bytes"]
    rss_allowed = max(args.rss_tolerance_mb * MEGABYTE, args.rss_tolerance_fraction * baseline["rss_bytes"])
    fd_growth = end["fds"] - baseline["fds"]
    verdict = {
        "rss_growth_mb": rss_growth / MEGABYTE,
        "rss_allowed_mb": rss_allowed / MEGABYTE,
        "fd_growth": fd_growth,
        "fd_allowed": args.fd_tolerance,
        "rss_ok": rss_growth <= rss_allowed,
        "fds_ok": fd_growth <= args.fd_tolerance,
    }
    verdict["passed"] = verdict["rss_ok"] and verdict["fds_ok"]
    print(
        f"\nRSS grew {verdict['rss_growth_mb']:+.1f} MB (allowed {verdict['rss_allowed_mb']:.1f} MB), "
        f"fds {fd_growth:+d} (allowed {args.fd_tolerance:+d}): {'PASS' if verdict['passed'] else 'FAIL'}"
    )
    if args.json:
        settings = {key: value for key, value in vars(args).items() if key != "json"}
        write_json({"machine": machine, "settings": settings, "samples": samples, "verdict": verdict}, args.json)
        print(f"wrote {args.json.resolve()}")
    return 0 if verdict["passed"] else 1


if __name__ == "__main__":
    multiprocessing.freeze_support()
    sys.exit(main())
