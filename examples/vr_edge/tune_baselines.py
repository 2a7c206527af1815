"""Tune every baseline's parameters by grid search on tuning seeds, and record the result.

    python -m examples.vr_edge.tune_baselines

Each baseline in `examples.vr_edge.baselines` is run with every combination of its grid below
on `--episodes` episodes of the *train* traces, jittered as `train.py` jitters them, reset seeds
`range(--first-seed, ...)` (0 on by default: disjoint from the periodic-evaluation seeds of
`train.py`, 2,000,000 on, and from `evaluate.py`'s, 3,000,000 on, which also use the test
traces). Every session guard of `STALL_GUARD_GRID` but the last (1, off, which the grid used)
is then tried on the grid's best distinct points (`guard_leaders`). The combination with the
highest mean return wins. The winners are written to `examples/vr_edge/tuned_baselines.json`, which
`baselines.tuned_baselines` reads, and every score to `--report` (a JSON file), so the choice
can be checked.

`--report-delay-steps` and `--report-noise` tune on that variant of the env instead (the
winners then go to another `--tuned` file: the default one serves today's env), and
`--predictor` gives the predictive lookahead a rate predictor fitted for it
(`python -m examples.vr_edge.forecast --report-delay-steps ...`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from examples.vr_edge.baselines import BASELINES, TUNED_PATH
from examples.vr_edge.episodes import play_episodes
from examples.vr_edge.synthetic_env import ObservationLayout
from examples.vr_edge.traces import TRAINING_TRACE_JITTER

GRIDS: dict[str, dict[str, list[Any]]] = {
    "constant level": {"level": [0, 1, 2, 3, 4, 5]},
    "throughput rule": {
        "safety": [0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0],
        "window": [1, 2, 3, 5, 8],
        "trend": [0.0, 1.0],
    },
    "deadline rule": {
        "late_threshold": [0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3],
        "headroom": [0.5, 0.55, 0.6, 0.65, 0.7, 0.8, 0.9],
    },
    "lookahead (MPC)": {
        "horizon": [1, 2, 3, 5, 10, 20],
        "frame_time_std": [0.2, 0.3, 0.4, 0.5, 0.7, 0.85, 1.0, 1.2, 1.5],
        "window": [2, 3, 5, 8],
    },
    "joint greedy": {
        "airtime_budget": [0.3, 0.4, 0.5, 0.6, 0.8, 1.0],
        "gpu_budget": [0.5, 0.6, 0.7, 0.8, 0.9, 1.0],
    },
    "joint expected reward": {
        "window": [1, 2, 3, 5],
        "frame_time_std": [0.4, 0.6, 0.8, 1.0, 1.2, 1.5],
        "rate_margin": [0.6, 0.7, 0.8, 0.9, 1.0],
    },
    "joint lookahead": {
        "horizon": [2, 3],
        "window": [2, 3, 5],
        "frame_time_std": [0.4, 0.6, 0.8, 1.0, 1.2, 1.5],
        "rate_margin": [0.6, 0.7, 0.8, 0.9, 1.0],
        "trend": [0.0, 0.5, 1.0],
        "forecast_std": [0.05, 0.1, 0.2],
        "discount": [0.8, 0.9, 1.0],
    },
    "predictive lookahead": {
        "horizon": [1, 2],
        "frame_time_std": [0.4, 0.6, 0.8, 1.0, 1.2, 1.5],
        "rate_margin": [0.6, 0.7, 0.8, 0.9, 1.0],
        "uncertainty": [0.5, 1.0, 1.5, 2.0],
        "discount": [0.8, 0.9, 1.0],
    },
}
# The controllers the full-grid protocol (`tune`, `--full-grid`) was written for; the joint
# controllers' grids are too large to play whole.
FULL_GRID_NAMES = ["constant level", "throughput rule", "deadline rule", "lookahead (MPC)", "joint greedy"]
# Evaluations each controller gets under the equal-budget protocol (`tune_with_budget`).
DEFAULT_BUDGET = 8

# Tried on each baseline's GUARD_CANDIDATES best distinct grid points; 1.0 (the last) is off, the grids' default.
STALL_GUARD_GRID = [0.005, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.85, 1.0]
GUARD_CANDIDATES = 5


def guard_leaders(grid_scores: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The grid points the session guard is tried on: the `GUARD_CANDIDATES` best distinct scores.

    The guard acts only on users close to failing, so a full product with every grid would mostly
    repeat the grid. Points that tie exactly are one controller in effect (every deadline-rule
    `late_threshold` below 1/8 is), so only the first of each score is kept: five copies of one
    controller would leave the guard four fewer real candidates.
    """
    distinct: dict[float, dict[str, Any]] = {}
    for entry in grid_scores:
        distinct.setdefault(entry["mean_return"], entry)
    return sorted(distinct.values(), key=lambda entry: -entry["mean_return"])[:GUARD_CANDIDATES]


def tune(
    episodes: int, first_seed: int, names: list[str], num_users: int = 8, trace_jitter: float = TRAINING_TRACE_JITTER
) -> dict[str, Any]:
    """Score every grid point of the named baselines; return the winners and all scores."""
    layout = ObservationLayout(num_users)
    seeds = range(first_seed, first_seed + episodes)
    env_kwargs = {"num_users": num_users, "traces": "train", "trace_jitter": trace_jitter}
    best: dict[str, dict[str, Any]] = {}
    scores: dict[str, list[dict[str, Any]]] = {}

    def score(name: str, params: dict[str, Any]) -> None:
        returns = [record["return"] for record in play_episodes(BASELINES[name](layout, **params), seeds, env_kwargs)]
        scores[name].append({"params": params, "mean_return": float(np.mean(returns))})

    for name in names:
        grid = GRIDS[name]
        scores[name] = []
        for values in itertools.product(*grid.values()):
            score(name, dict(zip(grid, values)))
        for leader, stall_guard in itertools.product(guard_leaders(scores[name]), STALL_GUARD_GRID[:-1]):
            score(name, {**leader["params"], "stall_guard": stall_guard})
        winner = max(scores[name], key=lambda entry: entry["mean_return"])
        best[name] = winner["params"]
        print(f"{name:<18} best {winner['params']} -> {winner['mean_return']:.1f} (of {len(scores[name])})", flush=True)
    return {
        "tuned": best, "scores": scores, "episodes": episodes, "first_seed": first_seed, "traces": "train",
        "trace_jitter": trace_jitter,
    }


def search_space(name: str) -> dict[str, list[Any]]:
    """A controller's grid with the session guard as one more dimension."""
    return {**GRIDS[name], "stall_guard": STALL_GUARD_GRID}


def sample_points(space: dict[str, list[Any]], budget: int, rng: np.random.Generator) -> list[dict[str, Any]]:
    """`budget` distinct points of `space` drawn uniformly (all of them if there are no more)."""
    sizes = [len(values) for values in space.values()]
    total = int(np.prod(sizes))
    indices = np.arange(total) if total <= budget else np.sort(rng.choice(total, size=budget, replace=False))
    points = []
    for index in indices:
        point, remainder = {}, int(index)
        for (key, values), size in zip(reversed(space.items()), reversed(sizes)):
            remainder, position = divmod(remainder, size)
            point[key] = values[position]
        points.append({key: point[key] for key in space})
    return points


def tune_with_budget(
    episodes: int,
    first_seed: int,
    names: list[str],
    budget: int = DEFAULT_BUDGET,
    sample_seed: int = 0,
    num_users: int = 8,
    trace_jitter: float = TRAINING_TRACE_JITTER,
    env_options: dict[str, Any] | None = None,
    fixed_params: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Every named controller gets the same `budget` evaluations: points drawn at random from its
    grid and guard values (`search_space`), each scored on the same tuning episodes; the best wins.

    Random search is the fair choice when the spaces differ in size: no controller's result
    depends on how finely its grid happens to be written (a whole grid smaller than the budget is
    played whole).

    `env_options` are the env's variant options the episodes are played with; `fixed_params`
    gives a controller settings that are not tuned (the predictive lookahead's `predictor_path`),
    added to each of its points and recorded with them.
    """
    layout = ObservationLayout(num_users)
    seeds = range(first_seed, first_seed + episodes)
    env_kwargs = {"num_users": num_users, "traces": "train", "trace_jitter": trace_jitter, **(env_options or {})}
    best: dict[str, dict[str, Any]] = {}
    scores: dict[str, list[dict[str, Any]]] = {}
    for name in names:
        rng = np.random.default_rng([sample_seed, list(GRIDS).index(name)])
        scores[name] = []
        for point in sample_points(search_space(name), budget, rng):
            params = {**point, **(fixed_params or {}).get(name, {})}
            returns = [record["return"] for record in play_episodes(BASELINES[name](layout, **params), seeds, env_kwargs)]
            scores[name].append({"params": params, "mean_return": float(np.mean(returns))})
        winner = max(scores[name], key=lambda entry: entry["mean_return"])
        best[name] = winner["params"]
        print(f"{name:<22} best {winner['params']} -> {winner['mean_return']:.1f} (of {len(scores[name])})", flush=True)
    return {
        "tuned": best, "scores": scores, "episodes": episodes, "first_seed": first_seed, "traces": "train",
        "trace_jitter": trace_jitter, "budget": budget, "sample_seed": sample_seed, "protocol": "equal budget",
        **({"env_options": env_options} if env_options else {}),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description="Grid-search the baselines' parameters on tuning seeds (train traces).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--episodes", type=int, default=24, help="tuning episodes per grid point")
    parser.add_argument("--first-seed", type=int, default=0, help="reset seed of the first tuning episode")
    parser.add_argument(
        "--trace-jitter", type=float, default=TRAINING_TRACE_JITTER,
        help="per-episode spread of the train traces' parameters (train.py's default, so both see the same traces)",
    )
    parser.add_argument(
        "--budget", type=int, default=DEFAULT_BUDGET,
        help="evaluations per controller (points drawn at random from its grid and guard values)",
    )
    parser.add_argument(
        "--full-grid", action="store_true",
        help="the earlier protocol instead: every grid point, then the guard on the five best (first five controllers only)",
    )
    parser.add_argument(
        "--report-delay-steps", type=int, default=0, help="tune on the env variant whose client reports arrive this late"
    )
    parser.add_argument("--report-noise", type=float, default=0.0, help="tune on the variant with this report noise")
    parser.add_argument(
        "--predictor", default=None, help="the predictive lookahead's rate predictor (default: the one for today's env)"
    )
    parser.add_argument("--report", default="docs/vr-edge-tuning.json", help="where every grid point's score goes")
    parser.add_argument("--tuned", default=str(TUNED_PATH), help="where the winning parameters go")
    parser.add_argument(
        "--baselines", nargs="+", default=None, choices=list(GRIDS), metavar="NAME",
        help="tune only these (the others keep their entries in --tuned and --report); by default the "
        "joint controllers, or with --full-grid the five it covers",
    )
    args = parser.parse_args(argv)
    if args.episodes < 1:
        parser.error(f"--episodes must be >= 1; got {args.episodes}.")
    if not args.trace_jitter >= 0:
        parser.error(f"--trace-jitter must be >= 0; got {args.trace_jitter}.")
    if args.report_delay_steps < 0 or not args.report_noise >= 0:
        parser.error(
            f"--report-delay-steps and --report-noise must be >= 0; got {args.report_delay_steps} and {args.report_noise}."
        )
    env_options = {
        name: value for name, value in (("report_delay_steps", args.report_delay_steps), ("report_noise", args.report_noise))
        if value
    }
    if env_options and Path(args.tuned).resolve() == TUNED_PATH.resolve():
        parser.error(
            f"tuning on a variant ({env_options}) would overwrite {TUNED_PATH.name}, today's env's parameters; "
            "name another file with --tuned (and --report)."
        )
    if env_options and args.full_grid:
        parser.error("--full-grid tunes today's env only; drop it or the variant options.")
    if args.predictor is not None and not Path(args.predictor).is_file():
        parser.error(f"--predictor {args.predictor!r} is not a file; fit one with `python -m examples.vr_edge.forecast`.")
    fixed_params = {"predictive lookahead": {"predictor_path": args.predictor}} if args.predictor else None
    started = time.perf_counter()
    if args.budget < 1:
        parser.error(f"--budget must be >= 1; got {args.budget}.")
    if args.baselines is None:
        args.baselines = FULL_GRID_NAMES if args.full_grid else [name for name in GRIDS if name not in FULL_GRID_NAMES]
    if args.full_grid:
        unsupported = sorted(set(args.baselines) - set(FULL_GRID_NAMES))
        if unsupported:
            parser.error(f"--full-grid covers only {FULL_GRID_NAMES}; also asked for {unsupported}.")
        result = tune(args.episodes, args.first_seed, args.baselines, trace_jitter=args.trace_jitter)
    else:
        result = tune_with_budget(
            args.episodes, args.first_seed, args.baselines, args.budget, trace_jitter=args.trace_jitter,
            env_options=env_options, fixed_params=fixed_params,
        )
    result["wall_seconds"] = time.perf_counter() - started
    # The report keeps each protocol's scores apart, and controllers not tuned in this run keep
    # what an earlier run recorded, in the report and in the tuned parameters.
    section = "full_grid" if args.full_grid else "equal_budget"
    report = json.loads(Path(args.report).read_text()) if Path(args.report).is_file() else {}
    previous = report.get(section, {})
    report[section] = {
        **result,
        "scores": {**previous.get("scores", {}), **result["scores"]},
        "tuned": {**previous.get("tuned", {}), **result["tuned"]},
    }
    tuned = json.loads(Path(args.tuned).read_text()) if Path(args.tuned).is_file() else {}
    tuned.update(result["tuned"])
    tuned = {name: tuned[name] for name in GRIDS if name in tuned}
    for path, content in ((args.report, report), (args.tuned, tuned)):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(content, indent=2) + "\n")
    print(f"Wrote the tuned parameters to {args.tuned} and every score to {args.report} "
          f"({result['wall_seconds'] / 60:.1f} min).")
    return result


if __name__ == "__main__":
    main()
