"""The Ray backend against async and sync on one machine, and Ray's fixed cost per collect.

    python -m benchmarks.ray_vs_async --env vr_edge_costly --num-envs 16 --num-workers 2 --rounds 5

Contenders run interleaved (sync, async, ray, sync, async, ray, ...), each alive for the
whole run, and ratios are taken per round. Ray's per-collect overhead is measured
separately as the time of a ``horizon=1`` collect minus the time the same envs take to
step once in-process: the cost of shipping the policy, scheduling the actor calls and
gathering the slices, which a distributed backend pays once per collect.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import time

import numpy as np

from benchmarks.machine import machine_record
from benchmarks.workloads import get_workload
from parallel_rollouts import ParallelRolloutCollector


def _timed_collect(collector: ParallelRolloutCollector) -> float:
    start = time.perf_counter()
    collector.collect()
    return time.perf_counter() - start


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="vr_edge_costly")
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--horizon", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    import ray

    workload = get_workload(args.env)
    fns = workload.env_fns(args.num_envs)
    started_ray = not ray.is_initialized()
    if started_ray:
        ray.init(num_cpus=multiprocessing.cpu_count(), include_dashboard=False, log_to_driver=False)
    common = dict(horizon=args.horizon, seed=0, reuse_buffers=False)
    try:
        # Each Ray actor reserves one CPU, so only one Ray collector is alive at a time.
        collectors = {
            "sync": ParallelRolloutCollector(fns, workload.policy, "sync", **common),
            "async": ParallelRolloutCollector(fns, workload.policy, "async", num_workers=args.num_workers, **common),
            "ray": ParallelRolloutCollector(fns, workload.policy, "ray", num_workers=args.num_workers, **common),
        }
        try:
            for collector in collectors.values():
                collector.collect()
            seconds = {name: [] for name in collectors}
            for _ in range(args.rounds):
                for name, collector in collectors.items():
                    seconds[name].append(_timed_collect(collector))
        finally:
            for collector in collectors.values():
                collector.close()
        one_step = {
            "sync": ParallelRolloutCollector(fns, workload.policy, "sync", horizon=1, seed=0),
            "ray": ParallelRolloutCollector(fns, workload.policy, "ray", horizon=1, seed=0, num_workers=args.num_workers),
        }
        try:
            for collector in one_step.values():
                collector.collect()
            step_seconds = {name: [] for name in one_step}
            for _ in range(max(args.rounds, 10)):
                for name, collector in one_step.items():
                    step_seconds[name].append(_timed_collect(collector))
        finally:
            for collector in one_step.values():
                collector.close()
    finally:
        if started_ray:
            ray.shutdown()

    transitions = args.horizon * args.num_envs
    throughput = {name: [transitions / s for s in values] for name, values in seconds.items()}
    ratios = {
        f"{name}/sync": [throughput[name][i] / throughput["sync"][i] for i in range(args.rounds)]
        for name in ("async", "ray")
    }
    ratios["ray/async"] = [throughput["ray"][i] / throughput["async"][i] for i in range(args.rounds)]
    # Ray's fixed cost: a 1-step collect on Ray minus the same step in-process, divided across
    # the workers that step in parallel (the in-process step is serial).
    overhead = statistics.median(step_seconds["ray"]) - statistics.median(step_seconds["sync"]) / args.num_workers
    result = {
        "machine": machine_record(),
        "env": args.env,
        "num_envs": args.num_envs,
        "num_workers": args.num_workers,
        "horizon": args.horizon,
        "throughput": {n: {"median": statistics.median(v), "best": max(v)} for n, v in throughput.items()},
        "ratios": {n: {"median": statistics.median(v), "min": min(v), "max": max(v)} for n, v in ratios.items()},
        "ray_per_collect_overhead_ms": overhead * 1e3,
    }
    print(f"{args.env}, {args.num_envs} envs, {args.num_workers} workers, horizon {args.horizon}, {args.rounds} rounds")
    for name, values in throughput.items():
        print(f"  {name:<6} median {statistics.median(values):10,.0f} t/s   best {max(values):10,.0f}")
    for name, values in ratios.items():
        print(f"  {name:<10} median {statistics.median(values):.2f}x  [{min(values):.2f}, {max(values):.2f}]")
    print(f"  Ray fixed cost per collect: ~{overhead * 1e3:.1f} ms")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2, default=float)
        print(f"wrote {os.path.abspath(args.json)}")
    return result


if __name__ == "__main__":
    multiprocessing.freeze_support()
    np.set_printoptions(precision=3)
    main()
