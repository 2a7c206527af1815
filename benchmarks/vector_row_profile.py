"""Where the microseconds of a vector-env row go: the bare loop against ``sync``, side by side.

Run: ``python -m benchmarks.vector_row_profile [--num-envs 1024] [--rounds 15]
[--output benchmark-results/vector_row_profile.json]``

Per row (one step of the whole vector env):

1. ``bare loop`` and ``sync`` on ``CartPoleVectorEnv`` (the contenders of
   ``python -m benchmarks.vector_envs``), in CPU time.
2. The same two loops over :class:`NullVectorEnv`, which returns rows it computed up front:
   each loop's own work without the env's memory traffic between rows.
3. Both on ``CartPoleVectorEnv`` again, with a clock (``perf_counter``, wall time) around
   each part of a row. The bare loop: the policy, the store of its actions, the vector env's
   ``step``, the stores of what it returned. ``sync``: the policy, the check and store of its
   actions, the vector env's ``step``, the compiled row (``VectorRowRecorder.record``:
   observations, bounds, rewards, flags, books), the rest of the group's step in Python (the
   copy of the actions handed to the env, the step's timing and checks), the rest of the row
   loop, and the work of each collect outside its rows. A clock read costs tens of
   nanoseconds, so the parts sum to a little more than an unclocked row.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

from parallel_rollouts import ParallelRolloutCollector
from parallel_rollouts.groups import vector_source
from parallel_rollouts.policy.output import PolicyOutputWriter
from parallel_rollouts.policy.loop import RolloutLoop

from .machine import machine_record
from .report import write_json
from .vector_envs import bare_vector_loop, cartpole_vector, lean_policy

__all__ = ["NullVectorEnv", "main"]


class NullVectorEnv(gym.vector.VectorEnv):
    """A vector env of CartPole's shapes that computes nothing per step: it cycles through 64
    precomputed rows in which about one sub-env in 22 ends its episode (never twice in a row,
    as next-step autoreset requires)."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int, seed: int = 0) -> None:
        self.num_envs = num_envs
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        generator = np.random.default_rng(seed)
        self._observations = generator.standard_normal((64, num_envs, 4)).astype(np.float32)
        ends = generator.random((64, num_envs)) < 1 / 22
        ends[0] = False
        for row in range(1, 64):
            ends[row] &= ~ends[row - 1]
        ends[0] = ends[63] = False  # the cycle wraps from row 63 to row 0
        self._ends = ends
        self._rewards = np.ones(num_envs, np.float32)
        self._truncations = np.zeros(num_envs, bool)
        self._row = 0

    def reset(self, *, seed=None, options=None):
        self._row = 0
        return self._observations[0], {}

    def step(self, actions):
        self._row = (self._row + 1) % 64
        return self._observations[self._row], self._rewards, self._ends[self._row], self._truncations, {}


def _cpu_per_row(run, rows: int) -> float:
    start = time.process_time()
    run()
    return (time.process_time() - start) / rows * 1e6


def _medians(series: dict[str, list[float]]) -> dict[str, float]:
    return {name: statistics.median(values) for name, values in series.items()}


def time_loops(make_env, num_envs: int, horizon: int, rounds: int) -> dict:
    """CPU µs per row of the bare loop and ``sync`` on ``make_env(num_envs)``, interleaved."""
    bare = bare_vector_loop("bare loop", make_env(num_envs), horizon)
    collector = ParallelRolloutCollector(make_env(num_envs), lean_policy, backend="sync", horizon=horizon, seed=0)
    series: dict[str, list[float]] = {"bare loop": [], "sync": []}
    try:
        for _ in range(2):
            bare.run(), collector.collect()
        for _ in range(rounds):
            series["bare loop"].append(_cpu_per_row(bare.run, horizon))
            series["sync"].append(_cpu_per_row(collector.collect, horizon))
    finally:
        bare.close(), collector.close()
    ratios = [bare_row / sync_row for bare_row, sync_row in zip(series["bare loop"], series["sync"])]
    return {"us_per_row": _medians(series), "sync_throughput_vs_bare": statistics.median(ratios), "samples_us": series}


def time_bare_parts(num_envs: int, horizon: int, collects: int) -> dict:
    """The bare loop's row on ``CartPoleVectorEnv``, part by part (µs per row, clocks included)."""
    vector_env = cartpole_vector(num_envs)
    observations = np.zeros((horizon + 1, num_envs, 4), dtype=np.float32)
    rewards = np.zeros((horizon, num_envs), dtype=np.float64)
    terminations = np.zeros((horizon, num_envs), dtype=bool)
    truncations = np.zeros((horizon, num_envs), dtype=bool)
    actions = np.zeros((horizon, num_envs), dtype=np.int64)
    observations[0], _ = vector_env.reset(seed=0)
    seconds = dict.fromkeys(("policy", "action store", "env.step", "stores of observations, rewards and flags"), 0.0)
    clock = time.perf_counter

    def run() -> None:
        for t in range(horizon):
            start = clock()
            chosen = lean_policy(observations[t])
            policy_done = clock()
            actions[t] = chosen
            stored = clock()
            observation, reward, terminated, truncated, _ = vector_env.step(actions[t])
            stepped = clock()
            rewards[t], terminations[t], truncations[t] = reward, terminated, truncated
            observations[t + 1] = observation
            end = clock()
            seconds["policy"] += policy_done - start
            seconds["action store"] += stored - policy_done
            seconds["env.step"] += stepped - stored
            seconds["stores of observations, rewards and flags"] += end - stepped
        observations[0] = observations[horizon]

    try:
        run()
        for name in seconds:
            seconds[name] = 0.0
        start = clock()
        for _ in range(collects):
            run()
        total = clock() - start
    finally:
        vector_env.close()
    rows = collects * horizon
    per_row = {name: value / rows * 1e6 for name, value in seconds.items()}
    per_row["total"] = total / rows * 1e6
    return per_row


class _Clocks:
    """Seconds spent inside each wrapped callable, by name (``perf_counter``: a clock read costs
    tens of nanoseconds, where the process's CPU clock is a system call)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def wrap(self, name: str, function):
        seconds = self.seconds
        seconds.setdefault(name, 0.0)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                seconds[name] += time.perf_counter() - start

        return timed


class _TimedRows:
    """Stands in for the group's compiled ``VectorRowRecorder`` with a clock around ``record``."""

    def __init__(self, rows, clocks: _Clocks) -> None:
        self.record = clocks.wrap("compiled row (record)", rows.record)


def time_sync_parts(num_envs: int, horizon: int, collects: int) -> dict:
    """``sync``'s row on ``CartPoleVectorEnv``, part by part (CPU µs per row, clocks included)."""
    clocks = _Clocks()
    originals = (vector_source.VectorEnvGroup.begin, vector_source.VectorEnvGroup.step, PolicyOutputWriter.write, RolloutLoop.run)

    def begin(group, storage):
        originals[0](group, storage)
        group._rows = _TimedRows(group._rows, clocks)
        if not hasattr(group.vector_env, "_timed_step"):
            group.vector_env._timed_step = True
            group.vector_env.step = clocks.wrap("env.step", group.vector_env.step)

    vector_source.VectorEnvGroup.begin = begin
    vector_source.VectorEnvGroup.step = clocks.wrap("group step (all)", originals[1])
    PolicyOutputWriter.write = clocks.wrap("action check and store", originals[2])
    RolloutLoop.run = clocks.wrap("rows (all)", originals[3])
    try:
        collector = ParallelRolloutCollector(
            cartpole_vector(num_envs), clocks.wrap("policy", lean_policy), backend="sync", horizon=horizon, seed=0
        )
        try:
            collector.collect()
            for name in clocks.seconds:
                clocks.seconds[name] = 0.0
            start = time.perf_counter()
            for _ in range(collects):
                collector.collect()
            total = time.perf_counter() - start
        finally:
            collector.close()
    finally:
        (vector_source.VectorEnvGroup.begin, vector_source.VectorEnvGroup.step, PolicyOutputWriter.write,
         RolloutLoop.run) = originals
    rows = collects * horizon
    per_row = {name: seconds / rows * 1e6 for name, seconds in clocks.seconds.items()}
    group = per_row.pop("group step (all)")
    loop = per_row.pop("rows (all)")
    per_row["rest of the group's step in Python"] = group - per_row["env.step"] - per_row["compiled row (record)"]
    per_row["rest of the row loop in Python"] = loop - group - per_row["policy"] - per_row["action check and store"]
    per_row["per-collect work outside the rows"] = total / rows * 1e6 - loop
    per_row["total"] = total / rows * 1e6
    return per_row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.vector_row_profile", description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--horizon", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--part-collects", type=int, default=20)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)
    cartpole = time_loops(cartpole_vector, args.num_envs, args.horizon, args.rounds)
    null = time_loops(NullVectorEnv, args.num_envs, args.horizon, args.rounds)
    bare_parts = time_bare_parts(args.num_envs, args.horizon, args.part_collects)
    sync_parts = time_sync_parts(args.num_envs, args.horizon, args.part_collects)
    for title, loops in ((f"CartPoleVectorEnv({args.num_envs})", cartpole), (f"NullVectorEnv({args.num_envs})", null)):
        print(f"{title}, horizon {args.horizon}: CPU us per row (median of {args.rounds} interleaved rounds)")
        for name, value in loops["us_per_row"].items():
            print(f"  {name:44s} {value:8.2f}")
        print(f"  sync / bare loop, throughput (median of per-round ratios) {loops['sync_throughput_vs_bare']:.3f}x")
    print("CartPoleVectorEnv, part by part (clocks included): us per row")
    for title, parts in (("bare loop", bare_parts), ("sync", sync_parts)):
        print(f"  {title}")
        for name, value in parts.items():
            print(f"    {name:42s} {value:8.2f}")
    if args.output:
        document = {
            "machine": machine_record(), "settings": vars(args) | {"output": str(args.output)},
            "cartpole_vector": cartpole, "null_vector": null, "bare_parts": bare_parts, "sync_parts": sync_parts,
        }
        write_json(document, args.output)
        print(f"wrote {args.output.resolve()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
