"""Shared-parameter PPO on a PettingZoo env (MPE's ``simple_spread``) through the collector.

    python -m examples.multi_agent_ppo.train --total-timesteps 300000 --seed 0
    python -m examples.multi_agent_ppo.train --total-timesteps 9600 --eval-episodes 5 --torch-threads 1  # ~15 s

Every agent of every env is a column of the batch (``make_collector`` over the env's module:
``num_envs * 3`` columns for ``simple_spread``'s three agents), so one network acts for all
agents and learns from all their rows at once: the usual parameter sharing of IPPO. Rows where
an agent is not live (``batch.valid`` false: not arrived yet, or done while others go on) are
left out of the loss; ``simple_spread``'s agents all live for the whole episode, so there every
row counts, but the loop is written for envs whose agents die.

The run ends with an evaluation: the trained policy and a uniformly random one, each over the
same evaluation episodes (the same seeds), reporting the mean return per agent and episode.
Needs the ``multiagent`` and ``torch`` extras.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from dataclasses import dataclass
from typing import Any

if __name__ == "__main__" and not {"-h", "--help"} & set(sys.argv[1:]):
    # Something on the screen before torch loads (seconds on a cold start); train() then says what it will do.
    print("examples.multi_agent_ppo.train: loading torch...", flush=True)

import numpy as np
import torch
from torch import nn

# The acting policy (actions sampled with a generator of its own, values and log-probabilities
# recorded) and the critic's values are the overlap example's: they read any (logits, values) agent.
from examples.overlap_ppo.train import ActingPolicy, dataclass_parser, values_of
from examples.vr_edge.advantages import compute_gae
from parallel_rollouts import make_collector


@dataclass
class Args:
    seed: int = 0
    """Seeds the collector (episodes), the network's initial weights and the action sampler."""
    total_timesteps: int = 300_000
    """Env steps to train for (each steps every agent of one env; rounded down to whole batches)."""
    num_envs: int = 8
    """Envs stepped side by side (each gives one column per agent)."""
    num_steps: int = 100
    """Steps per env in each batch (the collector's horizon)."""
    backend: str = "async"
    """The collector's backend."""
    torch_threads: int = 0
    """Threads for PyTorch's operators (0: PyTorch's default, one per core; 1 keeps the update fast when
    other work shares the cores)."""
    max_cycles: int = 25
    """Steps per episode of simple_spread (its time limit)."""
    learning_rate: float = 7e-4
    """Adam's step size."""
    gamma: float = 0.99
    """Discount."""
    gae_lambda: float = 0.95
    """GAE's mixing factor."""
    num_minibatches: int = 4
    """Minibatches per epoch."""
    update_epochs: int = 4
    """Passes over each batch."""
    clip_coef: float = 0.2
    """PPO's ratio clip."""
    ent_coef: float = 0.01
    """Entropy bonus."""
    vf_coef: float = 0.5
    """Value loss weight."""
    max_grad_norm: float = 0.5
    """Gradient clipping."""
    eval_episodes: int = 50
    """Evaluation episodes per env for the trained and the random policy (the same seeds)."""
    log_every: int = 10
    """Print a progress line after the first update and every this many (0: only the summary)."""
    output: str = ""
    """Write the result as JSON to this file ('': do not)."""


#: A run of seconds: 12 updates and a short evaluation (about 12 s on 2 cores).
QUICK_RUN = "python -m examples.multi_agent_ppo.train --total-timesteps 9600 --eval-episodes 5 --torch-threads 1"


class Agent(nn.Module):
    """Actor and critic, each a 64-64 MLP over one agent's observation (shared by every agent)."""

    def __init__(self, observation_size: int, num_actions: int) -> None:
        super().__init__()
        self.actor = nn.Sequential(nn.Linear(observation_size, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, num_actions))
        self.critic = nn.Sequential(nn.Linear(observation_size, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))

    def forward(self, observations: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.actor(observations), self.critic(observations).squeeze(-1)


def ppo_update(agent: Agent, optimizer: torch.optim.Optimizer, batch, args: Args, generator: torch.Generator) -> None:
    """One PPO update on the batch's valid rows (every agent of every env), advantages by GAE per column."""
    horizon, columns = batch.rewards.shape
    mask = batch.final_observation_mask
    final_values = np.zeros((horizon, columns))
    if mask.any():
        final_values[mask] = values_of(agent, batch.final_observations[mask])
    advantages, returns = compute_gae(
        batch.rewards, batch.values, batch.terminations, batch.truncations, final_values,
        values_of(agent, batch.bootstrap_observations), args.gamma, args.gae_lambda,
    )
    # A row whose agent was not live is no transition: it takes no part in the loss.
    valid = batch.valid
    pick = lambda array: torch.as_tensor(np.ascontiguousarray(array[valid]))  # noqa: E731
    observations, actions = pick(batch.observations), pick(batch.actions).long()
    old_log_probs, advantages, returns = pick(batch.log_probs), pick(advantages).float(), pick(returns).float()
    size = observations.shape[0]
    minibatch = max(1, size // args.num_minibatches)
    for _ in range(args.update_epochs):
        order = torch.randperm(size, generator=generator)
        for start in range(0, size, minibatch):
            index = order[start : start + minibatch]
            logits, values = agent(observations[index])
            log_probs = torch.log_softmax(logits, dim=-1)
            ratio = (log_probs.gather(1, actions[index, None]).squeeze(1) - old_log_probs[index]).exp()
            advantage = advantages[index]
            advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
            clipped = ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)
            policy_loss = torch.max(-advantage * ratio, -advantage * clipped).mean()
            value_loss = 0.5 * ((values - returns[index]) ** 2).mean()
            entropy = -(log_probs.exp() * log_probs).sum(dim=1).mean()
            loss = policy_loss - args.ent_coef * entropy + args.vf_coef * value_loss
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()


def evaluate(policy, args: Args) -> float:
    """Mean return per agent and episode over ``eval_episodes`` episodes per env, on fixed seeds.

    ``policy`` None samples uniformly random actions (each column from its own seeded sampler).
    Every episode lasts ``max_cycles`` steps, so one batch of that many rows per episode holds
    each env's next episode whole.
    """
    from mpe2 import simple_spread_v3

    returns = []
    with make_collector(
        simple_spread_v3, num_envs=args.num_envs, policy=policy, backend="sync", horizon=args.max_cycles,
        seed=10_000 + args.seed, env_kwargs={"max_cycles": args.max_cycles, "continuous_actions": False},
    ) as collector:
        for _ in range(args.eval_episodes):
            returns.extend(collector.collect().episode_returns.tolist())
    return float(np.mean(returns))


def train(args: Args) -> dict[str, Any]:
    """Train, then evaluate the trained and a random policy; the run's numbers."""
    num_updates = args.total_timesteps // (args.num_envs * args.num_steps)
    print(f"shared-parameter PPO on simple_spread: {args.num_envs} envs x 3 agents, backend {args.backend}, "
          f"{num_updates * args.num_envs * args.num_steps:,} env steps ({num_updates} "
          f"update{'' if num_updates == 1 else 's'} of {args.num_envs}x{args.num_steps}), then "
          f"{args.eval_episodes * args.num_envs} evaluation episodes per policy, device cpu, seed {args.seed}",
          flush=True)
    from mpe2 import simple_spread_v3

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    torch.manual_seed(args.seed)
    env_kwargs = {"max_cycles": args.max_cycles, "continuous_actions": False}
    update_generator = torch.Generator().manual_seed(args.seed + 1)
    returns: list[float] = []
    started = time.perf_counter()
    cpu_started = time.process_time()
    probe = simple_spread_v3.parallel_env(**env_kwargs)
    observation_size = int(np.prod(probe.observation_space("agent_0").shape))
    num_actions = int(probe.action_space("agent_0").n)
    probe.close()
    agent = Agent(observation_size, num_actions)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    policy = ActingPolicy(agent, args.seed)
    with make_collector(
        simple_spread_v3, num_envs=args.num_envs, policy=policy, backend=args.backend, horizon=args.num_steps,
        seed=args.seed, env_kwargs=env_kwargs,
    ) as collector:
        for update in range(num_updates):
            batch = collector.collect()
            ppo_update(agent, optimizer, batch, args, update_generator)
            returns.extend(batch.episode_returns.tolist())
            if args.log_every and (update == 0 or (update + 1) % args.log_every == 0):  # the first at once
                print(f"update {update + 1}/{num_updates}: mean agent return {np.mean(returns[-90:]):.2f}, "
                      f"{time.perf_counter() - started:.0f} s", flush=True)
    training_seconds = time.perf_counter() - started
    print(f"evaluating the trained and a random policy ({args.eval_episodes * args.num_envs} episodes each)...",
          flush=True)
    trained, random = evaluate(ActingPolicy(agent, args.seed + 2), args), evaluate(None, args)
    result = {
        "args": dataclasses.asdict(args),
        "env_steps": num_updates * args.num_envs * args.num_steps,
        "training_seconds": training_seconds,
        "main_process_cpu_seconds": time.process_time() - cpu_started,
        "eval_return_trained": trained,
        "eval_return_random": random,
        "last_training_return": float(np.mean(returns[-90:])) if returns else float("nan"),
    }
    print(f"trained in {training_seconds:.0f} s; evaluation (mean return per agent and episode, "
          f"{args.eval_episodes * args.num_envs} episodes): trained {trained:.2f}, random {random:.2f}", flush=True)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as file:
            json.dump(result, file, indent=2)
    return result


def parse_args(argv: list[str] | None = None) -> Args:
    parser = dataclass_parser(Args, __doc__.split("\n\n")[0], f"quick run (12 updates, short evaluation): {QUICK_RUN}")
    return Args(**vars(parser.parse_args(argv)))


if __name__ == "__main__":
    train(parse_args())
