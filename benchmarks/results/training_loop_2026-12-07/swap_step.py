"""The one-line swap's step alone: CleanRL's vector env (``SyncVectorEnv`` of 4 envs, each in
``RecordEpisodeStatistics``) against ``ParallelVectorEnv`` at its defaults, the same actions,
interleaved rounds. Run from the repository root:
``python benchmarks/results/training_loop_2026-12-07/swap_step.py``."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # run as a script: the repository's packages

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

from examples.ppo_recipe.agent import make_env  # noqa: E402
from parallel_rollouts import ParallelVectorEnv  # noqa: E402
from parallel_rollouts.conformance.rounds import run_rounds, summarize_ratios  # noqa: E402

STEPS = {"CartPole-v1": 5000, "frames": 2000, "half_ms": 400}


def main() -> None:
    report = {}
    for env_id, steps in STEPS.items():
        fns = [make_env(env_id)] * 4
        contenders = {"SyncVectorEnv": gym.vector.SyncVectorEnv(fns), "ParallelVectorEnv": ParallelVectorEnv(fns)}
        actions = np.random.default_rng(0).integers(0, 2, size=(steps, 4))
        for envs in contenders.values():
            envs.reset(seed=1)

        def measure(name: str) -> float:
            envs = contenders[name]
            started = time.perf_counter()
            for row in actions:
                envs.step(row)
            return (time.perf_counter() - started) / steps * 1e6

        measured = run_rounds(list(contenders), measure, rounds=9)
        theirs, ours = measured.samples
        report[env_id] = {"us_per_step": dict(zip(contenders, measured.samples)),
                          "ParallelVectorEnv_speedup": summarize_ratios(theirs, ours)}
        ratio = report[env_id]["ParallelVectorEnv_speedup"]
        print(f"{env_id}: ParallelVectorEnv / SyncVectorEnv speed {ratio['median']:.3f}x "
              f"({ratio['min']:.3f}-{ratio['max']:.3f})", flush=True)
        for envs in contenders.values():
            envs.close()
    out = Path(__file__).with_name("swap_step.json")
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
