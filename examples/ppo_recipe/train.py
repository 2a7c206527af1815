"""CleanRL's PPO with the collector in place of the storage loop: the recipe for the fastest
training loop on few cores.

    python -m examples.ppo_recipe.train --env-id CartPole-v1 --total-timesteps 100000

Read it beside CleanRL's ``ppo.py``: the arguments, the agent (:mod:`.agent`, CleanRL's own) and
the update (CleanRL's, unchanged) are the same. What changed is the collection, in three ways:

1. ``collector.collect()`` replaces the ``for step in range(num_steps)`` loop and its torch
   storage: one batched policy call per step, the batch ``[num_steps, num_envs, ...]`` in NumPy.
2. The policy the collector calls (:class:`ActingPolicy`) samples from the agent's actor with
   ``torch.multinomial`` and a generator of its own, where ``get_action_and_value`` builds a
   ``Categorical`` and computes an entropy nobody reads while acting: the same distribution at
   a third of the cost per call. The update still calls ``get_action_and_value``.
3. ``max_policy_lag=1`` with ``policy_placement="workers"``: a worker process collects the next
   batch, with the policy as it was when this one was handed out, while this process updates.
   PPO's ratio is taken against the log-probabilities the acting policy recorded, so the one
   update of lag needs no correction there; the advantages use the values the acting critic
   recorded, with the final and bootstrap values from the current one (one update newer).
   Truncated episodes are bootstrapped from their final observation (CleanRL treats a
   truncation as a termination).

``--torch-threads`` defaults to the cores this process may use minus the worker processes, so
the learner's threads and the workers never want more cores than there are.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch

from examples.overlap_ppo.train import dataclass_parser
from examples.ppo_recipe.agent import Agent, PPOArgs, make_env, ppo_update
from examples.vr_edge.advantages import compute_gae
from parallel_rollouts import ParallelRolloutCollector, PolicyOutput


@dataclass
class Args(PPOArgs):
    env_id: str = "CartPole-v1"
    """A Gymnasium id with discrete actions, `frames` (84x84x4 uint8, the Nature CNN) or `half_ms`."""
    total_timesteps: int = 100_000
    """Env steps (rounded down to whole iterations)."""
    seed: int = 1
    """Seeds the collector's episodes, torch, NumPy and the action sampler."""
    backend: str = "async"
    """The collector's backend."""
    policy_placement: str = "workers"
    """`workers`: the policy acts in the worker processes, beside the envs; `main`: in this process."""
    num_workers: int = 1
    """Worker processes (async)."""
    max_policy_lag: int = 1
    """1: collect the next batch while updating on this one; 0: take turns."""
    lean_policy: bool = True
    """Act with ActingPolicy (multinomial over the actor's softmax); false: CleanRL's get_action_and_value."""
    torch_threads: int = -1
    """torch.set_num_threads for the learner (-1: the usable cores minus the worker processes; 0: torch's default)."""


#: A run of seconds, for the README and the tests.
QUICK_RUN = "python -m examples.ppo_recipe.train --total-timesteps 8192"


class ActingPolicy:
    """What the collector calls with the ``[num_envs, ...]`` observations of one step: actions
    drawn from the actor's softmax with a generator of its own, their log-probabilities and the
    critic's values."""

    def __init__(self, agent: Agent, seed: int) -> None:
        self.agent = agent
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(self, observations: np.ndarray) -> PolicyOutput:
        with torch.no_grad():
            x = torch.tensor(observations, dtype=torch.float32)  # a copy of the read-only rows
            actor_input, critic_input = self.agent.heads(x)
            log_probs = torch.log_softmax(self.agent.actor(actor_input), dim=-1)
            actions = torch.multinomial(log_probs.exp(), 1, generator=self.generator).squeeze(1)
            values = self.agent.critic(critic_input).squeeze(1)
        return PolicyOutput(actions, values=values, log_probs=log_probs.gather(1, actions[:, None]).squeeze(1))


class CleanRLActingPolicy(ActingPolicy):
    """``get_action_and_value`` as CleanRL's loop calls it (global torch generator)."""

    def __call__(self, observations: np.ndarray) -> PolicyOutput:
        with torch.no_grad():
            action, log_prob, _, value = self.agent.get_action_and_value(torch.tensor(observations, dtype=torch.float32))
        return PolicyOutput(action, values=value.flatten(), log_probs=log_prob)


def learner_threads(args: Args) -> int:
    """Threads for the learner's operators: the cores left once the workers have one each."""
    if args.torch_threads >= 0:
        return args.torch_threads
    workers = args.num_workers if args.backend == "async" else 0
    return max(1, len(os.sched_getaffinity(0)) - workers) if hasattr(os, "sched_getaffinity") else 1


def values_of(agent: Agent, observations: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return agent.get_value(torch.tensor(observations, dtype=torch.float32)).flatten().double().numpy()


def train(args: Args) -> dict:
    """Train; the loop's wall time, the time spent waiting for batches, and the returns."""
    threads = learner_threads(args)
    if threads:
        torch.set_num_threads(threads)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    fns = [make_env(args.env_id)] * args.num_envs
    probe = fns[0]()
    agent = Agent(probe.observation_space.shape, int(probe.action_space.n))
    probe.close()
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    policy = (ActingPolicy if args.lean_policy else CleanRLActingPolicy)(agent, args.seed)
    batch_size = args.num_envs * args.num_steps
    num_iterations = args.total_timesteps // batch_size
    options = {"num_workers": args.num_workers} if args.backend == "async" else {}
    episode_returns: list[float] = []
    waited = 0.0
    with ParallelRolloutCollector(
        fns, policy, args.backend, horizon=args.num_steps, seed=args.seed,
        policy_placement=args.policy_placement if args.backend == "async" else None,
        max_policy_lag=args.max_policy_lag, **options,
    ) as collector:
        started = time.perf_counter()
        for iteration in range(1, num_iterations + 1):
            frac = 1.0 - (iteration - 1.0) / num_iterations
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate
            before = time.perf_counter()
            batch = collector.collect()
            waited += time.perf_counter() - before
            episode_returns.extend(batch.episode_returns.tolist())

            # GAE, bootstrapping truncated episodes from their final observation.
            final_values = np.zeros(batch.rewards.shape)
            if batch.final_observation_mask.any():
                final_values[batch.final_observation_mask] = values_of(agent, batch.final_observations[batch.final_observation_mask])
            advantages, returns = compute_gae(
                batch.rewards, batch.values, batch.terminations, batch.truncations, final_values,
                values_of(agent, batch.bootstrap_observations), args.gamma, args.gae_lambda,
            )
            flat = lambda array: torch.as_tensor(np.ascontiguousarray(array)).flatten(0, 1)  # noqa: E731
            ppo_update(
                agent, optimizer, args, flat(batch.observations).float(), flat(batch.log_probs).float(),
                flat(batch.actions), flat(advantages).float(), flat(returns).float(), flat(batch.values).float(),
            )
        wall = time.perf_counter() - started
    return {
        "args": asdict(args),
        "torch_threads": torch.get_num_threads(),
        "steps": num_iterations * batch_size,
        "loop_seconds": wall,
        "waiting_for_batches_seconds": waited,
        "episodes": len(episode_returns),
        "final_return": float(np.mean(episode_returns[-20:])) if episode_returns else float("nan"),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = dataclass_parser(Args, __doc__.split("\n\n")[0], f"quick run: {QUICK_RUN}")
    result = train(Args(**vars(parser.parse_args(argv))))
    print(f"{result['steps']} steps in {result['loop_seconds']:.1f} s ({result['waiting_for_batches_seconds']:.1f} s "
          f"waiting for batches); mean return of the last 20 episodes {result['final_return']:.1f}", file=sys.stderr)
    return result


if __name__ == "__main__":
    json.dump(main(), sys.stdout)
    print()
