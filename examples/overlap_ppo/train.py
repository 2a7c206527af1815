"""CleanRL-style PPO that learns from one batch while the collector gathers the next.

    python -m examples.overlap_ppo.train --env CartPole-v1 --max-policy-lag 1 --total-timesteps 100000

With ``--max-policy-lag 0`` the loop takes turns, as every PPO script does: collect, then
update. With ``--max-policy-lag 1`` (the default here) ``collector.collect()`` hands out the
batch gathered in the background and starts the next one at once, with the policy as it is at
that moment, so the envs step while the update runs. Each batch was then acted on by the
policy one update behind the one being trained; PPO's clipped ratio is taken against the
``log_probs`` the collector recorded from the policy that actually acted (``batch.log_probs``,
whose snapshot ``batch.policy_versions`` names), so the correction needs nothing more.

The script reads top to bottom: arguments, the network, the policy the collector calls, then one
loop iteration per update. ``--env`` is a Gymnasium id with discrete actions, or one of the
benchmark workloads ``frames`` (84x84x4 uint8 frames, a small CNN) and ``half_ms`` (a ~0.5 ms
pure-Python step). It prints one line per ``--log-every`` updates and a summary: wall time per
100k steps, the time spent waiting for batches and in the update, and the mean return of the
last episodes. ``python -m examples.overlap_ppo.compare`` runs it with the lag off and on, interleaved.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import multiprocessing
import os
import sys
import textwrap
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

if __name__ == "__main__" and not {"-h", "--help"} & set(sys.argv[1:]):
    # Something on the screen before torch loads (seconds on a cold start); train() then says what it will do.
    print("examples.overlap_ppo.train: loading torch...", flush=True)

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from examples.vr_edge.advantages import compute_gae
from parallel_rollouts import ParallelRolloutCollector, PolicyOutput


@dataclass
class Args:
    env: str = "CartPole-v1"
    """A Gymnasium id with discrete actions, or `frames` / `half_ms` (see the module docstring)."""
    max_policy_lag: int = 1
    """0: collect, then update; 1: collect the next batch while updating on this one."""
    seed: int = 0
    """Seeds the collector (episodes), the network's initial weights and the action sampler."""
    total_timesteps: int = 100_000
    """Env steps to train for (rounded down to whole batches)."""
    num_envs: int = 8
    """Envs stepped side by side."""
    num_steps: int = 128
    """Steps per env in each batch (the collector's horizon)."""
    backend: str = "async"
    """The collector's backend."""
    policy_placement: str = "workers"
    """`workers` (the policy runs in the worker processes, beside the envs: the fastest on few cores) or `main`
    (here, on a background thread while updating). Only `async` has workers: other backends run it here."""
    torch_threads: int = -1
    """Threads for PyTorch's operators (-1: the usable cores the worker processes leave, at least 1; 0: PyTorch's default)."""
    learning_rate: float = 2.5e-4
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
    log_every: int = 10
    """Print a progress line after the first update and every this many (0: only the summary)."""


#: A run of seconds: 20 updates of 8 x 128 steps on CartPole (about 8 s on 2 cores).
QUICK_RUN = "python -m examples.overlap_ppo.train --total-timesteps 20480"


def env_factory(name: str):
    """A picklable factory of one env of ``name``."""
    if name == "frames":
        from benchmarks.envs import FrameImageEnv

        return partial(FrameImageEnv, episode_length=100)
    if name == "half_ms":
        from benchmarks.envs import HalfMillisecondEnv

        return partial(HalfMillisecondEnv, episode_length=200)
    return partial(gym.make, name)


class Agent(nn.Module):
    """Actor and critic over a shared trunk: a small CNN for ``HxWxC`` uint8 frames, else a 64-64 MLP."""

    def __init__(self, observation_shape: tuple[int, ...], num_actions: int) -> None:
        super().__init__()
        self.frames = len(observation_shape) == 3
        if self.frames:
            height, width, channels = observation_shape
            self.trunk = nn.Sequential(
                nn.Conv2d(channels, 16, 8, stride=4), nn.ReLU(),
                nn.Conv2d(16, 32, 4, stride=2), nn.ReLU(),
                nn.Flatten(),
            )
            with torch.no_grad():
                size = self.trunk(torch.zeros(1, channels, height, width)).shape[1]
            self.trunk.append(nn.Linear(size, 256))
            self.trunk.append(nn.ReLU())
            features = 256
        else:
            size = int(np.prod(observation_shape))
            self.trunk = nn.Sequential(nn.Linear(size, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh())
            features = 64
        self.actor = nn.Linear(features, num_actions)
        self.critic = nn.Linear(features, 1)

    def features(self, observations: torch.Tensor) -> torch.Tensor:
        if self.frames:
            return self.trunk(observations.permute(0, 3, 1, 2).float() / 255.0)
        return self.trunk(observations.float().flatten(1))

    def forward(self, observations: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.features(observations)
        return self.actor(hidden), self.critic(hidden).squeeze(-1)


class ActingPolicy:
    """What the collector calls: samples actions from the agent with a generator of its own
    (shared by the copies the collector runs, so the stream goes on from batch to batch)."""

    def __init__(self, agent: Agent, seed: int) -> None:
        self.agent = agent
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(self, observations: np.ndarray) -> PolicyOutput:
        with torch.no_grad():
            # torch.tensor copies the read-only rows the collector hands out (no warning).
            logits, values = self.agent(torch.tensor(observations))
            probabilities = torch.softmax(logits, dim=-1)
            actions = torch.multinomial(probabilities, 1, generator=self.generator).squeeze(1)
            log_probs = torch.log_softmax(logits, dim=-1).gather(1, actions[:, None]).squeeze(1)
        return PolicyOutput(actions, values=values, log_probs=log_probs)


def values_of(agent: Agent, observations: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return agent(torch.from_numpy(np.ascontiguousarray(observations)))[1].double().numpy()


def ppo_update(agent: Agent, optimizer: torch.optim.Optimizer, batch, args: Args, generator: torch.Generator) -> dict:
    """One PPO update (clipped ratio against the recorded log-probabilities) on ``batch``."""
    horizon, num_envs = batch.rewards.shape
    mask = batch.final_observation_mask
    final_values = np.zeros((horizon, num_envs))
    if mask.any():
        final_values[mask] = values_of(agent, batch.final_observations[mask])
    bootstrap_values = values_of(agent, batch.bootstrap_observations)
    advantages, returns = compute_gae(
        batch.rewards, batch.values, batch.terminations, batch.truncations, final_values, bootstrap_values,
        args.gamma, args.gae_lambda,
    )
    flat = lambda array: torch.as_tensor(np.ascontiguousarray(array)).reshape((horizon * num_envs,) + array.shape[2:])  # noqa: E731
    observations, actions = flat(batch.observations), flat(batch.actions).long()
    old_log_probs, advantages, returns = flat(batch.log_probs), flat(advantages).float(), flat(returns).float()
    size = horizon * num_envs
    minibatch = size // args.num_minibatches
    clip_fractions = []
    for _ in range(args.update_epochs):
        order = torch.randperm(size, generator=generator)
        for start in range(0, size, minibatch):
            index = order[start : start + minibatch]
            logits, values = agent(observations[index])
            log_probs = torch.log_softmax(logits, dim=-1)
            new_log_probs = log_probs.gather(1, actions[index, None]).squeeze(1)
            ratio = (new_log_probs - old_log_probs[index]).exp()
            advantage = advantages[index]
            advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
            policy_loss = torch.max(-advantage * ratio, -advantage * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)).mean()
            value_loss = 0.5 * ((values - returns[index]) ** 2).mean()
            entropy = -(log_probs.exp() * log_probs).sum(dim=1).mean()
            loss = policy_loss - args.ent_coef * entropy + args.vf_coef * value_loss
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()
            clip_fractions.append(((ratio - 1).abs() > args.clip_coef).float().mean().item())
    return {"clip_fraction": float(np.mean(clip_fractions))}


def cpu_seconds() -> float:
    """CPU seconds used so far by this process (every thread) and its live worker processes: what
    the split of a turn-taking run into collection and update is measured in (Linux; elsewhere
    this process alone)."""
    total = time.process_time()
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    for child in multiprocessing.active_children():
        try:
            with open(f"/proc/{child.pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
        except (OSError, IndexError, ValueError):
            continue
    return total


def train(args: Args) -> dict[str, Any]:
    """Train; the run's timings and returns."""
    num_updates = args.total_timesteps // (args.num_envs * args.num_steps)
    placement = args.policy_placement if args.backend == "async" else "main"
    print(f"PPO on {args.env}: {args.num_envs} envs, backend {args.backend}, policy_placement={placement}, "
          f"max_policy_lag={args.max_policy_lag}, {num_updates * args.num_envs * args.num_steps:,} timesteps "
          f"({num_updates} update{'' if num_updates == 1 else 's'} of {args.num_envs}x{args.num_steps}), device cpu, "
          f"seed {args.seed}", flush=True)
    threads = args.torch_threads
    if threads < 0:
        # Each worker process takes a core; the learner gets the rest, so that PyTorch's threads
        # never wait actively for cores the workers hold.
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        workers = min(cores, args.num_envs) if args.backend == "async" and placement == "workers" else 0
        threads = max(1, cores - workers)
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(args.seed)
    factory = env_factory(args.env)
    probe = factory()
    observation_shape, num_actions = probe.observation_space.shape, int(probe.action_space.n)
    probe.close()
    agent = Agent(observation_shape, num_actions)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    policy = ActingPolicy(agent, args.seed)
    update_generator = torch.Generator().manual_seed(args.seed + 1)
    returns: list[float] = []
    waited = updating = collection_cpu = update_cpu = 0.0
    lags = []
    started = time.perf_counter()
    with ParallelRolloutCollector(
        [factory] * args.num_envs, policy, args.backend, horizon=args.num_steps, seed=args.seed,
        policy_placement=placement if args.backend == "async" else None, max_policy_lag=args.max_policy_lag,
    ) as collector:
        loop_started = time.perf_counter()
        for update in range(num_updates):
            before, cpu_before = time.perf_counter(), cpu_seconds()
            batch = collector.collect()
            after, cpu_after = time.perf_counter(), cpu_seconds()
            stats = ppo_update(agent, optimizer, batch, args, update_generator)
            updating += time.perf_counter() - after
            waited += after - before
            # With the lag the two phases overlap and the split means little; without it, these
            # are the core-seconds each phase keeps busy.
            collection_cpu += cpu_after - cpu_before
            update_cpu += cpu_seconds() - cpu_after
            returns.extend(batch.episode_returns.tolist())
            lags.append(update - int(batch.policy_versions[0, 0]))
            if args.log_every and (update == 0 or (update + 1) % args.log_every == 0):  # the first at once
                recent = np.mean(returns[-20:]) if returns else float("nan")
                print(f"update {update + 1}/{num_updates}: return {recent:.1f}, clip fraction "
                      f"{stats['clip_fraction']:.3f}, {time.perf_counter() - started:.1f} s", flush=True)
        loop = time.perf_counter() - loop_started
    wall = time.perf_counter() - started
    steps = num_updates * args.num_envs * args.num_steps
    result = {
        "args": dataclasses.asdict(args),
        "steps": steps,
        "wall_seconds": wall,
        # The training loop alone, without starting and closing the workers.
        "loop_seconds": loop,
        "seconds_per_100k_steps": loop * 100_000 / steps,
        "waiting_for_batches_seconds": waited,
        "update_seconds": updating,
        "collection_cpu_seconds": collection_cpu,
        "update_cpu_seconds": update_cpu,
        "final_return": float(np.mean(returns[-20:])) if returns else float("nan"),
        "episodes": len(returns),
        "max_observed_lag": max(lags) if lags else 0,
    }
    print(f"{steps} steps in {loop:.1f} s of training loop ({result['seconds_per_100k_steps']:.1f} s per 100k; "
          f"{wall:.1f} s with starting and closing the workers): waited "
          f"{waited:.1f} s for batches, {updating:.1f} s updating; mean return of the last 20 episodes "
          f"{result['final_return']:.1f}", flush=True)
    return result


def field_help(args_class: type) -> dict[str, str]:
    """Each field's docstring, the string right below it in the class body (what `--help` shows),
    the dataclasses it extends included."""
    helps: dict[str, str] = {}
    for cls in reversed([cls for cls in args_class.__mro__ if dataclasses.is_dataclass(cls)]):
        body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
        helps.update({
            node.target.id: " ".join(after.value.value.split())
            for node, after in zip(body, body[1:])
            if isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        })
    return helps


def dataclass_parser(args_class: type, description: str, epilog: str) -> argparse.ArgumentParser:
    """A flag per field of ``args_class`` (``num_envs`` -> ``--num-envs``), its docstring and default in the help."""
    parser = argparse.ArgumentParser(
        description=description, epilog=epilog, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    helps = field_help(args_class)
    for field in dataclasses.fields(args_class):
        kind = _boolean if isinstance(field.default, bool) else type(field.default)
        parser.add_argument(f"--{field.name.replace('_', '-')}", type=kind, default=field.default,
                            help=helps.get(field.name, "(undocumented)"))
    return parser


def _boolean(text: str) -> bool:
    """``true``/``false`` (or 1/0, yes/no) as a flag's value: ``bool("false")`` would be true."""
    lowered = text.lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false; got {text!r}")


def parse_args(argv: list[str] | None = None) -> Args:
    parser = dataclass_parser(Args, __doc__.split("\n\n")[0], f"quick run (20 updates): {QUICK_RUN}")
    return Args(**vars(parser.parse_args(argv)))


if __name__ == "__main__":
    train(parse_args())
