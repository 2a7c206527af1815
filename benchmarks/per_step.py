"""The per-step path through every front door: async at its defaults against the same front door in-process.

    python -m benchmarks.per_step [--workloads null,cartpole,image,half_ms] [--rounds 7]
        [--num-envs 16] [--steps 256] [--json PATH] [--no-sb3-training] [--no-ready-first] [--no-rollout-workers]

The per-step path: the policy (here random actions drawn up front, or the collector's own
random sampler) in the main process, every env stepped once per vector step. For each
workload, every contender is built first and stays alive; each round times ``--steps``
vector steps of each, in rotating order, and ratios are taken within a round:

- ``ParallelVectorEnv`` async (its defaults: this process steps a share of the envs, one
  worker per other usable core, the step doorbell) against ``ParallelVectorEnv`` sync, both
  ``copy=True`` (the default);
- the Stable-Baselines3 adapter ``ParallelVecEnv`` async against ``DummyVecEnv`` and against
  the adapter on sync;
- the collector (``backend="async"``, per step) against ``backend="sync"``;
- the ceiling: two independent processes each running a bare loop over half the envs (and
  sending back only a count), against one bare loop over all of them; and the same for the
  hand loop a user writes, which sends its half of the rollout back (``benchmarks.contenders``);
- the round trip (workload ``null``): µs per vector step of ``ParallelVectorEnv`` async
  beyond one share's part of the in-process step, ``async - sync / shares``.

Two more groups: PPO's ``collect_rollouts`` (Stable-Baselines3, CartPole) on the adapter
against ``DummyVecEnv``, with the env's share of a rollout measured to give the Amdahl
bound; and ready-first stepping (``batch_size=N/2``) against the synchronous step on an env
with heavy-tailed step times (:class:`benchmarks.envs.HeavyTailEnv`); and rollout workers
(CartPole, ``horizon=--steps``) with the doorbell against the pipes alone, which must cost them
nothing.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from parallel_rollouts import ParallelRolloutCollector, ParallelVectorEnv
from parallel_rollouts.conformance.rounds import DEFAULT_ROUNDS, run_rounds

from .contenders import make_contender
from .envs import HeavyTailEnv
from .report import format_machine_record, machine_record, write_json
from .workloads import Workload, get_workload

__all__ = ["FRONT_DOORS", "main", "measure_workload"]

#: Contender names, in the order of the tables.
FRONT_DOORS = (
    "vector-env/sync", "vector-env/async", "sb3/dummy", "sb3/sync", "sb3/async", "sb3/async/first-seed",
    "collector/sync", "collector/async", "hand-loop", "hand-loop/2proc", "bare-loop", "bare-loop/2proc",
)
#: (numerator, denominator): the speed of the first over the second, per round.
RATIOS = {
    "vector-env async / sync": ("vector-env/async", "vector-env/sync"),
    "sb3 async / DummyVecEnv": ("sb3/async", "sb3/dummy"),
    "sb3 async / sb3 sync": ("sb3/async", "sb3/sync"),
    # Opt-in: only each env's first episode seeded, as DummyVecEnv (episode_seeds="first").
    "sb3 async, first seed only / DummyVecEnv": ("sb3/async/first-seed", "sb3/dummy"),
    "collector async / sync": ("collector/async", "collector/sync"),
    "two hand loops / one": ("hand-loop/2proc", "hand-loop"),
    # The ceiling: two bare loops send back only a count (two hand loops pickle their half of
    # the rollout back, 58 MB of frames per collect on `image`).
    "ceiling: two bare loops / one": ("bare-loop/2proc", "bare-loop"),
}


class _VectorSteps:
    """``steps`` vector steps of a Gymnasium or SB3 vector env with actions drawn up front."""

    def __init__(self, name: str, env, steps: int, sb3: bool) -> None:
        self.name, self.env, self.steps = name, env, steps
        space = env.action_space  # SB3's is one env's space; Gymnasium's the batch's
        space.seed(0)
        if sb3:
            self.actions = [np.array([space.sample() for _ in range(env.num_envs)]) for _ in range(steps)]
        else:
            self.actions = [space.sample() for _ in range(steps)]
        if sb3:
            env.seed(0)
            env.reset()
        else:
            env.reset(seed=0)

    def run(self) -> None:
        step = self.env.step
        for actions in self.actions:
            step(actions)

    def close(self) -> None:
        self.env.close()


class _Collects:
    def __init__(self, name: str, collector: ParallelRolloutCollector) -> None:
        self.name, self.collector = name, collector

    def run(self) -> None:
        self.collector.collect()

    def close(self) -> None:
        self.collector.close()


class _Loop:
    def __init__(self, name: str, contender) -> None:
        self.name, self.contender = name, contender

    def run(self) -> None:
        self.contender.collect()

    def close(self) -> None:
        self.contender.close()


def _build(name: str, workload: Workload, num_envs: int, steps: int):
    fns = [workload.env_factory] * num_envs
    if name.startswith("vector-env/"):
        return _VectorSteps(name, ParallelVectorEnv(fns, backend=name.split("/")[1]), steps, sb3=False)
    if name.startswith("sb3/"):
        from stable_baselines3.common.vec_env import DummyVecEnv

        from parallel_rollouts.sb3 import ParallelVecEnv

        kind = name.split("/")[1]
        episode_seeds = "first" if name.endswith("/first-seed") else "every"
        env = DummyVecEnv(fns) if kind == "dummy" else ParallelVecEnv(fns, kind, seed=0, episode_seeds=episode_seeds)
        return _VectorSteps(name, env, steps, sb3=True)
    if name.startswith("collector/"):
        return _Collects(name, ParallelRolloutCollector(fns, None, name.split("/")[1], horizon=steps, seed=0))
    return _Loop(name, make_contender(name, workload, num_envs, steps, 0))


def _summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "per_round": values}


def _ratio_text(ratio: dict) -> str:
    return f"{ratio['median']:.2f}x [{ratio['min']:.2f}, {ratio['max']:.2f}]"


def _timed(contender) -> float:
    start = time.perf_counter()
    contender.run()
    return time.perf_counter() - start


def _interleaved(contenders: list, rounds: int, warmup: int) -> dict[str, list[float]]:
    for contender in contenders:
        for _ in range(warmup):
            contender.run()
    measured = run_rounds(contenders, _timed, rounds, order="rotate")
    for contender, error in zip(contenders, measured.errors):
        if error is not None:
            raise RuntimeError(f"{contender.name} failed: {error!r}") from error
    return {contender.name: samples for contender, samples in zip(contenders, measured.samples)}


def measure_workload(workload: Workload, num_envs: int, steps: int, rounds: int, warmup: int = 2) -> dict:
    """Every front door's seconds per unit of ``steps`` vector steps, per round; the ratios."""
    contenders = []
    try:
        for name in FRONT_DOORS:
            contenders.append(_build(name, workload, num_envs, steps))
        shares = len(contenders[FRONT_DOORS.index("vector-env/async")].env._backend.pool.workers)
        seconds = _interleaved(contenders, rounds, warmup)
    finally:
        for contender in contenders:
            contender.close()
    ratios = {
        label: _summary([slow / fast for fast, slow in zip(seconds[top], seconds[bottom])])
        for label, (top, bottom) in RATIOS.items()
    }
    us_per_step = {name: _summary([s / steps * 1e6 for s in values]) for name, values in seconds.items()}
    round_trip = [
        (a - s / shares) / steps * 1e6 for a, s in zip(seconds["vector-env/async"], seconds["vector-env/sync"])
    ]
    return {
        "workload": workload.name, "description": workload.description, "shares": shares,
        "us_per_vector_step": us_per_step, "ratios": ratios, "round_trip_us": _summary(round_trip),
    }


# -- PPO's collect_rollouts -------------------------------------------------------------------


class _PPORollouts:
    """One ``collect_rollouts`` of Stable-Baselines3's PPO (n_steps per env) on a vector env."""

    def __init__(self, name: str, env, n_steps: int) -> None:
        import torch
        from stable_baselines3 import PPO
        from stable_baselines3.common.callbacks import CallbackList

        torch.set_num_threads(1)
        self.name, self.env = name, env
        self.model = PPO("MlpPolicy", env, n_steps=n_steps, batch_size=64, seed=0, device="cpu")
        self.model._setup_learn(10**9, CallbackList([]))
        self.callback = CallbackList([])
        self.callback.init_callback(self.model)
        # The env's share: the seconds spent inside env.step of the last rollout.
        self.env_seconds = 0.0
        step_wait = env.step_wait

        def timed_step_wait():
            start = time.perf_counter()
            result = step_wait()
            self.env_seconds += time.perf_counter() - start
            return result

        env.step_wait = timed_step_wait

    def run(self) -> None:
        self.env_seconds = 0.0
        self.model.collect_rollouts(self.env, self.callback, self.model.rollout_buffer, self.model.n_steps)

    def close(self) -> None:
        self.env.close()


def measure_ppo(num_envs: int, n_steps: int, rounds: int) -> dict:
    from stable_baselines3.common.vec_env import DummyVecEnv

    from parallel_rollouts.sb3 import ParallelVecEnv

    fns = [get_workload("cartpole").env_factory] * num_envs
    contenders = []
    try:
        contenders.append(_PPORollouts("ppo/dummy", DummyVecEnv(fns), n_steps))
        contenders.append(_PPORollouts("ppo/sb3-async", ParallelVecEnv(fns, "async", seed=0), n_steps))
        env_share = []
        for contender in contenders:
            contender.run()
        dummy = contenders[0]
        # The processes stepping the adapter's envs (the main process's share counts as one).
        shares = len(contenders[1].env._vector_env._backend.pool.workers)

        def timed(contender) -> float:
            seconds = _timed(contender)
            if contender is dummy:
                env_share.append(contender.env_seconds / seconds)
            return seconds

        measured = run_rounds(contenders, timed, rounds, order="rotate")
    finally:
        for contender in contenders:
            contender.close()
    dummy_s, ours_s = measured.samples
    share = statistics.median(env_share)
    return {
        "n_steps": n_steps, "num_envs": num_envs,
        "seconds_per_rollout": {"ppo/dummy": _summary(dummy_s), "ppo/sb3-async": _summary(ours_s)},
        "ratio sb3 async / DummyVecEnv": _summary([d / o for d, o in zip(dummy_s, ours_s)]),
        "env_share_of_dummy_rollout": share,
        # Amdahl: only the env's share can run in parallel, on `shares` processes at best.
        "amdahl_bound": 1.0 / ((1.0 - share) + share / shares),
    }


# -- ready-first stepping ------------------------------------------------------------------------


class _ReadyFirstSteps:
    """``steps`` receives of ``batch_size`` envs, sending each batch straight back."""

    def __init__(self, env: ParallelVectorEnv, steps: int) -> None:
        self.name, self.env, self.steps = "ready-first", env, steps
        self.batch_size = env._ready_first.batch_size
        env.reset(seed=0)
        self.actions = np.zeros(self.batch_size, dtype=np.int64)
        env.send(np.zeros(env.num_envs, dtype=np.int64))

    def run(self) -> None:
        env, actions = self.env, self.actions
        for _ in range(self.steps):
            env.recv()
            env.send(actions)

    def close(self) -> None:
        self.env.close()


def measure_ready_first(num_envs: int, steps: int, rounds: int) -> dict:
    fns = [HeavyTailEnv] * num_envs
    contenders = []
    try:
        sync_step = _VectorSteps("synchronous step", ParallelVectorEnv(fns, backend="async", main_process_envs=0), steps, sb3=False)
        sync_step.actions = [np.zeros(num_envs, dtype=np.int64)] * steps
        contenders.append(sync_step)
        contenders.append(_ReadyFirstSteps(ParallelVectorEnv(fns, backend="async", batch_size=num_envs // 2), 2 * steps))
        seconds = _interleaved(contenders, rounds, warmup=1)
    finally:
        for contender in contenders:
            contender.close()
    # Both units step num_envs * steps env-steps: a ratio of times is a ratio of env-steps per second.
    return {
        "env": HeavyTailEnv.__doc__.split("\n")[0], "num_envs": num_envs, "batch_size": num_envs // 2,
        "seconds": {name: _summary(values) for name, values in seconds.items()},
        "ratio ready-first / synchronous step": _summary(
            [s / r for s, r in zip(seconds["synchronous step"], seconds["ready-first"])]
        ),
    }


# -- rollout workers: the doorbell must not cost them -------------------------------------------


def measure_rollout_workers(num_envs: int, horizon: int, rounds: int) -> dict:
    """Rollout workers (one request per collect, over the pipe, rung on the doorbell) against the
    same collector with the doorbell off (``PARALLEL_ROLLOUTS_DOORBELL=0``: the pipes alone)."""
    import os

    from parallel_rollouts.processes.doorbell import DOORBELL_ENV_VAR

    fns = [get_workload("cartpole").env_factory] * num_envs
    contenders = []
    saved = os.environ.get(DOORBELL_ENV_VAR)
    try:
        for name, value in (("rollout-workers/doorbell", "1"), ("rollout-workers/pipes", "0")):
            os.environ[DOORBELL_ENV_VAR] = value  # read when the pool starts
            collector = ParallelRolloutCollector(fns, None, "async", horizon=horizon, seed=0, policy_placement="workers")
            contenders.append(_Collects(name, collector))
        seconds = _interleaved(contenders, rounds, warmup=2)
    finally:
        if saved is None:
            os.environ.pop(DOORBELL_ENV_VAR, None)
        else:
            os.environ[DOORBELL_ENV_VAR] = saved
        for contender in contenders:
            contender.close()
    return {
        "workload": "cartpole", "num_envs": num_envs, "horizon": horizon,
        "seconds": {name: _summary(values) for name, values in seconds.items()},
        "ratio doorbell / pipes": _summary(
            [p / d for d, p in zip(seconds["rollout-workers/doorbell"], seconds["rollout-workers/pipes"])]
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.per_step", description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", default="null,cartpole,image,half_ms")
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=256, help="vector steps per unit (a quarter for half_ms)")
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    parser.add_argument("--no-sb3-training", action="store_true", help="skip PPO's collect_rollouts")
    parser.add_argument("--no-ready-first", action="store_true", help="skip the ready-first group")
    parser.add_argument("--no-rollout-workers", action="store_true", help="skip rollout workers with and without the doorbell")
    parser.add_argument(
        "--competitor", action="store_true",
        help="run beside a CPU-bound process (a busy loop) pinned to the last usable core, the whole run: a busy machine",
    )
    parser.add_argument("--json", type=Path, help="write the result as JSON to this path")
    args = parser.parse_args(argv)
    if args.num_envs < 2 or args.steps < 1 or args.rounds < 1:
        parser.error("--num-envs must be >= 2, --steps and --rounds >= 1.")
    machine = machine_record()
    print(format_machine_record(machine) + "\n", flush=True)
    report: dict = {"machine": machine, "settings": vars(args) | {"json": str(args.json)}, "workloads": []}
    competitor = start_competitor() if args.competitor else None
    try:
        _measure_all(args, report)
    finally:
        if competitor is not None:
            competitor.kill()
            competitor.join()
    if args.json:
        write_json(report, args.json)
        print(f"wrote {args.json.resolve()}")
    return 0


def _busy_loop(core: int) -> None:
    import os

    os.sched_setaffinity(0, {core})
    while True:
        pass


def start_competitor():
    """A process that keeps one core busy (the last this process may use) until killed: what
    ``--competitor`` runs beside every contender (here and in :mod:`.training_loop`)."""
    import os

    core = max(os.sched_getaffinity(0))
    process = multiprocessing.get_context("spawn").Process(target=_busy_loop, args=(core,), daemon=True)
    process.start()
    print(f"a busy loop runs on core {core} beside every contender (pid {process.pid})", flush=True)
    return process


def _measure_all(args: argparse.Namespace, report: dict) -> None:
    for name in [name for name in args.workloads.split(",") if name]:
        workload = get_workload(name)
        steps = max(1, args.steps // 4) if name == "half_ms" else args.steps
        entry = measure_workload(workload, args.num_envs, steps, args.rounds)
        report["workloads"].append(entry)
        cells = "; ".join(
            f"{label} {_ratio_text(r)}" for label, r in entry["ratios"].items()
        )
        print(f"{name} ({entry['shares']} shares): {cells}; round trip {entry['round_trip_us']['median']:.1f} µs", flush=True)
    if not args.no_sb3_training:
        report["ppo_collect_rollouts"] = ppo = measure_ppo(args.num_envs, 64, args.rounds)
        ratio = ppo["ratio sb3 async / DummyVecEnv"]
        print(f"PPO collect_rollouts, sb3 async / DummyVecEnv: {_ratio_text(ratio)}; env share {ppo['env_share_of_dummy_rollout']:.2f}, "
              f"Amdahl bound {ppo['amdahl_bound']:.2f}x", flush=True)
    if not args.no_ready_first:
        report["ready_first"] = ready = measure_ready_first(args.num_envs, max(1, args.steps // 4), args.rounds)
        ratio = ready["ratio ready-first / synchronous step"]
        print(f"ready-first / synchronous step: {_ratio_text(ratio)}", flush=True)
    if not args.no_rollout_workers:
        report["rollout_workers"] = workers = measure_rollout_workers(args.num_envs, args.steps, args.rounds)
        ratio = workers["ratio doorbell / pipes"]
        print(f"rollout workers, doorbell / pipes: {_ratio_text(ratio)}", flush=True)


if __name__ == "__main__":
    multiprocessing.freeze_support()
    sys.exit(main())
