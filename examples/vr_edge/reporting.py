"""What the training script shows: progress lines, held-out evaluations, the plot, the summary."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from examples.vr_edge.episodes import play_episodes

__all__ = ["Progress", "evaluate_returns", "format_summary", "plot_learning_curve"]


def evaluate_returns(
    policy: Callable[[np.ndarray], Any],
    seeds: Sequence[int],
    env_kwargs: dict[str, Any],
    history_steps: int = 1,
    rate_forecast: dict[str, Any] | None = None,
) -> dict[str, float]:
    """Mean episode return and its 95% confidence half-width over one episode per seed (the
    policy reading the last `history_steps` observations, with the rate forecast of
    `rate_forecast` if given, as `play_episodes`)."""
    records = play_episodes(policy, seeds, env_kwargs, history_steps, rate_forecast)
    returns = np.array([record["return"] for record in records])
    half_width = 1.96 * returns.std(ddof=1) / math.sqrt(returns.size) if returns.size > 1 else math.nan
    return {"mean": float(returns.mean()), "ci95": float(half_width)}


class Progress:
    """A tqdm bar when enabled and installed, otherwise about twenty plain lines per run."""

    def __init__(self, total: int, enabled: bool) -> None:
        self._total = total
        self._bar = None
        self._print_every = max(1, total // 20)
        self._latest_return = math.nan
        self._latest_evaluation = math.nan
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:
                print("tqdm is not installed (pip install \".[examples]\"); printing plain progress lines.")
            else:
                self._bar = tqdm(total=total, unit="update", dynamic_ncols=True)

    def advance(self, record: dict[str, Any]) -> None:
        # Keep showing the last known values through updates that produced none.
        if not math.isnan(record["episode_return_mean"]):
            self._latest_return = record["episode_return_mean"]
        if record.get("eval_return_mean") is not None:
            self._latest_evaluation = record["eval_return_mean"]
        if self._bar is not None:
            self._bar.set_postfix(
                train_return=f"{self._latest_return:.1f}",
                eval_return=f"{self._latest_evaluation:.1f}",
                transitions_per_s=f"{record['transitions_per_second']:.0f}",
            )
            self._bar.update()
        elif record["update"] in (1, self._total) or record["update"] % self._print_every == 0:  # the first at once
            print(
                f"update {record['update']}/{self._total}  step {record['global_step']}  "
                f"train return {self._latest_return:.1f}  held-out return {self._latest_evaluation:.1f}  "
                f"{record['transitions_per_second']:.0f} transitions/s",
                flush=True,
            )

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._bar is not None:
            self._bar.close()


def plot_learning_curve(
    evaluations: list[dict[str, Any]], baselines: dict[str, dict[str, float]], path: Path, title: str
) -> None:
    """Held-out return of the deterministic policy against training steps, baselines as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7.5, 4.5))
    steps = np.array([entry["global_step"] for entry in evaluations])
    means = np.array([entry["mean"] for entry in evaluations])
    half_widths = np.array([entry["ci95"] for entry in evaluations])
    axes.plot(steps, means, marker="o", color="black", linewidth=1.5, label="PPO (deterministic)")
    axes.fill_between(steps, means - half_widths, means + half_widths, color="black", alpha=0.12)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for colour, (name, score) in zip(colours, baselines.items()):
        axes.axhline(score["mean"], color=colour, linestyle="--", linewidth=1, label=f"{name} ({score['mean']:.1f})")
    axes.set_xlabel("environment steps")
    axes.set_ylabel("mean episode return on held-out seeds\n(test traces; band: 95% CI)")
    axes.set_title(title, fontsize=10)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def format_summary(summary: dict[str, Any]) -> str:
    """The lines printed at the end of a training run."""
    final = summary["final_evaluation"]
    lines = [
        f"Trained {summary['global_step']:,} steps ({summary['num_updates']} updates, "
        f"{summary['args']['num_envs']} envs, backend {summary['args']['backend']}) in "
        f"{summary['wall_seconds'] / 60:.1f} min.",
        f"Held-out evaluation ({summary['evaluation_episodes']} test-trace episodes, deterministic policy): "
        f"PPO {final['mean']:.1f} ± {final['ci95']:.1f} (95% CI)",
    ]
    for name, score in summary["baselines"].items():
        lines.append(f"  {name:<18} {score['mean']:7.1f} ± {score['ci95']:.1f}")
    lines.append(f"metrics: {summary['metrics_path']}")
    lines.append(f"policy:  {summary['policy_path']}")
    if summary["plot_path"] is not None:
        lines.append(f"plot:    {summary['plot_path']}")
    lines.append(
        f"Compare on more seeds: python -m examples.vr_edge.evaluate --policy {summary['policy_path']}"
    )
    return "\n".join(lines)
