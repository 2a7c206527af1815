"""Returns of the recipe against CleanRL's loop over seeds: the same PPO, so the recipe's mean
return of the last 20 episodes should sit within the seeds' spread of CleanRL's. Run from the
repository root: ``python benchmarks/results/training_loop_2026-12-07/returns.py [env_id steps seeds]``."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # run as a script: the repository's packages

from benchmarks.training_loop import run_one  # noqa: E402


def main() -> None:
    env_id = sys.argv[1] if len(sys.argv) > 1 else "CartPole-v1"
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
    seeds = range(1, 1 + (int(sys.argv[3]) if len(sys.argv) > 3 else 5))
    report = {"env_id": env_id, "steps": steps, "runs": {}}
    for name in ("cleanrl_1t", "recipe"):
        runs = [run_one(name, env_id, steps, seed) for seed in seeds]
        finals = [run["final_return"] for run in runs]
        report["runs"][name] = {"final_returns": finals, "mean": statistics.mean(finals), "sd": statistics.stdev(finals),
                                "loop_seconds": [run["loop_seconds"] for run in runs]}
        print(name, [round(value, 1) for value in finals], flush=True)
    out = Path(__file__).with_name(f"returns_{env_id.replace('/', '_')}.json")
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
