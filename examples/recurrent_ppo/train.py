"""PPO with a GRU policy (or, with `--policy mlp`, a feed-forward one) on CartPole with the velocities hidden.

    python -m examples.recurrent_ppo.train --policy gru --seed 1
    python -m examples.recurrent_ppo.train --policy mlp --seed 1

The script reads top to bottom: arguments, setup, then one loop iteration per update (collect
a rollout, recompute the states, estimate advantages, run the clipped PPO epochs, evaluate now
and then). The policy sees the cart position and the pole angle only (`env.HideVelocities`), so
balancing needs the velocities, which a policy can only estimate from how those two change: the
GRU keeps them in its state, the MLP cannot.

The collector owns the recurrent bookkeeping: it calls the policy with the state it returned
on the previous row, puts the initial state back on every row where an episode starts, and
carries the state from one `collect()` to the next. The batch gives, for each env, the state
its rollout started from (`initial_state`) and the `[T, N]` `episode_starts` flags, which is
all the update needs to recompute, with gradients, the state every row was acted from
(`GRUAgent.unroll`). Minibatches are groups of whole envs (sequences of `horizon` rows), and
backpropagation runs through the whole rollout. The recomputed values are compared with the
ones the policy returned during collection (`value_recompute_error` in the metrics: zero up to
float rounding when the recomputation is right).

A truncated episode (CartPole-v1 stops at 500 steps) is bootstrapped from the value of its final
observation, read with the state the policy had reached there; the rollout's last row is
bootstrapped from the observation the next rollout starts from, with the state it starts with.

With `--output PATH` the run writes a JSON file: the arguments, one entry per update, the
periodic evaluations (the deterministic policy's mean return over `--eval-episodes` episodes on
fixed held-out seeds), `score` (the mean of the last 10 evaluations), wall-clock and CPU seconds.
The same command and seed give the same numbers on one machine: the collector's batches follow
from the seed and torch runs on one thread with deterministic kernels.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not {"-h", "--help"} & set(sys.argv[1:]):
    # Something on the screen before torch loads (seconds on a cold start); main() then says what it will do.
    print("examples.recurrent_ppo.train: loading torch...", flush=True)

import numpy as np
import torch

from examples.recurrent_ppo.agent import AGENTS, GRUAgent, FeedForwardAgent, as_tensor, collector_policy, make_agent
from examples.recurrent_ppo.env import ENV_ID, MAX_EPISODE_STEPS, NUM_ACTIONS, OBSERVATION_SCALE, HideVelocities
from examples.vr_edge.advantages import compute_gae
from parallel_rollouts import make_collector
from parallel_rollouts.collector import BACKENDS

#: `score` is the mean of this many last evaluations.
SCORED_EVALUATIONS = 10
#: Every step of the script in seconds: 20 updates, 2 evaluations (about 20 s on 2 cores).
QUICK_RUN = "python -m examples.recurrent_ppo.train --total-timesteps 10240"


def option(default: Any, description: str, choices: tuple[str, ...] | None = None) -> Any:
    """A dataclass field that carries its command-line help."""
    return field(default=default, metadata={"help": description, "choices": choices})


@dataclass
class Args:
    """Every knob of a run; each field becomes a command-line flag (`num_envs` -> `--num-envs`).

    The defaults are the ones `compare.py` runs for both policies; docs/recurrent-ppo-results.md
    gives the measured times.
    """

    policy: str = option("gru", "the actor-critic: recurrent (gru) or feed-forward (mlp)", choices=tuple(AGENTS))
    seed: int = option(1, "root seed of the environments, the network and the sampling")
    backend: str = option("sync", "collector backend", choices=BACKENDS)
    num_envs: int = option(8, "environments stepped in parallel")
    horizon: int = option(64, "steps per environment in each rollout (the length backpropagation runs through)")
    total_timesteps: int = option(150_000, "transitions to train on (rounded down to whole rollouts)")
    hidden_size: int = option(64, "width of the GRU state and of the MLP's layers")
    learning_rate: float = option(1e-3, "Adam learning rate, annealed linearly to zero")
    update_epochs: int = option(8, "passes over each rollout")
    num_minibatches: int = option(2, "minibatches per pass, each a group of whole envs; must divide num_envs")
    gamma: float = option(0.99, "discount factor")
    gae_lambda: float = option(0.95, "GAE mixing factor")
    clip_coef: float = option(0.2, "PPO ratio clipping range")
    ent_coef: float = option(0.01, "weight of the entropy bonus")
    vf_coef: float = option(0.5, "weight of the value loss")
    max_grad_norm: float = option(0.5, "gradients are rescaled to at most this global norm")
    eval_every: int = option(10, "evaluate the deterministic policy every this many updates (and after the last)")
    eval_episodes: int = option(8, "episodes per evaluation, one per env, each at most 500 steps")
    eval_seed: int = option(1_000_000, "collector seed of every evaluation: the same held-out episodes each time")
    output: str = option("", "write the run's results to this JSON file ('': do not)")

    def __post_init__(self) -> None:
        if self.num_envs % self.num_minibatches:
            raise ValueError(
                f"`num_minibatches` must divide `num_envs` (minibatches are groups of envs); "
                f"got {self.num_minibatches!r} and {self.num_envs!r}."
            )

    @property
    def num_updates(self) -> int:
        return self.total_timesteps // (self.num_envs * self.horizon)


def make_rollout_collector(args: Args, policy: Callable[..., Any], num_envs: int, horizon: int, seed: int):
    """A collector over `num_envs` CartPoles with the velocities hidden."""
    return make_collector(
        ENV_ID, num_envs=num_envs, policy=policy, backend=args.backend, horizon=horizon, seed=seed, wrappers=[HideVelocities]
    )


def evaluate(agent: GRUAgent | FeedForwardAgent, args: Args) -> float:
    """Mean return of the deterministic policy over `eval_episodes` fresh episodes on the held-out seeds.

    A rollout of 500 rows holds each env's whole first episode (CartPole-v1 truncates at 500), and
    a new collector starts every env from its first reset and the initial state.
    """
    policy = collector_policy(agent, deterministic=True)
    with make_rollout_collector(args, policy, args.eval_episodes, MAX_EPISODE_STEPS, args.eval_seed) as collector:
        batch = collector.collect()
    first_returns = [batch.episode_returns[batch.episode_env_indices == env][0] for env in range(args.eval_episodes)]
    return float(np.mean(first_returns))


def rollout_tensors(batch: Any, agent: GRUAgent | FeedForwardAgent) -> dict[str, torch.Tensor]:
    """The batch fields the update reads, as tensors; the states and flags of a recurrent rollout."""
    horizon, num_envs = batch.rewards.shape
    tensors = {
        "observations": torch.tensor(batch.observations),
        "actions": torch.tensor(batch.actions),
        "log_probs": torch.tensor(batch.log_probs),
        "values": torch.tensor(batch.values),
    }
    if agent.recurrent:
        tensors["initial_states"] = as_tensor(batch.initial_state)
        tensors["episode_starts"] = torch.tensor(batch.episode_starts)
    else:
        tensors["initial_states"] = agent.initial_state(num_envs)
        tensors["episode_starts"] = torch.zeros(horizon, num_envs, dtype=torch.bool)
    return tensors


@torch.no_grad()
def advantages_and_returns(
    batch: Any, tensors: dict[str, torch.Tensor], agent: GRUAgent | FeedForwardAgent, args: Args
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """GAE from the recomputed states; also how far the recomputed values are from the collected ones.

    The value of a final observation is read with the state the policy reached on that row (the
    state after it: the one it would have acted from next, had the episode gone on); the bootstrap
    row's with the state the next rollout starts from, reset where the last row ended an episode.
    """
    horizon, num_envs = batch.rewards.shape
    rollout = agent.unroll(tensors["observations"], tensors["initial_states"], tensors["episode_starts"])
    value_recompute_error = float((rollout.values - tensors["values"]).abs().max())

    final_observations = torch.tensor(batch.final_observations).reshape(horizon * num_envs, -1)
    _, final_values, _ = agent.step(final_observations, rollout.next_states.flatten(0, 1))
    final_values = final_values.reshape(horizon, num_envs) * torch.tensor(batch.final_observation_mask)

    ended = torch.tensor(batch.dones[-1])
    ended = ended.reshape(num_envs, *(1,) * (rollout.next_states.dim() - 2))
    bootstrap_states = torch.where(ended, agent.initial_state(num_envs), rollout.next_states[-1])
    _, bootstrap_values, _ = agent.step(torch.tensor(batch.bootstrap_observations), bootstrap_states)

    advantages, returns = compute_gae(
        batch.rewards,
        batch.values,
        batch.terminations,
        batch.truncations,
        final_values.numpy(),
        bootstrap_values.numpy(),
        args.gamma,
        args.gae_lambda,
    )
    return torch.tensor(advantages, dtype=torch.float32), torch.tensor(returns, dtype=torch.float32), value_recompute_error


def ppo_update(
    agent: GRUAgent | FeedForwardAgent,
    optimizer: torch.optim.Optimizer,
    tensors: dict[str, torch.Tensor],
    advantages: torch.Tensor,
    returns: torch.Tensor,
    args: Args,
) -> dict[str, float]:
    """`update_epochs` passes of clipped PPO; each minibatch is a group of envs unrolled over the whole rollout."""
    num_envs = advantages.shape[1]
    stats: dict[str, list[float]] = {"policy_loss": [], "value_loss": [], "entropy": [], "approx_kl": [], "clip_fraction": []}
    for _ in range(args.update_epochs):
        for envs in torch.randperm(num_envs).chunk(args.num_minibatches):
            rollout = agent.unroll(
                tensors["observations"][:, envs], tensors["initial_states"][envs], tensors["episode_starts"][:, envs]
            )
            all_log_probs = torch.log_softmax(rollout.logits, -1)
            log_probs = all_log_probs.gather(-1, tensors["actions"][:, envs, None]).squeeze(-1)
            entropy = -(all_log_probs.exp() * all_log_probs).sum(-1).mean()
            log_ratio = log_probs - tensors["log_probs"][:, envs]
            ratio = log_ratio.exp()

            minibatch_advantages = advantages[:, envs]
            minibatch_advantages = (minibatch_advantages - minibatch_advantages.mean()) / (minibatch_advantages.std() + 1e-8)
            clipped_ratio = ratio.clamp(1.0 - args.clip_coef, 1.0 + args.clip_coef)
            policy_loss = torch.max(-minibatch_advantages * ratio, -minibatch_advantages * clipped_ratio).mean()
            value_loss = 0.5 * (rollout.values - returns[:, envs]).pow(2).mean()
            loss = policy_loss - args.ent_coef * entropy + args.vf_coef * value_loss

            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()

            with torch.no_grad():
                stats["approx_kl"].append(float(((ratio - 1.0) - log_ratio).mean()))
                stats["clip_fraction"].append(float(((ratio - 1.0).abs() > args.clip_coef).float().mean()))
            stats["policy_loss"].append(policy_loss.item())
            stats["value_loss"].append(value_loss.item())
            stats["entropy"].append(entropy.item())
    return {name: float(np.mean(values)) for name, values in stats.items()}


def train(args: Args, on_update: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run one training; returns what `--output` writes. `on_update` sees each update's metrics."""
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    started, started_cpu = time.perf_counter(), time.process_time()

    agent = make_agent(args.policy, OBSERVATION_SCALE, NUM_ACTIONS, args.hidden_size)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    updates: list[dict[str, Any]] = []
    evaluations: list[dict[str, Any]] = []

    with make_rollout_collector(args, collector_policy(agent), args.num_envs, args.horizon, args.seed) as collector:
        for update in range(1, args.num_updates + 1):
            optimizer.param_groups[0]["lr"] = args.learning_rate * (1.0 - (update - 1) / args.num_updates)
            batch = collector.collect()
            tensors = rollout_tensors(batch, agent)
            advantages, returns, value_recompute_error = advantages_and_returns(batch, tensors, agent, args)
            metrics = {
                "update": update,
                "global_step": update * args.num_envs * args.horizon,
                "episode_return_mean": float(np.mean(batch.episode_returns)) if len(batch.episode_returns) else None,
                "value_recompute_error": value_recompute_error,
                **ppo_update(agent, optimizer, tensors, advantages, returns, args),
            }
            if update % args.eval_every == 0 or update == args.num_updates:
                evaluations.append(
                    {"update": update, "global_step": metrics["global_step"], "return_mean": evaluate(agent, args)}
                )
                metrics["eval_return_mean"] = evaluations[-1]["return_mean"]
            updates.append(metrics)
            if on_update is not None:
                on_update(metrics)

    scored = [evaluation["return_mean"] for evaluation in evaluations[-SCORED_EVALUATIONS:]]
    return {
        "args": dataclasses.asdict(args),
        "score": float(np.mean(scored)),
        "scored_evaluations": len(scored),
        "evaluations": evaluations,
        "updates": updates,
        "wall_seconds": time.perf_counter() - started,
        "cpu_seconds": time.process_time() - started_cpu,
    }


def parse_args(argv: list[str] | None = None) -> Args:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=f"quick run (20 updates, 2 evaluations): {QUICK_RUN}"
    )
    for arg_field in dataclasses.fields(Args):
        flag = "--" + arg_field.name.replace("_", "-")
        parser.add_argument(
            flag,
            type=type(arg_field.default),
            default=arg_field.default,
            choices=arg_field.metadata["choices"],
            help=f"{arg_field.metadata['help']} (default: {arg_field.default})",
        )
    return Args(**vars(parser.parse_args(argv)))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    steps_per_update = args.num_envs * args.horizon
    print(
        f"{args.policy.upper()} PPO on {ENV_ID} with the velocities hidden: {args.num_envs} envs, backend "
        f"{args.backend}, {args.num_updates * steps_per_update:,} timesteps ({args.num_updates} "
        f"update{'' if args.num_updates == 1 else 's'} of "
        f"{args.num_envs} x {args.horizon}), evaluating every "
        f"{'update' if args.eval_every == 1 else f'{args.eval_every} updates'}, device cpu, seed {args.seed}",
        flush=True,
    )

    def report(metrics: dict[str, Any]) -> None:
        if "eval_return_mean" in metrics:
            print(
                f"update {metrics['update']:4d}  step {metrics['global_step']:7d}  "
                f"eval return {metrics['eval_return_mean']:6.1f}  entropy {metrics['entropy']:.3f}",
                flush=True,
            )
        elif metrics["update"] == 1:  # the first at once, before the first evaluation
            train_return = metrics["episode_return_mean"]
            print(
                f"update {metrics['update']:4d}  step {metrics['global_step']:7d}  "
                f"train return {'-' if train_return is None else f'{train_return:.1f}':>6}  "
                f"entropy {metrics['entropy']:.3f}",
                flush=True,
            )

    results = train(args, on_update=report)
    print(f"{args.policy} seed {args.seed}: score {results['score']:.1f} (mean of the last {results['scored_evaluations']} "
          f"evaluations), {results['wall_seconds']:.0f} s wall, {results['cpu_seconds']:.0f} s CPU")
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(results, indent=1) + "\n")
        print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
