"""Spot a straggler with the batch's per-env timing; writes ``docs/images/straggler.png``.

Eight CartPole envs on ``backend="async"`` with 4 workers; env 5 is deliberately slow (its
``step`` sleeps 1 ms). One ``collect()`` is enough to see it: the left panel plots each env's
seconds in ``step`` and ``reset`` (``batch.env_step_seconds``, ``batch.env_reset_seconds``), the
right one the seconds the main process waited for each env's worker (``batch.env_wait_seconds``).

    python -m benchmarks.straggler_plot
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

import gymnasium as gym
import numpy as np

from parallel_rollouts import ParallelRolloutCollector

OUT = Path(__file__).resolve().parent.parent / "docs" / "images" / "straggler.png"
SLOW_ENV = 5


class SlowStep(gym.Wrapper):
    """A simulator that is slower than its neighbours: 1 ms more per step."""

    def step(self, action):
        time.sleep(0.001)
        return self.env.step(action)


def make(index: int) -> gym.Env:
    env = gym.make("CartPole-v1")
    return SlowStep(env) if index == SLOW_ENV else env


def main(argv: list[str] | None = None) -> int:
    import argparse

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--horizon", type=int, default=256)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    fns = [partial(make, index) for index in range(8)]
    with ParallelRolloutCollector(fns, None, "async", horizon=args.horizon, seed=0, num_workers=4) as collector:
        collector.collect()
        batch = collector.collect()
    envs = np.arange(batch.num_envs)
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    left.bar(envs, batch.env_step_seconds * 1e3, label="step")
    left.bar(envs, batch.env_reset_seconds * 1e3, bottom=batch.env_step_seconds * 1e3, label="reset")
    left.set(xlabel="env index", ylabel="ms in the env over one collect", title="env_step_seconds + env_reset_seconds")
    left.legend()
    right.bar(envs, batch.env_wait_seconds * 1e3, color="tab:gray")
    right.set(xlabel="env index (pairs share a worker)", ylabel="ms waited for its worker", title="env_wait_seconds")
    figure.suptitle(f"horizon {batch.horizon}, 8 CartPole envs, 4 workers: env {SLOW_ENV} is the straggler")
    figure.tight_layout()
    figure.savefig(args.out, dpi=110)
    slowest = int(np.argmax(batch.env_step_seconds + batch.env_reset_seconds))
    print(f"slowest env: {slowest}; wrote {args.out}")
    return slowest


if __name__ == "__main__":
    main()
