"""Collect a few rollouts from the VR edge environment and summarise them.

    python -m examples.collect_rollout --backend sync --num-envs 4

The smallest end-to-end use of the collector: random actions (``policy=None``),
a few ``collect()`` calls, and what came back.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from functools import partial

import numpy as np

from examples.vr_edge.synthetic_env import SyntheticVREdgeEnv
from parallel_rollouts import ParallelRolloutCollector

INFO_KEYS = ("quality", "late_rate", "drop_rate", "stall_time")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="sync", choices=["serial", "sync", "async"])
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--horizon", type=int, default=256)
    parser.add_argument("--collects", type=int, default=4, help="how many consecutive collect() calls")
    parser.add_argument("--num-users", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--core", default="auto", choices=["auto", "compiled", "python"])
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    env_fns = [partial(SyntheticVREdgeEnv, num_users=args.num_users) for _ in range(args.num_envs)]
    with ParallelRolloutCollector(
        env_fns, None, args.backend, horizon=args.horizon, seed=args.seed, core=args.core, info_keys=INFO_KEYS
    ) as collector:
        print(f"{collector!r}")
        transitions, seconds, returns = 0, 0.0, []
        for index in range(args.collects):
            start = time.perf_counter()
            batch = collector.collect()
            elapsed = time.perf_counter() - start
            transitions += batch.num_transitions
            seconds += elapsed
            returns.extend(batch.episode_returns.tolist())
            print(
                f"collect {index}: {batch.num_transitions} transitions in {elapsed * 1e3:.1f} ms, "
                f"{batch.episode_returns.size} episodes ended "
                f"({int(batch.terminations.sum())} terminated, {int(batch.truncations.sum())} truncated), "
                f"mean quality {batch.infos['quality'].mean():.3f}"
            )
    print(f"observations {batch.observations.shape} {batch.observations.dtype}, actions {batch.actions.shape}")
    mean_return = float(np.mean(returns)) if returns else float("nan")
    print(f"{transitions / seconds:,.0f} transitions/s; mean episode return {mean_return:.2f} over {len(returns)} episodes")
    return {"transitions": transitions, "seconds": seconds, "episodes": len(returns), "mean_return": mean_return}


if __name__ == "__main__":
    multiprocessing.freeze_support()
    main()
