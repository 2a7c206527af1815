"""Train the GRU and the feed-forward policy on the same seeds and compare their scores.

    python -m examples.recurrent_ppo.compare                 # 3 seeds x 2 policies, one run at a time
    python -m examples.recurrent_ppo.compare --jobs 2        # two runs at once (one core each)

Each run is `python -m examples.recurrent_ppo.train --policy {gru,mlp} --seed S` in its own
process with the script's defaults (one torch thread), so a run's numbers do not depend on what
ran before it. A run's score is the mean return of its last 10 evaluations (the deterministic
policy on 8 fixed held-out episodes, every 10 updates). The comparison holds on a seed when the
GRU's score is at least `--required-ratio` (2) times the MLP's.

It writes `--results` (JSON: every run's evaluations, score, wall-clock and CPU seconds, the
ratio per seed and whether the comparison held on every seed) and, when matplotlib is
installed, `--plot` (the evaluation curves of every run). The exit status is 0 when the
comparison held on every seed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

POLICIES = ("gru", "mlp")
POLICY_LABELS = {"gru": "GRU (recurrent)", "mlp": "MLP (feed-forward)"}


def run_training(policy: str, seed: int, output: Path, extra_args: list[str]) -> dict[str, Any]:
    """One training run in a fresh process; its results as `train.py --output` writes them."""
    command = [sys.executable, "-m", "examples.recurrent_ppo.train", "--policy", policy, "--seed", str(seed)]
    command += ["--output", str(output), *extra_args]
    # One intra-op thread for torch and for whatever BLAS the process loads: a run is one core.
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    completed = subprocess.run(command, env=environment, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise RuntimeError(
            f"`{' '.join(command)}` exited with status {completed.returncode}; its last output:\n"
            f"{completed.stdout[-2000:]}{completed.stderr[-4000:]}"
        )
    print(completed.stdout.strip().splitlines()[-2], flush=True)
    return condensed(json.loads(output.read_text()))


def condensed(run: dict[str, Any]) -> dict[str, Any]:
    """A run's results without the per-update metrics, plus two numbers drawn from them.

    `max_value_recompute_error`: the largest difference, over the run, between a value the policy
    returned while collecting and the one the update recomputed from the batch's `initial_state`
    and `episode_starts` (zero when every state was recomputed exactly). `training_return_mean`:
    the mean return of the episodes that ended in the last 10 rollouts, played by the sampling
    (not the deterministic) policy.
    """
    last_updates = run["updates"][-10:]
    training_returns = [update["episode_return_mean"] for update in last_updates if update["episode_return_mean"] is not None]
    summary = {name: value for name, value in run.items() if name != "updates"}
    summary["max_value_recompute_error"] = max(update["value_recompute_error"] for update in run["updates"])
    summary["training_return_mean"] = float(np.mean(training_returns)) if training_returns else None
    return summary


def summarise(runs: dict[str, dict[int, dict[str, Any]]], seeds: list[int], required_ratio: float) -> dict[str, Any]:
    """The numbers the docs quote: per seed each policy's score and time, the ratio, the verdict."""
    per_seed = []
    for seed in seeds:
        gru, mlp = runs["gru"][seed], runs["mlp"][seed]
        ratio = gru["score"] / mlp["score"]
        per_seed.append(
            {
                "seed": seed,
                "gru_score": gru["score"],
                "mlp_score": mlp["score"],
                "ratio": ratio,
                "holds": ratio >= required_ratio,
                "gru_training_return_mean": gru["training_return_mean"],
                "mlp_training_return_mean": mlp["training_return_mean"],
                "gru_wall_seconds": gru["wall_seconds"],
                "gru_cpu_seconds": gru["cpu_seconds"],
                "mlp_wall_seconds": mlp["wall_seconds"],
                "mlp_cpu_seconds": mlp["cpu_seconds"],
            }
        )
    return {
        "required_ratio": required_ratio,
        "holds_on_every_seed": all(entry["holds"] for entry in per_seed),
        "per_seed": per_seed,
    }


def plot(runs: dict[str, dict[int, dict[str, Any]]], summary: dict[str, Any], path: Path) -> None:
    """Evaluation return against training steps, one line per run, one colour per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7.5, 4.5))
    colours = {"gru": "tab:blue", "mlp": "tab:orange"}
    for policy in POLICIES:
        for index, (seed, run) in enumerate(sorted(runs[policy].items())):
            steps = [evaluation["global_step"] for evaluation in run["evaluations"]]
            returns = [evaluation["return_mean"] for evaluation in run["evaluations"]]
            label = POLICY_LABELS[policy] if index == 0 else None
            axes.plot(steps, returns, color=colours[policy], linewidth=1.2, alpha=0.85, label=label)
    ratios = ", ".join(f"{entry['ratio']:.1f}x" for entry in summary["per_seed"])
    axes.set_title(
        f"PPO on CartPole-v1 with the velocities hidden, {len(summary['per_seed'])} seeds each\n"
        f"GRU / MLP score (mean of the last 10 evaluations) per seed: {ratios}",
        fontsize=10,
    )
    axes.set_xlabel("environment steps")
    axes.set_ylabel("mean return, deterministic policy\n(8 held-out episodes)")
    axes.set_ylim(0, 510)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=9, loc="upper left")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="training seeds (default: 1 2 3)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once, one core each (default: 1)")
    parser.add_argument("--required-ratio", type=float, default=2.0, help="GRU score / MLP score to reach (default: 2)")
    parser.add_argument(
        "--results", type=Path, default=Path("docs/recurrent-ppo-results.json"), help="where to write the JSON results"
    )
    parser.add_argument(
        "--plot", type=Path, default=Path("docs/images/recurrent_ppo_returns.png"), help="where to write the plot"
    )
    parser.add_argument(
        "train_args", nargs="*", help="passed to every train.py run after `--` (e.g. -- --total-timesteps 20000)"
    )
    args = parser.parse_args(argv)

    started = time.perf_counter()
    runs: dict[str, dict[int, dict[str, Any]]] = {policy: {} for policy in POLICIES}
    with tempfile.TemporaryDirectory() as scratch, ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {
            (policy, seed): pool.submit(
                run_training, policy, seed, Path(scratch) / f"{policy}-{seed}.json", args.train_args
            )
            for seed in args.seeds
            for policy in POLICIES
        }
        for (policy, seed), future in futures.items():
            runs[policy][seed] = future.result()

    summary = summarise(runs, args.seeds, args.required_ratio)
    results = {
        "command": "python -m examples.recurrent_ppo.compare " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {"platform": platform.platform(), "processor": platform.processor(), "cpu_count": os.cpu_count()},
        "jobs": args.jobs,
        "total_wall_seconds": time.perf_counter() - started,
        "summary": summary,
        "runs": {policy: {str(seed): run for seed, run in runs[policy].items()} for policy in POLICIES},
    }
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(results, indent=1) + "\n")
    for entry in summary["per_seed"]:
        print(
            f"seed {entry['seed']}: GRU {entry['gru_score']:6.1f} ({entry['gru_cpu_seconds']:4.0f} s CPU)  "
            f"MLP {entry['mlp_score']:6.1f} ({entry['mlp_cpu_seconds']:4.0f} s CPU)  ratio {entry['ratio']:.1f}"
        )
    mean_gru = np.mean([entry["gru_score"] for entry in summary["per_seed"]])
    mean_mlp = np.mean([entry["mlp_score"] for entry in summary["per_seed"]])
    verdict = "holds" if summary["holds_on_every_seed"] else "does not hold"
    print(f"mean score: GRU {mean_gru:.1f}, MLP {mean_mlp:.1f}; GRU >= {args.required_ratio:g}x MLP {verdict} on every seed")
    print(f"wrote {args.results}")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("matplotlib is not installed (pip install '.[examples]'): no plot")
    else:
        plot(runs, summary, args.plot)
        print(f"wrote {args.plot}")
    return 0 if summary["holds_on_every_seed"] else 1


if __name__ == "__main__":
    sys.exit(main())
