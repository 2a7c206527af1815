"""Where the microseconds of one transition go: the hand loop against ``sync``, side by side.

Run: ``python -m benchmarks.step_profile [--workload cartpole] [--num-envs 16] [--rounds 7]
[--output benchmark-results/step_profile.json]``

Two measurements, both in this process's CPU time per transition:

1. Interleaved rounds (one collect of each contender per round, ratios within a round) of
   ``hand-loop``, ``hand-loop-reseeding`` and ``sync``, plus the parts every contender pays:
   ``env.step`` alone, ``env.reset()`` and ``env.reset(seed=...)`` alone, and the batched
   policy call alone. What is left of a contender after its env steps, resets and policy
   calls is its own overhead.
2. One ``cProfile`` run of ``sync`` (a few collects): the time spent inside each function of
   this package and of the envs, per transition. The profiler inflates small calls, so these
   numbers say where the time goes, not how much a step costs without it.
3. ``--null-env-counts``: the plain hand loop and ``sync`` over :class:`NullEnv`, an env that
   does nothing, at a few env counts: what each loop costs per row and per env by itself.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from parallel_rollouts import ParallelRolloutCollector

from .contenders import HandLoop
from .machine import machine_record
from .workloads import Workload, get_workload, sign_policy

__all__ = ["NullEnv", "main", "profile_sync", "time_null_env", "time_parts"]


class NullEnv(gym.Env):
    """An env that does nothing: the same observation every step, 40-step episodes, seeds ignored."""

    observation_space = spaces.Box(-np.inf, np.inf, (4,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self) -> None:
        self._observation = np.zeros(4, np.float32)
        self._steps = 0

    def reset(self, *, seed=None, options=None):
        self._steps = 0
        return self._observation, {}

    def step(self, action):
        self._steps += 1
        return self._observation, 1.0, self._steps >= 40, False, {}


def time_null_env(env_counts, horizon: int, rounds: int, seed: int = 0) -> dict:
    """CPU µs per transition of the plain hand loop and ``sync`` over :class:`NullEnv`, per env count."""
    workload = Workload("null", "NullEnv", NullEnv, sign_policy, episode_length=40)
    result = {}
    for num_envs in env_counts:
        hand = HandLoop(workload, num_envs, horizon, seed, reseed=False)
        collector = ParallelRolloutCollector(workload.env_fns(num_envs), sign_policy, backend="sync", horizon=horizon, seed=seed)
        try:
            for _ in range(2):
                hand.collect(), collector.collect()
            samples = {"hand-loop": [], "sync": []}
            for _ in range(rounds):
                samples["hand-loop"].append(_cpu(hand.collect) / (horizon * num_envs))
                samples["sync"].append(_cpu(collector.collect) / (horizon * num_envs))
        finally:
            hand.close(), collector.close()
        result[str(num_envs)] = {name: statistics.median(values) * 1e6 for name, values in samples.items()}
    return result


def _cpu(function, repeats: int = 1) -> float:
    start = time.process_time()
    for _ in range(repeats):
        function()
    return time.process_time() - start


def time_parts(workload_name: str, num_envs: int, horizon: int, rounds: int, seed: int = 0) -> dict:
    """Interleaved CPU seconds per transition of each contender and of the shared parts."""
    workload = get_workload(workload_name)
    transitions = horizon * num_envs
    hand = HandLoop(workload, num_envs, horizon, seed, reseed=False)
    reseeding = HandLoop(workload, num_envs, horizon, seed, reseed=True)
    collector = ParallelRolloutCollector(workload.env_fns(num_envs), workload.policy, backend="sync", horizon=horizon, seed=seed)
    envs = [workload.env_factory() for _ in range(num_envs)]
    for index, env in enumerate(envs):
        env.reset(seed=index)
    observations = np.stack([env.reset(seed=index)[0] for index, env in enumerate(envs)]) if not isinstance(
        envs[0].observation_space.sample(), dict) else None
    actions = [env.action_space.sample() for env in envs]

    def env_steps() -> None:
        # The env's own step, resetting where an episode ends (resets are timed apart).
        for _ in range(horizon):
            for column, env in enumerate(envs):
                result = env.step(actions[column])
                if result[2] or result[3]:
                    env.reset()

    def resets(seeded: bool) -> None:
        for column, env in enumerate(envs):
            if seeded:
                env.reset(seed=column)
            else:
                env.reset()

    def policy_calls() -> None:
        if observations is not None:
            for _ in range(horizon):
                workload.policy(observations)

    series: dict[str, list[float]] = {name: [] for name in ("hand-loop", "hand-loop-reseeding", "sync", "env.step", "policy", "reset()", "reset(seed)")}
    try:
        for _ in range(2):
            hand.collect(), reseeding.collect(), collector.collect()
        for _ in range(rounds):
            series["hand-loop"].append(_cpu(hand.collect) / transitions)
            series["hand-loop-reseeding"].append(_cpu(reseeding.collect) / transitions)
            series["sync"].append(_cpu(collector.collect) / transitions)
            series["env.step"].append(_cpu(env_steps) / transitions)
            series["policy"].append(_cpu(policy_calls) / transitions)
            series["reset()"].append(_cpu(lambda: resets(False), 20) / (20 * num_envs))
            series["reset(seed)"].append(_cpu(lambda: resets(True), 20) / (20 * num_envs))
        batch = collector.collect()
        ended = int(np.count_nonzero(batch.terminations | batch.truncations))
        episode_length = transitions / ended if ended else float("inf")
    finally:
        hand.close(), reseeding.close(), collector.close()
        for env in envs:
            env.close()
    medians = {name: statistics.median(values) * 1e6 for name, values in series.items()}
    ratios = {
        f"{top} / {bottom}": statistics.median(
            [bottom_value / top_value for top_value, bottom_value in zip(series[top], series[bottom])]
        )
        for top, bottom in (("sync", "hand-loop"), ("sync", "hand-loop-reseeding"), ("hand-loop-reseeding", "hand-loop"))
    }
    resets_per_transition = 1.0 / episode_length
    shared = medians["env.step"] + medians["policy"]
    return {
        "us_per_transition": medians,
        "throughput_ratios": ratios,
        "episode_length": episode_length,
        "overhead_us_per_transition": {
            "hand-loop": medians["hand-loop"] - shared - resets_per_transition * medians["reset()"],
            "hand-loop-reseeding": medians["hand-loop-reseeding"] - shared - resets_per_transition * medians["reset(seed)"],
            "sync": medians["sync"] - shared - resets_per_transition * medians["reset(seed)"],
        },
        "samples_us": {name: [value * 1e6 for value in values] for name, values in series.items()},
    }


def profile_sync(workload_name: str, num_envs: int, horizon: int, collects: int, top: int, seed: int = 0) -> list[dict]:
    """The functions ``sync`` spends its time in, per transition, under ``cProfile``."""
    workload = get_workload(workload_name)
    collector = ParallelRolloutCollector(workload.env_fns(num_envs), workload.policy, backend="sync", horizon=horizon, seed=seed)
    try:
        collector.collect()
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(collects):
            collector.collect()
        profiler.disable()
    finally:
        collector.close()
    transitions = collects * horizon * num_envs
    stats = pstats.Stats(profiler)
    rows = []
    for (filename, line, function), (_, calls, inside, cumulative, _) in stats.stats.items():
        rows.append({
            "function": f"{Path(filename).name}:{line}({function})",
            "calls_per_transition": calls / transitions,
            "own_us_per_transition": inside / transitions * 1e6,
            "cumulative_us_per_transition": cumulative / transitions * 1e6,
        })
    rows.sort(key=lambda row: row["own_us_per_transition"], reverse=True)
    return rows[:top]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.step_profile", description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="cartpole")
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--horizon", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--profile-collects", type=int, default=5)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--null-env-counts", default="1,16,64", help="env counts for the NullEnv loops ('' to skip)")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)
    parts = time_parts(args.workload, args.num_envs, args.horizon, args.rounds)
    profile = profile_sync(args.workload, args.num_envs, args.horizon, args.profile_collects, args.top)
    counts = [int(count) for count in args.null_env_counts.split(",") if count]
    null_env = time_null_env(counts, args.horizon, args.rounds)
    print(f"{args.workload}, {args.num_envs} envs, horizon {args.horizon}: CPU us per transition (median of {args.rounds} rounds)")
    for name, value in parts["us_per_transition"].items():
        print(f"  {name:22s} {value:8.3f}")
    print(f"  mean episode length {parts['episode_length']:.1f}")
    for name, value in parts["overhead_us_per_transition"].items():
        print(f"  overhead beyond env step, resets and policy: {name:22s} {value:8.3f}")
    for name, value in parts["throughput_ratios"].items():
        print(f"  throughput {name}: {value:.3f}x")
    print("sync under cProfile: own time per transition (us)")
    for row in profile:
        print(f"  {row['own_us_per_transition']:7.3f}  calls/transition {row['calls_per_transition']:6.3f}  {row['function']}")
    print("NullEnv (an env that does nothing): CPU us per transition")
    for count, values in null_env.items():
        print(f"  {count:>3} envs: hand-loop {values['hand-loop']:.3f}  sync {values['sync']:.3f}")
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        document = {"machine": machine_record(), "settings": vars(args) | {"output": str(args.output)}, "parts": parts, "sync_profile": profile, "null_env": null_env}
        args.output.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
