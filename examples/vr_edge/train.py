"""Train PPO on `SyntheticVREdgeEnv`, collecting rollouts with `ParallelRolloutCollector`.

    python -m examples.vr_edge.train --backend sync --num-envs 8

The script reads top to bottom: arguments, setup, then one loop iteration per update
(collect a rollout, estimate advantages, run the clipped PPO epochs, log). Unlike the usual
PPO script, a truncated episode (the 200-step time limit) is bootstrapped from the value of
its final observation instead of being scored as if the session had failed; see
`examples.vr_edge.advantages.compute_gae`.

It writes to `--output-dir`:

- `metrics.jsonl`: one JSON object per update (`null` for a mean over no episodes, or for the
  held-out evaluation of an update that ran none);
- `policy.pt`: the trained weights with the arguments that rebuild the network and the env
  (`python -m examples.vr_edge.evaluate --policy .../policy.pt` compares it to the baselines);
- `learning_curve.png` with `--plot`: the deterministic policy's return on held-out seeds of
  the test traces (every `--eval-every` updates) with the tuned baselines as horizontal lines.

`--report-delay-steps`, `--report-noise` and `--keyframe-extra-frames` train on a variant of the
env (late and noisy client reports, a keyframe per level switch; off by default). Training, the
periodic evaluation and the baselines at the end all play that variant, and the checkpoint's
`env_kwargs` record it, so `evaluate.py` plays the policy on the env it was trained on.
`--history-steps k` lets the policy read the last `k` observations side by side
(`examples.vr_edge.observation_history`); the checkpoint records `k` and `evaluate.py` plays the
policy through the same history. `--rate-forecast PATH` appends the forecast of the rate predictor
stored at `PATH` (`examples.vr_edge.forecast`) to each user's features
(`examples.vr_edge.rate_forecast_features`); the checkpoint records the predictor itself, and
`evaluate.py` plays the policy with the same forecast.

Training sees only the train traces, each episode's regime jittered by `--trace-jitter`
(`examples.vr_edge.traces.jittered_regime`). The run ends by printing a summary: the final held-out
evaluation next to the baselines' scores on the same seeds, and every path it wrote.

The same command and `--seed` give the same learning curve and the same final weights, bit for
bit, on one machine and library versions: the collector hands out batches that follow from the
seed, and torch runs single-threaded with deterministic kernels. With the policy in this process
(`--policy-placement main`, the default) every backend gives the same curve; with rollout workers
(`--backend async --policy-placement workers`) each worker samples from its own generator, seeded
by the library from `--seed` and its slice, so the curve is reproducible for that command and
worker count but differs from the main-process one. Thread counts in the environment, the hash
seed and the per-step core do not change a run. Across CPU models the curve is not kept by
default: MKL picks the kernels of torch's matrix products by CPU model, and one rounding
difference grows over a run; `--mkl-code-path compatible` pins MKL's reproducible `COMPATIBLE`
branch, the same on every x86-64 CPU for one MKL build, with other numbers than the default
(docs/vr-edge-results.md gives what was measured).
"""

import argparse
import dataclasses
import functools
import importlib.util
import inspect
import json
import math
import multiprocessing
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not {"-h", "--help"} & set(sys.argv[1:]):
    # Something on the screen before torch loads (seconds on a cold start); main() then says what it will do.
    print("examples.vr_edge.train: loading torch and the env...", flush=True)

import numpy as np
import torch

from examples.vr_edge.advantages import compute_gae
from examples.vr_edge.agent import MKL_CODE_PATHS, ActorCritic, CollectorPolicy, pin_mkl_code_path, save_agent, seed_torch
from examples.vr_edge.baselines import tuned_baselines
from examples.vr_edge.observation_history import make_env
from examples.vr_edge.reporting import Progress, evaluate_returns, format_summary, plot_learning_curve
from examples.vr_edge.synthetic_env import SyntheticVREdgeEnv
from examples.vr_edge.traces import TRAINING_TRACE_JITTER
from parallel_rollouts import ParallelRolloutCollector
from parallel_rollouts.collector import BACKENDS

INFO_KEYS = ("quality", "late_penalty", "drop_penalty", "switch_penalty", "late_rate", "drop_rate", "stall_time")
CORES = ("auto", "compiled", "python")
PLACEMENTS = ("main", "workers")
# The env's variant options (late and noisy client reports, a keyframe per level switch): a run
# trains and is evaluated on the variant it names, and its checkpoint records it.
VARIANT_OPTIONS = ("report_delay_steps", "report_noise", "keyframe_extra_frames")
# The env owns these defaults; the flags repeat none of them.
_ENV_DEFAULTS = {name: inspect.signature(SyntheticVREdgeEnv).parameters[name].default for name in VARIANT_OPTIONS}
#: Every step of the script in seconds: 4 updates, the evaluation and the baselines (about 15 s on 2 cores).
QUICK_RUN = "python -m examples.vr_edge.train --total-timesteps 4096"


def option(default: Any, description: str, choices: tuple[str, ...] | None = None) -> Any:
    """A dataclass field that carries its command-line help."""
    return field(default=default, metadata={"help": description, "choices": choices})


@dataclass
class Args:
    """Every knob of a run; each field becomes a command-line flag (`num_envs` -> `--num-envs`).

    The defaults need about six minutes of one CPU core, within ten minutes on a quiet 2-core
    machine (docs/vr-edge-results.md gives measured times and how the policy compares with tuned
    baselines).
    """

    backend: str = option("sync", "collector backend", choices=BACKENDS)
    policy_placement: str = option(
        "main", "where the policy acts: this process, or each async worker on its own slice (rollout workers)",
        choices=PLACEMENTS,
    )
    num_workers: int = option(0, "async worker processes (0: the library's default)")
    num_envs: int = option(8, "environments stepped in parallel")
    horizon: int = option(128, "steps per environment in each rollout")
    total_timesteps: int = option(614_400, "transitions to train on (rounded down to whole rollouts)")
    seed: int = option(1, "root seed of the environments, the network and the minibatch order")
    num_users: int = option(8, "user slots sharing the edge GPU and the cell")
    episode_length: int = option(200, "steps after which an episode is truncated")
    simulation_substeps: int = option(1, "frame-sampling rounds simulated per environment step")
    report_delay_steps: int = option(
        _ENV_DEFAULTS["report_delay_steps"], "env variant: steps a client's report takes to reach the server (0: none)"
    )
    report_noise: float = option(
        _ENV_DEFAULTS["report_noise"], "env variant: log-normal std of the noise on each reported rate (0: exact)"
    )
    keyframe_extra_frames: float = option(
        _ENV_DEFAULTS["keyframe_extra_frames"], "env variant: extra mean frames a level switch's keyframe costs (0: none)"
    )
    history_steps: int = option(
        1, "observations the policy reads, newest first (1: the latest only; more lets it follow late reports)"
    )
    rate_forecast: str = option(
        "", "a rate predictor's JSON file: append its per-user forecast (log rate change, log spread) to the "
        "policy's input ('': none)"
    )
    trace_jitter: float = option(
        TRAINING_TRACE_JITTER, "training only: scale each trace parameter by a per-episode factor in [1/(1+j), 1+j]"
    )
    eval_every: int = option(20, "evaluate the deterministic policy on held-out seeds every this many updates")
    eval_episodes: int = option(16, "held-out episodes (test traces) per periodic evaluation")
    eval_first_seed: int = option(
        2_000_000, "reset seed of the first periodic-evaluation episode (evaluate.py uses 3,000,000 on)"
    )
    learning_rate: float = option(1e-3, "Adam learning rate, annealed linearly to zero")
    update_epochs: int = option(4, "passes over each rollout")
    num_minibatches: int = option(8, "minibatches per pass; must divide num_envs * horizon")
    gamma: float = option(0.9, "discount factor (a step is 0.1 s, so 0.9 looks about 1 s ahead)")
    gae_lambda: float = option(0.8, "GAE mixing factor")
    clip_coef: float = option(0.2, "PPO ratio clipping range")
    ent_coef: float = option(0.005, "weight of the entropy bonus")
    vf_coef: float = option(0.5, "weight of the value loss")
    max_grad_norm: float = option(0.5, "global gradient-norm clipping threshold")
    output_dir: str = option("runs/vr_edge", "where metrics.jsonl, policy.pt and the plot go")
    plot: bool = option(False, "draw the learning curve to learning_curve.png")
    no_progress: bool = option(False, "print plain progress lines instead of a progress bar")
    mkl_code_path: str = option(
        "default", "MKL's kernels for torch's matrix products: chosen by CPU model ('default'; another CPU "
        "model can round differently), or 'compatible', the same on every x86-64 CPU", choices=MKL_CODE_PATHS,
    )
    core: str = option("auto", "the collector's per-step core", choices=CORES)


def parse_args(argv: list[str] | None = None) -> Args:
    """Build the argument parser from `Args`' fields: `--num-envs` sets `num_envs`, and so on."""
    parser = argparse.ArgumentParser(
        description="Train PPO on the synthetic VR edge environment.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        epilog=f"quick run (4 updates, then the evaluation and the baselines): {QUICK_RUN}",
    )
    for arg_field in dataclasses.fields(Args):
        flag = "--" + arg_field.name.replace("_", "-")
        help_text = arg_field.metadata["help"]
        if arg_field.type is bool:
            parser.add_argument(flag, action="store_true", help=help_text)
        else:
            parser.add_argument(
                flag,
                type=arg_field.type,
                default=arg_field.default,
                choices=arg_field.metadata["choices"],
                help=help_text,
            )
    args = Args(**vars(parser.parse_args(argv)))
    problem = _argument_problem(args)
    if problem:
        parser.error(problem)
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        # Checked before training: finding out at the plot would lose minutes of training.
        parser.error(
            "--plot needs matplotlib, which is not installed: pip install \".[examples]\" from the repository "
            "root (PyTorch, matplotlib and tqdm, what the examples use), or run without --plot."
        )
    return args


def _argument_problem(args: Args) -> str | None:
    for name in (
        "num_envs", "horizon", "num_users", "episode_length", "simulation_substeps", "history_steps", "update_epochs",
        "num_minibatches", "eval_every", "eval_episodes",
    ):
        if getattr(args, name) < 1:
            return f"--{name.replace('_', '-')} must be >= 1; got {getattr(args, name)!r}."
    for name in VARIANT_OPTIONS:
        if not getattr(args, name) >= 0:
            return f"--{name.replace('_', '-')} must be >= 0; got {getattr(args, name)!r}."
    if args.rate_forecast and not Path(args.rate_forecast).is_file():
        return f"--rate-forecast names no file: {args.rate_forecast!r} (fit one with `python -m examples.vr_edge.forecast`)."
    if not args.trace_jitter >= 0:
        return f"--trace-jitter must be >= 0; got {args.trace_jitter!r}."
    if args.policy_placement == "workers" and args.backend != "async":
        return f"--policy-placement workers runs the policy in worker processes: it needs --backend async; got {args.backend!r}."
    if args.num_workers < 0 or (args.num_workers and args.backend != "async"):
        return f"--num-workers applies to --backend async and must be >= 0; got {args.num_workers!r} with {args.backend!r}."
    batch_size = args.num_envs * args.horizon
    if batch_size % args.num_minibatches:
        return (
            f"--num-minibatches ({args.num_minibatches}) must divide num_envs * horizon "
            f"({args.num_envs} * {args.horizon} = {batch_size})."
        )
    if batch_size // args.num_minibatches < 2:
        return (
            f"--num-minibatches ({args.num_minibatches}) leaves fewer than 2 transitions per minibatch "
            "(advantages are normalised per minibatch); lower it or collect more per rollout."
        )
    if args.total_timesteps < batch_size:
        return (
            f"--total-timesteps ({args.total_timesteps}) is below one rollout "
            f"(num_envs * horizon = {batch_size}); raise it or shrink the rollout."
        )
    return None


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Train, write the outputs, and return a summary (the arguments, paths and per-update metrics)."""
    args = parse_args(argv)
    started = time.perf_counter()
    batch_size = args.num_envs * args.horizon
    num_updates = args.total_timesteps // batch_size
    placement = "in each worker" if args.policy_placement == "workers" else "in this process"
    print(
        f"PPO on SyntheticVREdgeEnv ({args.num_users} users): {args.num_envs} envs, backend {args.backend}, "
        f"policy {placement}, {num_updates * batch_size:,} timesteps ({num_updates} "
        f"update{'' if num_updates == 1 else 's'} of "
        f"{args.num_envs} x {args.horizon}), device cpu, seed {args.seed}; writing to {args.output_dir}",
        flush=True,
    )
    try:
        pin_mkl_code_path(args.mkl_code_path)
    except RuntimeError as error:
        raise SystemExit(f"--mkl-code-path {args.mkl_code_path}: {error}") from None
    seed_torch(args.seed)
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)

    # functools.partial of a top-level class pickles, so the async backend can ship it to workers.
    env_kwargs = {
        "num_users": args.num_users,
        "episode_length": args.episode_length,
        "simulation_substeps": args.simulation_substeps,
        **variant_env_kwargs(args),
    }
    # The predictor's state, not its path, travels: workers and the checkpoint need no file.
    rate_forecast = json.loads(Path(args.rate_forecast).read_text()) if args.rate_forecast else None
    # Training sees the train traces; every evaluation uses the held-out test traces.
    env_fn = functools.partial(
        make_env, args.history_steps, rate_forecast, traces="train", trace_jitter=args.trace_jitter, **env_kwargs
    )
    eval_env_kwargs = {**env_kwargs, "traces": "test"}
    eval_seeds = range(args.eval_first_seed, args.eval_first_seed + args.eval_episodes)
    probe_env = env_fn()
    agent = ActorCritic.for_env(probe_env)
    # The baselines read the plain env's observations, whatever the policy reads.
    layout = probe_env.unwrapped.observation_layout
    probe_env.close()
    evaluation_policy = CollectorPolicy(agent, deterministic=True)
    evaluations: list[dict[str, Any]] = []
    observation_size = agent.observation_size
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    minibatch_rng = np.random.default_rng(args.seed)

    minibatch_size = batch_size // args.num_minibatches
    metrics_path = output_dir / "metrics.jsonl"
    history: list[dict[str, Any]] = []

    collector = ParallelRolloutCollector(
        [env_fn] * args.num_envs,
        CollectorPolicy(agent),
        backend=args.backend,
        horizon=args.horizon,
        seed=args.seed,
        core=args.core,
        info_keys=INFO_KEYS,
        # Rollout workers draw their actions from generators the library seeds per worker from
        # `seed`, so a run there is reproducible too (for the same number of workers).
        **({"policy_placement": "workers"} if args.policy_placement == "workers" else {}),
        **({"num_workers": args.num_workers} if args.num_workers else {}),
    )
    progress = Progress(num_updates, enabled=not args.no_progress)
    with collector, progress, metrics_path.open("w") as metrics_file:
        for update in range(1, num_updates + 1):
            # --- collect ------------------------------------------------------------------
            collect_start = time.perf_counter()
            batch = collector.collect()
            collect_seconds = time.perf_counter() - collect_start

            # --- advantages ---------------------------------------------------------------
            update_start = time.perf_counter()
            # Values of every final observation and of the bootstrap row, in one forward pass.
            mask = batch.final_observation_mask
            with torch.no_grad():
                tail_values = agent.value(
                    torch.as_tensor(np.concatenate([batch.final_observations[mask], batch.bootstrap_observations]))
                ).numpy()
            num_final = int(mask.sum())
            final_values = np.zeros(mask.shape)
            final_values[mask] = tail_values[:num_final]
            bootstrap_values = tail_values[num_final:]
            advantages, returns = compute_gae(
                batch.rewards,
                batch.values,
                batch.terminations,
                batch.truncations,
                final_values,
                bootstrap_values,
                args.gamma,
                args.gae_lambda,
            )

            # --- PPO epochs ---------------------------------------------------------------
            observations = torch.as_tensor(batch.observations).reshape(batch_size, observation_size)
            actions = torch.as_tensor(batch.actions).reshape(batch_size, args.num_users)
            old_log_probs = torch.as_tensor(batch.log_probs).reshape(batch_size)
            advantages_flat = torch.as_tensor(advantages, dtype=torch.float32).reshape(batch_size)
            returns_flat = torch.as_tensor(returns, dtype=torch.float32).reshape(batch_size)

            for group in optimizer.param_groups:
                group["lr"] = args.learning_rate * (1.0 - (update - 1) / num_updates)
            losses = {"policy_loss": [], "value_loss": [], "entropy": [], "approx_kl": [], "clip_fraction": []}
            for _ in range(args.update_epochs):
                order = minibatch_rng.permutation(batch_size)
                for start in range(0, batch_size, minibatch_size):
                    index = torch.as_tensor(order[start : start + minibatch_size])
                    new_log_probs, entropy, new_values = agent.evaluate(observations[index], actions[index])
                    log_ratio = new_log_probs - old_log_probs[index]
                    ratio = log_ratio.exp()
                    minibatch_advantages = advantages_flat[index]
                    minibatch_advantages = (minibatch_advantages - minibatch_advantages.mean()) / (
                        minibatch_advantages.std() + 1e-8
                    )
                    # The clipped surrogate: take the pessimistic of the raw and clipped ratio terms.
                    policy_loss = torch.max(
                        -minibatch_advantages * ratio,
                        -minibatch_advantages * ratio.clamp(1.0 - args.clip_coef, 1.0 + args.clip_coef),
                    ).mean()
                    value_loss = 0.5 * (new_values - returns_flat[index]).pow(2).mean()
                    entropy_mean = entropy.mean()
                    loss = policy_loss - args.ent_coef * entropy_mean + args.vf_coef * value_loss

                    optimizer.zero_grad()
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                    optimizer.step()

                    with torch.no_grad():
                        # (ratio - 1) - log ratio: a low-variance, never-negative estimate of KL(old || new).
                        losses["approx_kl"].append(((ratio - 1.0) - log_ratio).mean().item())
                        losses["clip_fraction"].append(((ratio - 1.0).abs() > args.clip_coef).float().mean().item())
                    losses["policy_loss"].append(policy_loss.item())
                    losses["value_loss"].append(value_loss.item())
                    losses["entropy"].append(entropy_mean.item())
            update_seconds = time.perf_counter() - update_start

            # --- log ------------------------------------------------------------------------
            record = {
                "update": update,
                "global_step": update * batch_size,
                "episode_return_mean": _mean_or_nan(batch.episode_returns),
                "episodes_completed": int(batch.episode_returns.size),
                **{f"{key}_mean": float(batch.infos[key].mean()) for key in INFO_KEYS},
                **{name: float(np.mean(values)) for name, values in losses.items()},
                "collect_seconds": collect_seconds,
                "update_seconds": update_seconds,
                "transitions_per_second": batch.num_transitions / collect_seconds,
                "eval_return_mean": None,
                "eval_return_ci95": None,
            }
            if update % args.eval_every == 0 or update == num_updates:
                evaluation = evaluate_returns(
                    evaluation_policy, eval_seeds, eval_env_kwargs, args.history_steps, rate_forecast
                )
                evaluations.append({"global_step": record["global_step"], **evaluation})
                record["eval_return_mean"] = evaluation["mean"]
                record["eval_return_ci95"] = evaluation["ci95"]
            history.append(record)
            metrics_file.write(json.dumps({key: _json_number(value) for key, value in record.items()}) + "\n")
            metrics_file.flush()
            progress.advance(record)

    # The baselines' scores on the periodic-evaluation seeds: the horizontal lines of the plot.
    print(f"playing the tuned baselines on the {args.eval_episodes} held-out seeds...", flush=True)
    baselines = {
        name: evaluate_returns(policy, eval_seeds, eval_env_kwargs) for name, policy in tuned_baselines(layout).items()
    }
    policy_path = output_dir / "policy.pt"
    save_agent(
        agent, policy_path, env_kwargs=env_kwargs, args=dataclasses.asdict(args),
        # Only when it is not 1, as the env's variant options: a plain run's checkpoint keeps its keys.
        **({"history_steps": args.history_steps} if args.history_steps != 1 else {}),
        **({"rate_forecast": rate_forecast} if rate_forecast is not None else {}),
    )
    plot_path = None
    if args.plot:
        plot_path = output_dir / "learning_curve.png"
        title = (
            f"PPO on SyntheticVREdgeEnv: {args.num_envs} envs ({args.backend}), "
            f"{num_updates * batch_size:,} steps, seed {args.seed}; "
            f"{args.eval_episodes} held-out seeds"
        )
        plot_learning_curve(evaluations, baselines, plot_path, title)
    summary = {
        "args": dataclasses.asdict(args),
        "num_updates": num_updates,
        "global_step": num_updates * batch_size,
        "final_episode_return_mean": _recent_return(history),
        "final_evaluation": evaluations[-1],
        "evaluation_episodes": args.eval_episodes,
        "evaluations": evaluations,
        "baselines": baselines,
        "wall_seconds": time.perf_counter() - started,
        "metrics_path": str(metrics_path),
        "policy_path": str(policy_path),
        "plot_path": None if plot_path is None else str(plot_path),
        "metrics": history,
    }
    print(format_summary(summary), flush=True)
    return summary


def variant_env_kwargs(args: Args) -> dict[str, Any]:
    """The variant options that differ from the env's defaults.

    Only those: a run on today's env keeps the checkpoint `env_kwargs` it always had, so earlier
    checkpoints and evaluations still describe the same env as new ones.
    """
    return {name: getattr(args, name) for name in VARIANT_OPTIONS if getattr(args, name) != _ENV_DEFAULTS[name]}


def _mean_or_nan(values: np.ndarray) -> float:
    return float(values.mean()) if values.size else math.nan


def _json_number(value: Any) -> Any:
    # JSON has no NaN; null keeps every line readable by strict parsers.
    return None if isinstance(value, float) and math.isnan(value) else value


def _recent_return(history: list[dict[str, Any]]) -> float:
    """Mean episode return over the last tenth of the updates (at least one), NaN if none ended."""
    recent = history[-max(1, len(history) // 10) :]
    returns = [record["episode_return_mean"] for record in recent if not math.isnan(record["episode_return_mean"])]
    return float(np.mean(returns)) if returns else math.nan


if __name__ == "__main__":
    multiprocessing.freeze_support()
    main()
