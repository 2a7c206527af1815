"""Compare trained PPO policies with the tuned baselines on the same held-out episodes.

    python -m examples.vr_edge.evaluate --policy runs/vr_edge/policy.pt

Every policy plays the same episodes: one `env.reset(seed=s)` per seed in
`range(--first-seed, --first-seed + --episodes)` on the *test* traces, which neither training
nor baseline tuning sees (training draws 32-bit reset seeds from its own streams and the
jittered train traces; tuning uses seeds 0 on, the same traces). The test traces are played as
they are, never jittered. PPO acts deterministically (each user's most
probable level).

Prints, as Markdown: each policy's mean episode return with a 95% confidence interval; for
each PPO policy, the paired difference to every baseline (PPO minus baseline, per seed, mean
and 95% CI; above zero means PPO is better on these seeds); the mean return by trace regime, and
each PPO policy's paired difference to the best baseline (the highest mean return on these
seeds) by regime; and the QoE of every policy.
`--json` writes all numbers, `--markdown` the printed tables. While it plays (minutes for the
default 200 episodes), a line per policy on stderr says how far it is.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from examples.vr_edge.agent import CollectorPolicy, load_agent
from examples.vr_edge.baselines import BASELINES, TUNED_PATH, load_tuned, tuned_baselines
from examples.vr_edge.clairvoyant import play_clairvoyant
from examples.vr_edge.episodes import QOE_METRICS, play_episodes
from examples.vr_edge.observation_history import make_env
from examples.vr_edge.synthetic_env import SyntheticVREdgeEnv

# The final comparison's seeds: never used for tuning, training or choosing a setting (train.py's
# periodic evaluation and the development checks use 2,000,000 on; seeds 1,000,000-1,000,049
# served two earlier comparisons, so they are no longer fresh).
DEFAULT_FIRST_SEED = 3_000_000
# Paired differences between the best controllers have a standard deviation of 5-10 per episode,
# mostly across trace regimes; 200 episodes bring the 95% half-width to 0.7-1.4.
DEFAULT_EPISODES = 200
# Two-sided 95% normal quantile; with 200 paired seeds the t quantile (1.97) differs by 0.5%.
Z95 = 1.96


def _interval(values: np.ndarray) -> dict[str, float | None]:
    """Mean and normal 95% interval; the bounds are None (JSON null) for fewer than two values."""
    if values.size < 2:
        return {"mean": float(values.mean()), "ci95_low": None, "ci95_high": None}
    half_width = Z95 * values.std(ddof=1) / math.sqrt(values.size)
    return {"mean": float(values.mean()), "ci95_low": float(values.mean() - half_width),
            "ci95_high": float(values.mean() + half_width)}


def _difference_cell(score: dict[str, float | None]) -> str:
    if score["ci95_low"] is None:
        return f"{score['mean']:+.1f} [n/a]"
    return f"{score['mean']:+.1f} [{score['ci95_low']:+.1f}, {score['ci95_high']:+.1f}]"


def evaluate_policies(
    policy_paths: list[str],
    episodes: int = DEFAULT_EPISODES,
    first_seed: int = DEFAULT_FIRST_SEED,
    clairvoyant_horizon: int = 0,
    earlier: list[dict[str, Any]] = (),
    baseline_names: list[str] | None = None,
    tuned_path: str | Path = TUNED_PATH,
) -> dict[str, Any]:
    """Play every baseline and policy on the same test-trace seeds; return all the numbers.

    With `clairvoyant_horizon` > 0 the clairvoyant reference (`examples.vr_edge.clairvoyant`,
    told the true conditions of that many steps ahead) plays the same seeds too; it is a bound,
    not a baseline, so it is never the best baseline.

    `earlier`, results of earlier calls on the same seeds and env with the same tuned
    parameters, lend their baselines' and references' episodes instead of playing them again
    (every controller is deterministic for a seed, so they would be the same): the controllers
    can be played in separate processes (`baseline_names` picks which; all by default) and
    brought together.

    `tuned_path` names the baselines' tuned parameters (today's env's by default; a file tuned
    on the policy's env variant, which may hold only some controllers, for a fair comparison).
    """
    agents = [load_agent(path) for path in policy_paths]
    # The test split as it is: training's trace jitter never applies to an evaluation.
    env_kwargs = {**agents[0][1].get("env_kwargs", {}), "traces": "test", "trace_jitter": 0.0}
    layout = SyntheticVREdgeEnv(**env_kwargs).observation_layout
    for path, (agent, checkpoint) in zip(policy_paths, agents):
        steps = checkpoint.get("history_steps", 1)
        expected = make_env(steps, checkpoint.get("rate_forecast"), **env_kwargs).observation_space.shape[0]
        if agent.observation_size != expected:
            raise ValueError(
                f"the policy in {path!r} reads observations of size {agent.observation_size} "
                f"({agent.num_users} users); the env's, read {steps} at a time"
                f"{' with the rate forecast' if 'rate_forecast' in checkpoint else ''}, have size {expected} "
                f"({layout.num_users} users)."
            )
    seeds = list(range(first_seed, first_seed + episodes))
    # Observations a policy reads at once (`train.py --history-steps`); the baselines read one.
    history_steps: dict[str, int] = {}
    # The rate predictor whose forecast a policy reads (`train.py --rate-forecast`), if any.
    rate_forecasts: dict[str, dict[str, Any]] = {}
    policies: dict[str, Any] = {
        name: policy for name, policy in tuned_baselines(layout, tuned_path).items()
        if baseline_names is None or name in baseline_names
    }
    ppo_names = []
    for index, (path, (agent, checkpoint)) in enumerate(zip(policy_paths, agents)):
        seed = checkpoint.get("args", {}).get("seed", "?")
        name = f"PPO (seed {seed})"
        if name in policies:
            name = f"PPO (seed {seed}, #{index + 1})"
        ppo_names.append(name)
        policies[name] = CollectorPolicy(agent, deterministic=True)
        history_steps[name] = checkpoint.get("history_steps", 1)
        if "rate_forecast" in checkpoint:
            rate_forecasts[name] = checkpoint["rate_forecast"]

    lent = {}
    for result in earlier:
        lent.update(_lent_records(result, episodes, first_seed, env_kwargs, load_tuned(tuned_path)))
    for name in lent:
        if name in BASELINES and name not in policies:
            policies[name] = None  # played elsewhere; its episodes are lent
    order = [name for name in BASELINES if name in policies] + ppo_names
    policies = {name: policies[name] for name in order}
    clairvoyant = (
        f"clairvoyant ({clairvoyant_horizon} step{'s' if clairvoyant_horizon > 1 else ''} ahead)"
        if clairvoyant_horizon else None
    )
    to_play = [name for name in [*policies, *([clairvoyant] if clairvoyant else [])] if not lent.get(name)]
    _progress(f"{len(to_play)} to play on {len(seeds)} episodes each"
              + (f", {len(policies) + bool(clairvoyant) - len(to_play)} lent" if lent else ""))
    records = {}
    for name, policy in policies.items():
        records[name] = lent.get(name) or _played(
            name, to_play, len(seeds),
            lambda: play_episodes(policy, seeds, env_kwargs, history_steps.get(name, 1), rate_forecasts.get(name)),
        )
    references = []
    if clairvoyant:
        records[clairvoyant] = lent.get(clairvoyant) or _played(
            clairvoyant, to_play, len(seeds), lambda: play_clairvoyant(seeds, env_kwargs, horizon=clairvoyant_horizon)
        )
        references.append(clairvoyant)
    returns = {name: np.array([record["return"] for record in episode_records]) for name, episode_records in records.items()}
    baseline_names = [name for name in policies if name not in ppo_names]
    if not baseline_names:
        raise ValueError(
            "no baseline to compare PPO with: name at least one in --baselines, or lend an earlier "
            "evaluation's with --baselines-from."
        )
    compared = ppo_names + references
    best_baseline = max(baseline_names, key=lambda name: returns[name].mean())
    # The regime each seed's episode plays: a reset draws it first, whatever the policy.
    probe = SyntheticVREdgeEnv(**env_kwargs)
    regimes = np.array([probe.reset(seed=seed)[1]["regime"] for seed in seeds])
    regime_names = sorted(set(regimes.tolist()))
    return {
        "episodes": episodes,
        "first_seed": first_seed,
        "traces": "test",
        "env_kwargs": env_kwargs,
        "returns": {name: _interval(values) for name, values in returns.items()},
        "paired_differences": {
            ppo: {baseline: _interval(returns[ppo] - returns[baseline]) for baseline in baseline_names}
            for ppo in ppo_names
        },
        "best_baseline": best_baseline,
        "regime_episodes": {regime: int((regimes == regime).sum()) for regime in regime_names},
        "returns_by_regime": {
            name: {regime: float(values[regimes == regime].mean()) for regime in regime_names}
            for name, values in returns.items()
        },
        "paired_differences_by_regime": {
            ppo: {
                regime: _interval(returns[ppo][regimes == regime] - returns[best_baseline][regimes == regime])
                for regime in regime_names
            }
            for ppo in ppo_names
        },
        "references": references,
        # Every other policy, the reference included, against the best baseline: overall and by regime.
        "differences_to_best": {
            name: {
                "all": _interval(returns[name] - returns[best_baseline]),
                **{regime: _interval(returns[name][regimes == regime] - returns[best_baseline][regimes == regime])
                   for regime in regime_names},
            }
            for name in [*baseline_names, *compared] if name != best_baseline
        },
        "regimes": regimes.tolist(),
        "qoe": {
            name: {metric: float(np.mean([record[metric] for record in episode_records])) for metric in QOE_METRICS}
            for name, episode_records in records.items()
        },
        "per_episode_returns": {name: values.tolist() for name, values in returns.items()},
        "per_episode_records": records,
        "tuned_parameters": load_tuned(tuned_path),
        "tuned_path": str(tuned_path),
    }


def _progress(message: str) -> None:
    """One line on stderr: the evaluation takes minutes, the tables come at the end on stdout."""
    print(f"evaluate: {message}", file=sys.stderr, flush=True)


def _played(name: str, to_play: list[str], episodes: int, play: Callable[[], list]) -> list:
    """``play()``, announced with its place in ``to_play`` and followed by its mean return and time."""
    started = time.perf_counter()
    records = play()
    mean = float(np.mean([record["return"] for record in records]))
    _progress(f"{to_play.index(name) + 1}/{len(to_play)} {name}: {episodes} episodes, mean return {mean:.1f} "
              f"({time.perf_counter() - started:.0f} s)")
    return records


def _lent_records(
    earlier: dict[str, Any], episodes: int, first_seed: int, env_kwargs: dict[str, Any], tuned: dict[str, Any]
) -> dict[str, list[dict[str, float]]]:
    """The baselines' and references' episodes of `earlier`, after checking they are these ones."""
    mine = {"episodes": episodes, "first_seed": first_seed, "env_kwargs": env_kwargs, "tuned_parameters": tuned}
    for key, value in mine.items():
        if earlier.get(key) != value:
            raise ValueError(
                f"the earlier evaluation differs in {key!r} ({earlier.get(key)!r} there, {value!r} here); "
                "its episodes cannot stand in for this evaluation's."
            )
    return {
        name: episode_records for name, episode_records in earlier["per_episode_records"].items()
        if not name.startswith("PPO")
    }


def markdown_tables(result: dict[str, Any]) -> str:
    """The return, paired-difference and QoE tables of `evaluate_policies`' result."""
    lines = [
        f"Episode return on {result['episodes']} held-out seeds (test traces, seeds "
        f"{result['first_seed']}..{result['first_seed'] + result['episodes'] - 1}), mean [95% CI]:",
        "",
        "| policy | return |",
        "|---|---:|",
    ]
    for name, score in result["returns"].items():
        lines.append(f"| {name} | {score['mean']:.1f} [{score['ci95_low']:.1f}, {score['ci95_high']:.1f}] |")
    for ppo, differences in result["paired_differences"].items():
        lines += ["", f"Paired difference, {ppo} minus baseline (same seeds), mean [95% CI]:", "",
                  "| baseline | difference |", "|---|---:|"]
        for baseline, score in differences.items():
            lines.append(f"| {baseline} | {_difference_cell(score)} |")
    regimes = list(result["regime_episodes"])
    header = " | ".join(f"{regime} ({result['regime_episodes'][regime]})" for regime in regimes)
    lines += ["", "Mean return by trace regime (episodes in parentheses):", "",
              f"| policy | {header} |", "|---|" + "---:|" * len(regimes)]
    for name, by_regime in result["returns_by_regime"].items():
        lines.append(f"| {name} | " + " | ".join(f"{by_regime[regime]:.1f}" for regime in regimes) + " |")
    best = result["best_baseline"]
    lines += ["", f"Paired difference to the best baseline ({best}) by trace regime, mean [95% CI]:", "",
              f"| policy | {header} |", "|---|" + "---:|" * len(regimes)]
    for ppo, by_regime in result["paired_differences_by_regime"].items():
        lines.append(f"| {ppo} | " + " | ".join(_difference_cell(by_regime[regime]) for regime in regimes) + " |")
    lines += ["", f"Paired difference of every policy to the best baseline ({best}), all seeds and by trace regime, "
              "mean [95% CI]:", "", f"| policy | all ({result['episodes']}) | {header} |", "|---|---:|" + "---:|" * len(regimes)]
    for name, by_regime in result["differences_to_best"].items():
        cells = [_difference_cell(by_regime["all"])] + [_difference_cell(by_regime[regime]) for regime in regimes]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    metrics = list(QOE_METRICS)
    lines += ["", "QoE, mean over episodes (see `examples/vr_edge/episodes.py` for definitions):", "",
              "| policy | " + " | ".join(metrics) + " |", "|---|" + "---:|" * len(metrics)]
    for name, qoe in result["qoe"].items():
        lines.append(f"| {name} | " + " | ".join(f"{qoe[metric]:.3g}" for metric in metrics) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Evaluate, print the Markdown tables, write `--json` / `--markdown` if given, return the result."""
    parser = argparse.ArgumentParser(
        description="Compare trained PPO policies with the tuned baselines on held-out seeds.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    required = parser.add_argument_group("required arguments")
    required.add_argument(
        "--policy", required=True, nargs="+", help="policy.pt file(s) written by examples.vr_edge.train"
    )
    parser.add_argument("--episodes", type=int, default=DEFAULT_EPISODES, help="held-out episodes per policy")
    parser.add_argument("--first-seed", type=int, default=DEFAULT_FIRST_SEED, help="reset seed of the first episode")
    parser.add_argument(
        "--clairvoyant-horizon", type=int, default=0,
        help="also play the clairvoyant reference, told the true conditions this many steps ahead (0: not)",
    )
    parser.add_argument(
        "--baselines-from", nargs="+", default=[], metavar="JSON",
        help="--json files of earlier evaluations of the same seeds: reuse their baselines' and references' episodes",
    )
    parser.add_argument(
        "--baselines", nargs="*", default=None, choices=list(BASELINES), metavar="NAME",
        help="play only these baselines (all by default; none with the flag alone)",
    )
    parser.add_argument(
        "--tuned", default=str(TUNED_PATH),
        help="the baselines' tuned parameters (a file tuned on the policy's env variant plays only the controllers it holds)",
    )
    parser.add_argument("--json", default=None, help="also write every number to this JSON file")
    parser.add_argument("--markdown", default=None, help="also write the printed tables to this file")
    args = parser.parse_args(argv)
    if args.episodes < 2:
        parser.error(f"--episodes must be >= 2 (a confidence interval needs two); got {args.episodes}.")
    if args.first_seed < 0:
        parser.error(f"--first-seed must be >= 0; got {args.first_seed}.")
    for path in args.policy:
        if not Path(path).is_file():
            parser.error(f"--policy {path!r} is not a file; train one with `python -m examples.vr_edge.train`.")

    # A batch of 200 observations is too little work to share between threads, and idle
    # intra-op threads spinning for work slow everything down on a busy machine.
    torch.set_num_threads(1)
    if args.clairvoyant_horizon < 0:
        parser.error(f"--clairvoyant-horizon must be >= 0; got {args.clairvoyant_horizon}.")
    earlier = [json.loads(Path(path).read_text()) for path in args.baselines_from]
    result = evaluate_policies(
        args.policy, args.episodes, args.first_seed, args.clairvoyant_horizon, earlier, args.baselines, args.tuned
    )
    tables = markdown_tables(result)
    print(tables)
    # allow_nan=False: the file stays strict JSON (undefined intervals are null, never NaN).
    outputs = ((args.json, json.dumps(result, indent=2, allow_nan=False) + "\n"), (args.markdown, tables + "\n"))
    for path, content in outputs:
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(content)
            print(f"wrote {path}")
    return result


if __name__ == "__main__":
    multiprocessing.freeze_support()
    main()
