"""Compare a trained PPO policy with the baselines on fixed evaluation episodes.

    python -m examples.vr_edge.evaluate --policy runs/vr_edge/policy.pt

Every policy plays the same episodes: one `env.reset(seed=s)` per seed in
`range(--first-seed, --first-seed + --episodes)`, so the table is exactly reproducible. The
default seeds start far from zero; training draws its reset seeds from the collector's
`SeedSequence` streams, 32-bit words that land on one of these twenty with negligible
probability. The PPO policy acts deterministically (each user's most probable level).

Prints a Markdown table of mean and standard deviation of the episode return (and the mean
episode length) and, with `--json PATH`, writes the same rows to a JSON file.
"""

import argparse
import json
import multiprocessing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from examples.vr_edge.agent import CollectorPolicy, load_agent
from examples.vr_edge.baselines import BandwidthShareHeuristic, LowestBitratePolicy
from examples.vr_edge.synthetic_env import SyntheticVREdgeEnv
from parallel_rollouts import PolicyOutput
from parallel_rollouts.policy import to_numpy

DEFAULT_FIRST_SEED = 1_000_000
DEFAULT_EPISODES = 20

BatchedPolicy = Callable[[np.ndarray], Any]


def run_episodes(env: SyntheticVREdgeEnv, policy: BatchedPolicy, seeds: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Play one episode per seed with a batched policy; return the episode returns and lengths."""
    returns, lengths = [], []
    for seed in seeds:
        observation, _ = env.reset(seed=int(seed))
        episode_return, length = 0.0, 0
        while True:
            output = policy(observation[None])
            actions = output.actions if isinstance(output, PolicyOutput) else output
            observation, reward, terminated, truncated, _ = env.step(np.asarray(to_numpy(actions))[0])
            episode_return += reward
            length += 1
            if terminated or truncated:
                break
        returns.append(episode_return)
        lengths.append(length)
    return np.array(returns), np.array(lengths)


def evaluate_policies(
    policy_path: str | Path, episodes: int = DEFAULT_EPISODES, first_seed: int = DEFAULT_FIRST_SEED
) -> list[dict[str, Any]]:
    """One row per policy (random, lowest, heuristic, PPO) with its return statistics."""
    agent, checkpoint = load_agent(policy_path)
    env = SyntheticVREdgeEnv(**checkpoint.get("env_kwargs", {}))
    num_users = env.num_users
    if agent.observation_size != env.observation_layout.size:
        raise ValueError(
            f"the policy in {str(policy_path)!r} reads observations of size {agent.observation_size} "
            f"({agent.num_users} users); the env's have size {env.observation_layout.size} ({num_users} users)."
        )
    num_levels = len(env.bitrate_ladder_mbps)
    # Its own generator, seeded from the evaluation seeds, keeps the random row reproducible.
    random_generator = np.random.default_rng(first_seed)

    def random_policy(observations: np.ndarray) -> np.ndarray:
        return random_generator.integers(0, num_levels, size=(observations.shape[0], num_users))

    policies: dict[str, BatchedPolicy] = {
        "random": random_policy,
        "lowest bitrate": LowestBitratePolicy(num_users),
        "bandwidth-share heuristic": BandwidthShareHeuristic(env.observation_layout),
        "PPO (deterministic)": CollectorPolicy(agent, deterministic=True),
    }
    seeds = range(first_seed, first_seed + episodes)
    rows = []
    for name, policy in policies.items():
        returns, lengths = run_episodes(env, policy, seeds)
        rows.append(
            {
                "policy": name,
                "mean_return": float(returns.mean()),
                "std_return": float(returns.std()),
                "mean_length": float(lengths.mean()),
                "episodes": episodes,
                "first_seed": first_seed,
            }
        )
    env.close()
    return rows


def markdown_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| policy | episode return (mean ± std) | mean episode length |", "|---|---:|---:|"]
    for row in rows:
        lines.append(
            f"| {row['policy']} | {row['mean_return']:.1f} ± {row['std_return']:.1f} | {row['mean_length']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Evaluate, print the Markdown table, write `--json` if given, and return the rows."""
    parser = argparse.ArgumentParser(
        description="Compare a trained PPO policy with baseline policies on fixed seeds.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--policy", required=True, help="policy.pt written by examples.vr_edge.train")
    parser.add_argument("--episodes", type=int, default=DEFAULT_EPISODES, help="episodes per policy")
    parser.add_argument("--first-seed", type=int, default=DEFAULT_FIRST_SEED, help="reset seed of the first episode")
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    if args.episodes < 1:
        parser.error(f"--episodes must be >= 1; got {args.episodes}.")
    if args.first_seed < 0:
        parser.error(f"--first-seed must be >= 0; got {args.first_seed}.")
    if not Path(args.policy).is_file():
        parser.error(f"--policy {args.policy!r} is not a file; train one with `python -m examples.vr_edge.train`.")

    # One observation per forward pass is far too little work to share between threads, and
    # idle intra-op threads spinning for work slow everything down on a busy machine.
    torch.set_num_threads(1)
    rows = evaluate_policies(args.policy, args.episodes, args.first_seed)
    print(markdown_table(rows))
    if args.json is not None:
        json_path = Path(args.json)
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(rows, indent=2) + "\n")
    return rows


if __name__ == "__main__":
    multiprocessing.freeze_support()
    main()
