"""What the per-env timing (``batch.env_step_seconds``, ``env_reset_seconds``) costs on sync CartPole.

CPU time per transition (``time.process_time``, which drifts less than wall time on a shared
machine) of 16 ``CartPole-v1`` envs, ``backend="sync"``, the compiled core, two ways:

- ``--mode inprocess`` (default): two collectors in one process, collects alternating, one
  as shipped and one whose groups skip the clock (their core stepper is built without a timing
  array, which skips both clock reads, and their resets are not timed). Many short rounds, one
  ratio per round.
- ``--mode checkouts --base DIR``: this checkout against a base source tree without timing
  (its extension built in place), one fresh process per checkout and round, in alternating
  order.

- ``--mode kernel``: the compiled ``EnvStepper.step`` alone over 16 envs whose ``step`` returns
  a constant, with and without a timing array, alternating: the added nanoseconds per env step,
  an upper bound of the cost that is not hidden by the noise of a whole rollout.

The overhead is the ratio timed / untimed per round; the median and spread are reported.

    python -m benchmarks.env_timing_overhead --rounds 41
    python -m benchmarks.env_timing_overhead --mode kernel --rounds 21
    python -m benchmarks.env_timing_overhead --mode checkouts --base /path/to/base --rounds 11 --horizon 512 --collects 6
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


class _CoreWithoutTiming:
    """The compiled core, except that its env stepper is built without a timing array."""

    def __init__(self, core) -> None:
        self._core = core

    def __getattr__(self, name):
        return getattr(self._core, name)

    def EnvStepper(self, *arguments):  # noqa: N802 (the core's name)
        return self._core.EnvStepper(*arguments[:6])


def _reset_without_timing(group, column: int):
    """``EnvGroup._reset_env`` without the two clock reads."""
    from parallel_rollouts.checks.env_returns import check_reset_result

    seed = group._episode_seeds[column].seed_of(group._episodes_started[column])
    observation, _info = check_reset_result(group.envs[column].reset(seed=seed))
    group._episodes_started[column] += 1
    group._running_seeds[column] = seed
    return observation


def measure_in_process(rounds: int, num_envs: int, horizon: int, collects: int) -> list[dict]:
    import time
    import types
    from functools import partial

    import gymnasium as gym
    import numpy as np

    import parallel_rollouts
    from parallel_rollouts import ParallelRolloutCollector

    assert parallel_rollouts.active_core() == "compiled", parallel_rollouts.active_core()

    def policy(observations):
        return (observations[:, 2] > 0).astype(np.int64)

    fns = [partial(gym.make, "CartPole-v1")] * num_envs
    collectors = {
        name: ParallelRolloutCollector(fns, policy, "sync", horizon=horizon, seed=0) for name in ("timed", "untimed")
    }
    for _, _, group in collectors["untimed"]._backend.stepper._groups._groups:
        group._core = _CoreWithoutTiming(group._core)
        group._reset_env = types.MethodType(_reset_without_timing, group)
    untimed_batch = collectors["untimed"].collect()
    assert not untimed_batch.env_step_seconds.any() and collectors["timed"].collect().env_step_seconds.all()
    results = []
    try:
        for number in range(rounds):
            order = ["timed", "untimed"] if number % 2 == 0 else ["untimed", "timed"]
            row = {}
            for name in order:
                started, transitions = time.process_time(), 0
                for _ in range(collects):
                    transitions += collectors[name].collect().num_transitions
                row[name] = (time.process_time() - started) / transitions * 1e6
            row["ratio"] = row["timed"] / row["untimed"]
            results.append(row)
            print(f"round {number}: timed {row['timed']:.3f} us, untimed {row['untimed']:.3f} us, ratio {row['ratio']:.4f}", flush=True)
    finally:
        for collector in collectors.values():
            collector.close()
    return results


class _ConstantEnv:
    """An env whose step costs next to nothing: what is left is the stepper's own work."""

    def __init__(self) -> None:
        import numpy as np

        self._result = (np.zeros(4, np.float32), 1.0, False, False, {})

    def step(self, action):
        return self._result


def measure_kernel(rounds: int, num_envs: int, steps: int = 20000) -> list[dict]:
    import time

    import numpy as np

    from parallel_rollouts.core import _core as core

    def stepper(timed: bool):
        horizon = steps
        writer = core.ObservationWriter(
            np.zeros((horizon + 1, num_envs, 4), np.float32), np.zeros((horizon, num_envs, 4), np.float32)
        )
        books = [np.zeros(num_envs), np.zeros(num_envs, np.int64), np.zeros(num_envs, np.int64)]
        capacity = horizon * num_envs
        recorder = core.StepRecorder(
            np.zeros((horizon, num_envs)), np.zeros((horizon, num_envs), bool), np.zeros((horizon, num_envs), bool),
            np.zeros((horizon, num_envs), np.int64), *books, np.zeros(capacity), np.zeros(capacity, np.int64),
            np.zeros(capacity, np.int64), np.zeros(capacity, np.int64), np.zeros(capacity, np.int64),
            np.zeros(num_envs, np.int64), 0,
        )
        envs = [_ConstantEnv() for _ in range(num_envs)]
        arguments = [envs, [writer], recorder, None, (), []]
        if timed:
            arguments.append(np.zeros(num_envs))
        return core.EnvStepper(*arguments)

    actions = [0] * num_envs
    results = []
    for number in range(rounds):
        order = ["timed", "untimed"] if number % 2 == 0 else ["untimed", "timed"]
        row = {}
        for name in order:
            kernel = stepper(name == "timed")
            started = time.process_time()
            for t in range(steps):
                kernel.step(t, actions)
            row[name] = (time.process_time() - started) / (steps * num_envs) * 1e9
        row["ratio"] = row["timed"] / row["untimed"]
        row["added_ns_per_env_step"] = row["timed"] - row["untimed"]
        results.append(row)
    return results


def main(argv: list[str] | None = None) -> int:
    from benchmarks.machine import format_machine_record, machine_record

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("inprocess", "checkouts", "kernel"), default="inprocess")
    parser.add_argument("--base", type=Path, help="checkouts mode: a source tree without per-env timing, built in place")
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--horizon", type=int, default=256)
    parser.add_argument("--collects", type=int, default=2)
    parser.add_argument("--kernel-steps", type=int, default=20000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    machine = machine_record()
    print(format_machine_record(machine) + "\n", flush=True)
    out = args.out or HERE / "benchmarks" / "results" / f"env_timing_overhead_{args.mode}.json"
    if args.mode == "kernel":
        rounds = measure_kernel(args.rounds, args.num_envs, steps=args.kernel_steps)
        added = statistics.median(row["added_ns_per_env_step"] for row in rounds)
        summary = {
            "machine": machine,
            "what": "compiled EnvStepper.step over constant-returning envs, ns of CPU time per env step, "
            "with a timing array / without, alternating",
            "num_envs": args.num_envs,
            "rounds": rounds,
            "median_added_ns_per_env_step": added,
            "quartile_added_ns": statistics.quantiles([row["added_ns_per_env_step"] for row in rounds], n=4),
            "median_timed_ns": statistics.median(row["timed"] for row in rounds),
            "median_untimed_ns": statistics.median(row["untimed"] for row in rounds),
        }
        out.write_text(json.dumps(summary, indent=2) + "\n")
        print(json.dumps({key: value for key, value in summary.items() if key not in ("rounds", "machine")}, indent=2))
        return 0
    if args.mode == "inprocess":
        rounds = measure_in_process(args.rounds, args.num_envs, args.horizon, args.collects)
        baseline, what = "untimed", "same process, collects alternating: shipped collector / one whose groups skip the clock"
    else:
        if args.base is None:
            parser.error("--mode checkouts needs --base")
        contenders = {"timed": HERE, "untimed": args.base.resolve()}
        rounds = []
        for number in range(args.rounds):
            order = ["timed", "untimed"] if number % 2 == 0 else ["untimed", "timed"]
            row = {
                name: measure(contenders[name], args.num_envs, args.horizon, args.collects)["cpu_us_per_transition"]
                for name in order
            }
            row["ratio"] = row["timed"] / row["untimed"]
            rounds.append(row)
            print(f"round {number}: timed {row['timed']:.3f} us, base {row['untimed']:.3f} us, ratio {row['ratio']:.4f}", flush=True)
        baseline, what = "untimed", f"fresh process per round and checkout: this checkout / {args.base}"
    ratios = [row["ratio"] for row in rounds]
    summary = {
        "machine": machine,
        "what": f"CPU time per transition, sync backend, compiled core, CartPole-v1; {what}",
        "num_envs": args.num_envs,
        "horizon": args.horizon,
        "collects_per_round": args.collects,
        "rounds": rounds,
        "median_ratio": statistics.median(ratios),
        "min_ratio": min(ratios),
        "max_ratio": max(ratios),
        "quartile_ratios": statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios,
        "median_timed_us": statistics.median(row["timed"] for row in rounds),
        f"median_{baseline}_us": statistics.median(row[baseline] for row in rounds),
    }
    out.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({key: value for key, value in summary.items() if key not in ("rounds", "machine")}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
