"""CleanRL's ``ppo.py`` training loop as its users run it: what the recipe (:mod:`.train`)
replaces, and the baseline of the training-loop benchmark (:mod:`benchmarks.training_loop`).

    python -m examples.ppo_recipe.cleanrl_loop --vector-env SyncVectorEnv --total-timesteps 16384

The loop is CleanRL's, trimmed of its command line, logging and video code: torch storage of
``(num_steps, num_envs)``, one ``agent.get_action_and_value`` per step, ``envs.step`` on the
action array, ``torch.Tensor`` conversions, GAE that treats a truncation as a termination (as
CleanRL does), then the clipped PPO update. ``--vector-env`` is the one line a user swaps:
``SyncVectorEnv`` (CleanRL's), ``ParallelVectorEnv`` (the library's at its defaults),
``ParallelVectorEnv-sync`` or ``ParallelVectorEnv-async``.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass

import gymnasium as gym
import numpy as np
import torch

from examples.ppo_recipe.agent import Agent, PPOArgs, make_env, ppo_update
from examples.overlap_ppo.train import dataclass_parser

VECTOR_ENVS = ("SyncVectorEnv", "ParallelVectorEnv", "ParallelVectorEnv-sync", "ParallelVectorEnv-async")


@dataclass
class Args(PPOArgs):
    env_id: str = "CartPole-v1"
    """A Gymnasium id with discrete actions, `frames` or `half_ms`."""
    vector_env: str = "SyncVectorEnv"
    """The vector env class: SyncVectorEnv, ParallelVectorEnv (its defaults), ParallelVectorEnv-sync or -async."""
    total_timesteps: int = 16384
    """Env steps (rounded down to whole iterations)."""
    seed: int = 1
    """Seeds the envs, torch and NumPy."""
    torch_threads: int = 0
    """torch.set_num_threads (0: torch's default)."""


def make_vector_env(kind: str, fns: list):
    if kind == "SyncVectorEnv":
        return gym.vector.SyncVectorEnv(fns)
    from parallel_rollouts import ParallelVectorEnv

    if kind == "ParallelVectorEnv":
        return ParallelVectorEnv(fns)
    if kind in ("ParallelVectorEnv-sync", "ParallelVectorEnv-async"):
        return ParallelVectorEnv(fns, backend=kind.rsplit("-", 1)[1])
    raise ValueError(f"`vector_env` must be one of {VECTOR_ENVS}; got {kind!r}.")


def train(args: Args) -> dict:
    """CleanRL's loop; its wall time (the loop alone), the time inside ``envs.step`` and the returns."""
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    envs = make_vector_env(args.vector_env, [make_env(args.env_id)] * args.num_envs)
    batch_size = args.num_envs * args.num_steps
    num_iterations = args.total_timesteps // batch_size
    agent = Agent(envs.single_observation_space.shape, int(envs.single_action_space.n))
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    obs = torch.zeros((args.num_steps, args.num_envs) + envs.single_observation_space.shape)
    actions = torch.zeros((args.num_steps, args.num_envs) + envs.single_action_space.shape)
    logprobs = torch.zeros((args.num_steps, args.num_envs))
    rewards = torch.zeros((args.num_steps, args.num_envs))
    dones = torch.zeros((args.num_steps, args.num_envs))
    values = torch.zeros((args.num_steps, args.num_envs))

    episode_returns: list[float] = []
    step_seconds = 0.0
    started = time.perf_counter()
    next_obs, _ = envs.reset(seed=args.seed)
    next_obs = torch.Tensor(next_obs)
    next_done = torch.zeros(args.num_envs)
    for iteration in range(1, num_iterations + 1):
        frac = 1.0 - (iteration - 1.0) / num_iterations
        optimizer.param_groups[0]["lr"] = frac * args.learning_rate
        for step in range(0, args.num_steps):
            obs[step] = next_obs
            dones[step] = next_done
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value.flatten()
            actions[step] = action
            logprobs[step] = logprob
            stepped = time.perf_counter()
            next_obs, reward, terminations, truncations, infos = envs.step(action.cpu().numpy())
            step_seconds += time.perf_counter() - stepped
            next_done = np.logical_or(terminations, truncations)
            rewards[step] = torch.tensor(reward).view(-1)
            next_obs, next_done = torch.Tensor(next_obs), torch.Tensor(next_done)
            if "episode" in infos:
                episode_returns.extend(infos["episode"]["r"][infos["_episode"]].tolist())

        with torch.no_grad():
            next_value = agent.get_value(next_obs).reshape(1, -1)
            advantages = torch.zeros_like(rewards)
            lastgaelam = 0
            for t in reversed(range(args.num_steps)):
                if t == args.num_steps - 1:
                    nextnonterminal = 1.0 - next_done
                    nextvalues = next_value
                else:
                    nextnonterminal = 1.0 - dones[t + 1]
                    nextvalues = values[t + 1]
                delta = rewards[t] + args.gamma * nextvalues * nextnonterminal - values[t]
                advantages[t] = lastgaelam = delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam
            returns = advantages + values

        ppo_update(
            agent, optimizer, args,
            obs.reshape((-1,) + envs.single_observation_space.shape), logprobs.reshape(-1),
            actions.reshape((-1,) + envs.single_action_space.shape), advantages.reshape(-1),
            returns.reshape(-1), values.reshape(-1),
        )
    wall = time.perf_counter() - started
    envs.close()
    return {
        "args": asdict(args),
        "steps": num_iterations * batch_size,
        "loop_seconds": wall,
        "step_seconds": step_seconds,
        "episodes": len(episode_returns),
        "final_return": float(np.mean(episode_returns[-20:])) if episode_returns else float("nan"),
    }


if __name__ == "__main__":
    parser = dataclass_parser(Args, __doc__.split("\n\n")[0], "")
    result = train(Args(**vars(parser.parse_args())))
    json.dump(result, sys.stdout)
    print()
