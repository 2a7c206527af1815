"""What the rollout workers' niceness buys (max_policy_lag=1): the recipe as it is, against the
same tree with the workers left at the learner's priority, interleaved, quiet and beside a busy
loop. Run from the repository root: ``python benchmarks/results/training_loop_2026-12-07/niceness.py``.

The other tree is a copy of ``src/`` with ``WORKER_NICENESS = 0``, put first on ``PYTHONPATH``
for its runs (their spawned workers inherit it)."""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))  # run as a script: the repository's packages

from benchmarks.training_loop import start_competitor  # noqa: E402
from parallel_rollouts.conformance.rounds import run_rounds, summarize_ratios  # noqa: E402
COPY = Path("/tmp/parallel-rollouts-no-niceness/src")


def _copy_without_niceness() -> None:
    shutil.rmtree(COPY.parent, ignore_errors=True)
    shutil.copytree(ROOT / "src", COPY)
    worker_main = COPY / "parallel_rollouts" / "processes" / "worker_main.py"
    text, count = re.subn(r"^WORKER_NICENESS = \d+$", "WORKER_NICENESS = 0", worker_main.read_text(), flags=re.M)
    assert count == 1
    worker_main.write_text(text)


def _run(tree: str) -> float:
    env = dict(os.environ)
    if tree == "niceness 0":
        env["PYTHONPATH"] = f"{COPY}{os.pathsep}{ROOT}"
    command = [sys.executable, "-m", "examples.ppo_recipe.train", "--total-timesteps", "16384", "--seed", "1"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])["loop_seconds"]


def main() -> None:
    _copy_without_niceness()
    report = {}
    for setting in ("quiet", "competitor"):
        competitor = start_competitor() if setting == "competitor" else None
        try:
            measured = run_rounds(["niceness 10", "niceness 0"], _run, rounds=7)
        finally:
            if competitor is not None:
                competitor.terminate()
                competitor.join()
        nice, plain = measured.samples
        report[setting] = {
            "niceness_10_seconds": nice, "niceness_0_seconds": plain,
            "speedup_of_niceness_10": summarize_ratios(plain, nice),
            "medians": [statistics.median(nice), statistics.median(plain)],
        }
        print(setting, json.dumps(report[setting]["speedup_of_niceness_10"]), flush=True)
    out = Path(__file__).with_name("niceness.json")
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
