"""Whole training loops, as users run them: the end-to-end group of the benchmarks.

    python -m benchmarks.training_loop --workloads cartpole --rounds 7 [--competitor] [--json out.json]

Each contender is one training run in a fresh Python process (so each starts from torch's own
thread settings), timed inside the run over its training loop alone; the contenders of a
workload run interleaved, one run each per round, and every ratio is taken within a round.

Contenders, per workload (CleanRL's hyper-parameters: 4 envs, 128 steps, 4 epochs of 4
minibatches):

- ``cleanrl``: CleanRL's ``ppo.py`` loop (:mod:`examples.ppo_recipe.cleanrl_loop`) on ``SyncVectorEnv``,
  torch's default threads: the baseline. ``cleanrl_1t``: the same with one torch thread.
- ``swap``: the same loop with the one-line swap to ``ParallelVectorEnv(fns)`` at its defaults;
  ``swap_1t`` with one thread; ``swap_async``: ``backend="async"`` asked for.
- ``recipe``: :mod:`examples.ppo_recipe.train` at its defaults (rollout workers, lag 1);
  ``recipe_lag0``: the same taking turns; ``recipe_cleanrl_policy``: acting through CleanRL's
  ``get_action_and_value``; ``recipe_all_threads``: the learner on torch's default threads;
  ``recipe_sync``: lag 1 with the envs and the policy on a background thread of this process.
- ``sb3_dummy``, ``sb3_subproc``, ``sb3_parallel``: Stable-Baselines3's PPO (its defaults,
  ``make_vec_env`` with 4 envs) on ``DummyVecEnv``, ``SubprocVecEnv`` and ``ParallelVecEnv``.

``--competitor`` runs a busy loop pinned to the last usable core beside every run. The report
gives each contender's median loop time, its speed-up over its baseline (``cleanrl``, or
``sb3_dummy`` for the SB3 runs; median, min, max of the per-round ratios: above 1 is faster)
and its cliff statistic (slowest round / median round).
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

from parallel_rollouts.conformance.rounds import run_rounds, summarize_ratios

from .per_step import start_competitor
from .report import format_machine_record, machine_record, write_json

#: Env steps a run takes, per workload (whole iterations of 4 x 128), and the rounds' default.
WORKLOAD_STEPS = {"cartpole": 16384, "frames": 2048, "half_ms": 4096}
ENV_IDS = {"cartpole": "CartPole-v1", "frames": "frames", "half_ms": "half_ms"}


def _cleanrl(vector_env: str, threads: int = 0) -> list[str]:
    return ["examples.ppo_recipe.cleanrl_loop", "--vector-env", vector_env, "--torch-threads", str(threads)]


CONTENDERS = {
    "cleanrl": _cleanrl("SyncVectorEnv"),
    "cleanrl_1t": _cleanrl("SyncVectorEnv", 1),
    "swap": _cleanrl("ParallelVectorEnv"),
    "swap_1t": _cleanrl("ParallelVectorEnv", 1),
    "swap_async": _cleanrl("ParallelVectorEnv-async"),
    "recipe": ["examples.ppo_recipe.train"],
    "recipe_lag0": ["examples.ppo_recipe.train", "--max-policy-lag", "0"],
    "recipe_cleanrl_policy": ["examples.ppo_recipe.train", "--lean-policy", "false"],
    "recipe_all_threads": ["examples.ppo_recipe.train", "--torch-threads", "0"],
    "recipe_sync": ["examples.ppo_recipe.train", "--backend", "sync"],
    "sb3_dummy": ["benchmarks.training_loop", "--sb3", "DummyVecEnv"],
    "sb3_subproc": ["benchmarks.training_loop", "--sb3", "SubprocVecEnv"],
    "sb3_parallel": ["benchmarks.training_loop", "--sb3", "ParallelVecEnv"],
}
DEFAULT_CONTENDERS = "cleanrl,cleanrl_1t,swap,swap_1t,swap_async,recipe,recipe_lag0"


def run_one(name: str, env_id: str, steps: int, seed: int) -> dict:
    """One training run of contender ``name`` in a fresh process; what it reported."""
    command = [sys.executable, "-m", *CONTENDERS[name], "--env-id", env_id, "--total-timesteps", str(steps),
               "--seed", str(seed)]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if completed.returncode != 0:
        raise RuntimeError(f"{name} failed ({completed.returncode}):\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def sb3_run(vec_env_name: str, env_id: str, steps: int, seed: int) -> dict:
    """SB3's PPO at its defaults on ``make_vec_env(env_id, n_envs=4, vec_env_cls=...)``."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    from parallel_rollouts.sb3 import ParallelVecEnv

    from examples.ppo_recipe.agent import make_env

    classes = {"DummyVecEnv": DummyVecEnv, "SubprocVecEnv": SubprocVecEnv, "ParallelVecEnv": ParallelVecEnv}
    vec_env = make_vec_env(make_env(env_id), n_envs=4, seed=seed, vec_env_cls=classes[vec_env_name])
    model = PPO("CnnPolicy" if env_id == "frames" else "MlpPolicy", vec_env, seed=seed, device="cpu")
    started = time.perf_counter()
    model.learn(total_timesteps=steps)
    wall = time.perf_counter() - started
    vec_env.close()
    return {"steps": steps, "loop_seconds": wall, "torch_threads": __import__("torch").get_num_threads()}


def baseline_of(name: str) -> str:
    """What a contender is compared with: SB3's PPO with ``DummyVecEnv``, CleanRL's loop with one
    torch thread for the swap with one thread, else CleanRL's loop at torch's default."""
    if name.startswith("sb3"):
        return "sb3_dummy"
    return "cleanrl_1t" if name == "swap_1t" else "cleanrl"


#: Further per-round ratios reported when both contenders ran: (faster?, than what).
EXTRA_PAIRS = (("recipe", "recipe_lag0"), ("swap_1t", "cleanrl"))


def measure_workload(workload: str, names: list[str], rounds: int, steps: int, seed: int) -> dict:
    env_id = ENV_IDS[workload]

    def progress(round_index: int) -> None:
        print(f"  {workload}: round {round_index + 1}/{rounds} done", flush=True)

    measured = run_rounds(names, lambda name: run_one(name, env_id, steps, seed), rounds, keep_going=True,
                          after_round=progress)
    times = {name: [run["loop_seconds"] for run in runs] for name, runs in zip(names, measured.samples)}
    entry: dict = {"steps": steps, "env_id": env_id, "contenders": {}}
    for name, runs, error in zip(names, measured.samples, measured.errors):
        seconds = times[name]
        record: dict = {"loop_seconds": seconds, "runs": runs, "baseline": baseline_of(name)}
        if error is not None:
            record["error"] = f"{type(error).__name__}: {error}"
        if seconds:
            median = statistics.median(seconds)
            record["median_seconds"] = median
            record["cliff"] = max(seconds) / median
            baseline = times.get(record["baseline"])
            if baseline and len(baseline) == len(seconds):
                record["speedup"] = summarize_ratios(baseline, seconds)
        entry["contenders"][name] = record
    entry["pairs"] = {
        f"{first} vs {second}": summarize_ratios(times[second], times[first])
        for first, second in EXTRA_PAIRS
        if times.get(first) and times.get(second) and len(times[first]) == len(times[second])
    }
    return entry


def format_workload(workload: str, entry: dict) -> str:
    lines = [f"### {workload}: {entry['steps']} steps per run", "",
             "| contender | median s | speed-up vs its baseline (min-max) | cliff (slowest / median) |", "|---|--:|--:|--:|"]
    for name, record in entry["contenders"].items():
        if "median_seconds" not in record:
            lines.append(f"| {name} | failed: {record.get('error', '?')[:80]} | | |")
            continue
        ratio = record.get("speedup")
        ratio_text = f"{ratio['median']:.2f}x ({ratio['min']:.2f}-{ratio['max']:.2f}) vs {record['baseline']}" if ratio else ""
        lines.append(f"| {name} | {record['median_seconds']:.2f} | {ratio_text} | {record['cliff']:.2f} |")
    for pair, ratio in entry.get("pairs", {}).items():
        lines.append(f"\n{pair}: {ratio['median']:.2f}x ({ratio['min']:.2f}-{ratio['max']:.2f})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="cartpole", help=f"comma-separated, from {sorted(WORKLOAD_STEPS)}")
    parser.add_argument("--contenders", default=DEFAULT_CONTENDERS, help=f"comma-separated, from {sorted(CONTENDERS)}")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=0, help="env steps per run (0: the workload's default)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--competitor", action="store_true", help="a busy loop on the last core beside every run")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 rounds of 1 iteration")
    parser.add_argument("--json", type=Path)
    # One SB3 run in this process (what the sb3_* contenders start).
    parser.add_argument("--sb3", help=argparse.SUPPRESS)
    parser.add_argument("--env-id", help=argparse.SUPPRESS)
    parser.add_argument("--total-timesteps", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.sb3:
        print(json.dumps(sb3_run(args.sb3, args.env_id, args.total_timesteps, args.seed)))
        return 0
    if args.quick:
        args.rounds, args.steps = 2, 512
    record = machine_record()
    print(format_machine_record(record), flush=True)
    report: dict = {"machine": record, "competitor": args.competitor, "rounds": args.rounds,
                    "load_before": os.getloadavg(), "workloads": {}}
    competitor = start_competitor() if args.competitor else None
    try:
        for workload in [name for name in args.workloads.split(",") if name]:
            names = [name for name in args.contenders.split(",") if name]
            entry = measure_workload(workload, names, args.rounds, args.steps or WORKLOAD_STEPS[workload], args.seed)
            report["workloads"][workload] = entry
            print(format_workload(workload, entry), flush=True)
    finally:
        if competitor is not None:
            competitor.terminate()
            competitor.join()
    report["load_after"] = os.getloadavg()
    if args.json:
        write_json(report, args.json)
        print(f"wrote {args.json.resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
