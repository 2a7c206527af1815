"""PPO with collection overlapping the update (``max_policy_lag=1``) against the turn-taking loop.

Run: ``python -m examples.overlap_ppo.compare [--workloads CartPole-v1,frames,half_ms] [--rounds 7]
[--timesteps 30000] [--output PATH]`` (default ``benchmark-results/overlap_ppo.json``, which git
ignores; the stored runs are in ``benchmarks/results/overlap_ppo_*.json``)

Each round trains ``examples.overlap_ppo.train`` twice on one workload with the same seed (the
round's number), once with the lag off and once on, in alternating order (the benchmarks'
interleaved-rounds harness, ``parallel_rollouts.conformance.rounds``); the speed-up is the
ratio of the two training loops' wall times within the round (starting the workers excluded) (median, min and max over the rounds), and the
learning is compared as each run's mean return over its last 20 episodes. The lag-0 runs also
give the split the bound is taken from: the time spent waiting for batches (collection: C) and
in the update (U), and the CPU seconds each keeps busy (this process's threads and its worker
processes): overlapping them can at best turn ``C + U`` into ``max(C, U, busy seconds / cores)``;
where a phase already keeps every core busy, there is nothing to overlap it with. ``--quick``
is a seconds-long smoke run.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from examples.overlap_ppo.train import Args, train
from benchmarks.report import format_machine_record, machine_record, parse_names, write_json
from parallel_rollouts.conformance.rounds import run_rounds, summarize_ratios
from parallel_rollouts.processes.slicing import usable_cores

WORKLOADS = ("CartPole-v1", "frames", "half_ms")


def run_workload(name: str, rounds: int, timesteps: int, **overrides) -> dict:
    """``rounds`` interleaved pairs of runs on workload ``name``: the runs and their summary."""

    def measure(lag: int) -> dict:
        # Each lag's k-th run (round k) trains with seed k: the pair of a round shares its seed.
        seed = len(measured.setdefault(lag, []))
        measured[lag].append(seed)
        return train(Args(env=name, max_policy_lag=lag, seed=seed, total_timesteps=timesteps, log_every=0, **overrides))

    measured: dict[int, list[int]] = {}
    turns, overlapped = run_rounds([0, 1], measure, rounds, order="alternate").samples
    collection = [run["waiting_for_batches_seconds"] for run in turns]
    update = [run["update_seconds"] for run in turns]
    work = [run["collection_cpu_seconds"] + run["update_cpu_seconds"] for run in turns]
    cores = usable_cores()
    # Overlapped, a run takes at least its collection, its update, and its busy core-seconds
    # spread over every core: turn-taking already keeps the cores busy wherever a phase uses
    # more than one of them.
    bounds = [(c + u) / max(c, u, w / cores) for c, u, w in zip(collection, update, work)]
    return {
        "workload": name,
        "runs": {"lag 0": turns, "lag 1": overlapped},
        "speedup": summarize_ratios([run["loop_seconds"] for run in turns], [run["loop_seconds"] for run in overlapped]),
        "turn_taking_split": {
            "collection_share_median": statistics.median(c / (c + u) for c, u in zip(collection, update)),
            "collection_cores_median": statistics.median(run["collection_cpu_seconds"] / run["waiting_for_batches_seconds"] for run in turns),
            "update_cores_median": statistics.median(run["update_cpu_seconds"] / run["update_seconds"] for run in turns),
            "bound_median": statistics.median(bounds),
            "bound_without_core_limit_median": statistics.median((c + u) / max(c, u) for c, u in zip(collection, update)),
        },
        "seconds_per_100k_steps_median": {
            "lag 0": statistics.median(run["seconds_per_100k_steps"] for run in turns),
            "lag 1": statistics.median(run["seconds_per_100k_steps"] for run in overlapped),
        },
        "final_return": {
            "lag 0": [run["final_return"] for run in turns],
            "lag 1": [run["final_return"] for run in overlapped],
        },
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--timesteps", type=int, default=30_000)
    parser.add_argument("--backend", default="async")
    parser.add_argument("--policy-placement", default="workers")
    parser.add_argument("--torch-threads", type=int, default=1, help="PyTorch's threads in both runs (0: its default)")
    parser.add_argument("--update-epochs", type=int, default=Args.update_epochs, help="PPO's passes over each batch")
    parser.add_argument("--output", type=Path, default=Path("benchmark-results/overlap_ppo.json"))
    parser.add_argument("--quick", action="store_true", help="a smoke run of seconds")
    options = parser.parse_args(argv)
    record = machine_record()
    print(format_machine_record(record), flush=True)
    rounds, timesteps = (2, 512) if options.quick else (options.rounds, options.timesteps)
    extra = dict(num_steps=64, num_envs=4) if options.quick else {}
    results = []
    for name in parse_names(options.workloads, WORKLOADS, "--workloads"):
        result = run_workload(
            name, rounds, timesteps, backend=options.backend, policy_placement=options.policy_placement,
            torch_threads=options.torch_threads, update_epochs=options.update_epochs, **extra
        )
        speedup, split = result["speedup"], result["turn_taking_split"]
        print(
            f"{name}: lag 1 / lag 0 speed {speedup['median']:.2f}x (min {speedup['min']:.2f}, max {speedup['max']:.2f}) "
            f"over {rounds} rounds; turn-taking spends {split['collection_share_median']:.0%} collecting (on "
            f"{split['collection_cores_median']:.1f} cores; updating on {split['update_cores_median']:.1f}), bound "
            f"{split['bound_median']:.2f}x ({split['bound_without_core_limit_median']:.2f}x with a core per phase); final returns lag 0 {result['final_return']['lag 0']}, lag 1 "
            f"{result['final_return']['lag 1']}",
            flush=True,
        )
        results.append(result)
    report = {"machine": record, "rounds": rounds, "timesteps": timesteps, "backend": options.backend,
              "policy_placement": options.policy_placement, "torch_threads": options.torch_threads,
              "update_epochs": options.update_epochs, "workloads": results}
    write_json(report, options.output)
    print(f"wrote {options.output.resolve()}")
    return report


if __name__ == "__main__":
    main()
