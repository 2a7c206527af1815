"""What the per-env timing (``batch.env_step_seconds``, ``env_reset_seconds``) costs on sync CartPole.

Two checkouts are compared, interleaved: this one (timing always on) and a base checkout
without timing (``--base``, a source tree with its extension built in place). Each round runs
one fresh process per checkout, in alternating order, each measuring CPU time per transition
(``time.process_time``, which drifts less than wall time on a shared machine) over a few
collects of 16 ``CartPole-v1`` envs, ``backend="sync"``, the compiled core. The overhead is the
ratio timed / base, per round; the median and spread of the rounds are reported.

    python benchmarks/env_timing_overhead.py --base /path/to/base/checkout --rounds 9
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

MEASURE = """
import json, time
from functools import partial
import gymnasium as gym
import numpy as np
import parallel_rollouts
from parallel_rollouts import ParallelRolloutCollector

def policy(observations):
    return (observations[:, 2] > 0).astype(np.int64)

assert parallel_rollouts.active_core() == "compiled", parallel_rollouts.active_core()
fns = [partial(gym.make, "CartPole-v1")] * {num_envs}
with ParallelRolloutCollector(fns, policy, "sync", horizon={horizon}, seed=0) as collector:
    collector.collect()
    started = time.process_time()
    transitions = 0
    for _ in range({collects}):
        transitions += collector.collect().num_transitions
    print(json.dumps({{"cpu_us_per_transition": (time.process_time() - started) / transitions * 1e6,
                      "package": parallel_rollouts.__file__}}))
"""


def measure(checkout: Path, num_envs: int, horizon: int, collects: int) -> dict:
    code = MEASURE.format(num_envs=num_envs, horizon=horizon, collects=collects)
    environment = {**os.environ, "PYTHONPATH": str(checkout)}
    output = subprocess.run(
        [sys.executable, "-c", code], cwd=checkout, env=environment, capture_output=True, text=True, check=True
    ).stdout
    result = json.loads(output.strip().splitlines()[-1])
    if not result["package"].startswith(str(checkout)):
        raise RuntimeError(f"{checkout} imported the package from {result['package']}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="a checkout without per-env timing, built in place")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--horizon", type=int, default=512)
    parser.add_argument("--collects", type=int, default=6)
    parser.add_argument("--out", type=Path, default=HERE / "benchmarks" / "results" / "env_timing_overhead.json")
    args = parser.parse_args()
    contenders = {"timed": HERE, "base": args.base.resolve()}
    rounds = []
    for number in range(args.rounds):
        order = ["timed", "base"] if number % 2 == 0 else ["base", "timed"]
        row = {name: measure(contenders[name], args.num_envs, args.horizon, args.collects)["cpu_us_per_transition"] for name in order}
        row["ratio"] = row["timed"] / row["base"]
        rounds.append(row)
        print(f"round {number}: timed {row['timed']:.3f} us, base {row['base']:.3f} us, ratio {row['ratio']:.4f}", flush=True)
    ratios = [row["ratio"] for row in rounds]
    summary = {
        "what": "CPU time per transition, sync backend, compiled core, CartPole-v1, timed checkout / base checkout",
        "num_envs": args.num_envs,
        "horizon": args.horizon,
        "collects_per_round": args.collects,
        "rounds": rounds,
        "median_ratio": statistics.median(ratios),
        "min_ratio": min(ratios),
        "max_ratio": max(ratios),
        "median_timed_us": statistics.median(row["timed"] for row in rounds),
        "median_base_us": statistics.median(row["base"] for row in rounds),
    }
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({key: value for key, value in summary.items() if key != "rounds"}, indent=2))


if __name__ == "__main__":
    main()
