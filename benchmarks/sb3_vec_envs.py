"""Stable-Baselines3 PPO's rollout collection on each VecEnv: DummyVecEnv, SubprocVecEnv, ParallelVecEnv.

Run: ``python -m benchmarks.sb3_vec_envs [--rounds 7] [--output benchmarks/results/sb3_vec_envs.json]``

Groups, 16 envs each (every contender of a group is built first and stays
alive; each round times one unit of each in a fixed order, and ratios are taken
within a round):

``sb3_cartpole_16``
    CartPole-v1. One unit = one ``PPO.collect_rollouts`` of ``n_steps=128``
    (2,048 transitions): the MLP policy's forward pass, ``VecEnv.step`` and
    the rollout buffer, exactly what ``PPO.learn`` does between updates.
``sb3_half_ms_16``
    The 0.5 ms pure-Python env (:class:`benchmarks.envs.HalfMillisecondEnv`),
    ``n_steps=16`` (256 transitions).

Contenders: ``DummyVecEnv``, ``SubprocVecEnv`` (one process per env, SB3's
default start method), ``ParallelVecEnv`` sync and async (default workers, and
16 workers: one process per env, as ``SubprocVecEnv``),
and two references that say where the time goes: ``DummyVecEnv seeded
episodes`` (its envs reset with the same per-episode seeds ParallelVecEnv
uses, autoresets included: the cost of seeding every episode) and ``PPO alone``
(a VecEnv that costs nothing: the policy and buffer's share of a unit, which
bounds any vec env's speed-up).

``step_cartpole_16``
    The vec envs alone, without PPO: ``VecEnv.step`` with precomputed random
    actions, 256 steps of 16 CartPole envs per unit.
PyTorch runs on one thread, so that the policy does not compete with the
workers for the cores. Throughput is transitions per second; ``wall_seconds``
is the time of one unit (one collection between two PPO updates).
"""

from __future__ import annotations

import argparse
import json
import os
from functools import partial
from pathlib import Path

import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv

from parallel_rollouts.sb3 import ParallelVecEnv
from parallel_rollouts.sb3.env_side import make_seeded_episode_env

from .report import machine_record
# The env factories live in a module that imports neither PyTorch nor SB3: the workers import it.
from .vector_envs import Contender, cartpole, half_ms, run_group

NUM_ENVS = 16
N_STEPS = {"cartpole": 128, "half_ms": 16}
STEP_ONLY_STEPS = 256


class NoEnvVecEnv(VecEnv):
    """A VecEnv that costs nothing: the same spaces, constant observations, no episode ever ends."""

    def __init__(self, env_fns) -> None:
        env = env_fns[0]()
        super().__init__(len(env_fns), env.observation_space, env.action_space)
        self._observations = np.zeros((self.num_envs,) + env.observation_space.shape, dtype=env.observation_space.dtype)
        self._rewards = np.zeros(self.num_envs, dtype=np.float32)
        self._dones = np.zeros(self.num_envs, dtype=bool)
        env.close()

    def reset(self):
        return self._observations.copy()

    def step_async(self, actions) -> None:
        pass

    def step_wait(self):
        infos = [{"TimeLimit.truncated": False} for _ in range(self.num_envs)]
        return self._observations.copy(), self._rewards.copy(), self._dones.copy(), infos

    def close(self) -> None:
        pass

    def get_attr(self, attr_name, indices=None):
        return [None if attr_name == "render_mode" else getattr(self, attr_name)] * len(self._get_indices(indices))

    def set_attr(self, attr_name, value, indices=None) -> None:
        raise NotImplementedError

    def env_method(self, method_name, *method_args, indices=None, **method_kwargs):
        raise NotImplementedError

    def env_is_wrapped(self, wrapper_class, indices=None):
        return [False] * len(self._get_indices(indices))


def seeded_dummy_vec_env(env_fns) -> DummyVecEnv:
    """DummyVecEnv whose envs reset every episode with ParallelVecEnv's seeds (root 0)."""
    return DummyVecEnv([partial(make_seeded_episode_env, env_fn, index, 0) for index, env_fn in enumerate(env_fns)])


VEC_ENVS = {
    "DummyVecEnv": DummyVecEnv,
    "SubprocVecEnv": SubprocVecEnv,
    "ParallelVecEnv sync": partial(ParallelVecEnv, backend="sync", seed=0),
    "ParallelVecEnv async": partial(ParallelVecEnv, backend="async", seed=0),
    # As many processes as SubprocVecEnv: on a machine shared with other jobs, each process gets
    # its share of the cores, so the process count alone moves a process-based contender's speed.
    "ParallelVecEnv async 16 workers": partial(ParallelVecEnv, backend="async", seed=0, num_workers=NUM_ENVS),
    "DummyVecEnv seeded episodes": seeded_dummy_vec_env,
    "PPO alone": NoEnvVecEnv,
}
TARGETS = (
    ("sb3_cartpole_16", "ParallelVecEnv async / SubprocVecEnv", 5.0),
    ("sb3_half_ms_16", "ParallelVecEnv async / SubprocVecEnv", 1.3),
    ("sb3_cartpole_16", "ParallelVecEnv sync / DummyVecEnv", 0.95),
    ("sb3_half_ms_16", "ParallelVecEnv sync / DummyVecEnv", 0.95),
)
# Not targets: what bounds and explains them.
REFERENCES = (
    ("sb3_cartpole_16", "PPO alone / SubprocVecEnv"),
    ("sb3_cartpole_16", "ParallelVecEnv sync / DummyVecEnv seeded episodes"),
    ("sb3_cartpole_16", "DummyVecEnv seeded episodes / DummyVecEnv"),
    ("sb3_half_ms_16", "ParallelVecEnv async 16 workers / SubprocVecEnv"),
    ("sb3_cartpole_16", "ParallelVecEnv async 16 workers / SubprocVecEnv"),
    ("step_cartpole_16", "ParallelVecEnv async / SubprocVecEnv"),
    ("step_cartpole_16", "ParallelVecEnv sync / DummyVecEnv"),
    ("step_cartpole_16", "ParallelVecEnv sync / DummyVecEnv seeded episodes"),
)


def ppo_collection(name: str, vec_env, n_steps: int) -> Contender:
    """One unit = one ``collect_rollouts`` of PPO on ``vec_env``, as ``PPO.learn`` runs it."""
    model = PPO("MlpPolicy", vec_env, n_steps=n_steps, batch_size=n_steps, seed=0, device="cpu")
    _, callback = model._setup_learn(total_timesteps=10**9, callback=None)
    callback.on_training_start(locals(), globals())

    def run() -> None:
        model.collect_rollouts(model.env, callback, model.rollout_buffer, n_rollout_steps=n_steps)

    return Contender(name, run, n_steps * vec_env.num_envs, vec_env.close)


def vec_env_stepping(name: str, vec_env, steps: int) -> Contender:
    """One unit = ``steps`` calls of ``vec_env.step`` with precomputed random actions."""
    vec_env.seed(0)
    vec_env.reset()
    actions = np.random.default_rng(0).integers(0, 2, size=(steps, vec_env.num_envs))

    def run() -> None:
        step = vec_env.step
        for t in range(steps):
            step(actions[t])

    return Contender(name, run, steps * vec_env.num_envs, vec_env.close)


def build_groups(selected: set[str]) -> dict:
    groups = {
        "sb3_cartpole_16": (cartpole, N_STEPS["cartpole"], ppo_collection),
        "sb3_half_ms_16": (half_ms, N_STEPS["half_ms"], ppo_collection),
        "step_cartpole_16": (cartpole, STEP_ONLY_STEPS, vec_env_stepping),
    }

    def make(env_fn, steps, contender) -> list[Contender]:
        contenders: list[Contender] = []
        try:
            for name, vec_env_class in VEC_ENVS.items():
                if contender is vec_env_stepping and name == "PPO alone":
                    continue
                contenders.append(contender(name, vec_env_class([env_fn] * NUM_ENVS), steps))
        except BaseException:
            for made in contenders:
                made.close()
            raise
        return contenders

    return {name: partial(make, *spec) for name, spec in groups.items() if not selected or name in selected}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--groups", nargs="*", default=[], help="run only these groups")
    parser.add_argument("--output", type=Path, default=Path("benchmark-results/sb3_vec_envs.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    results = []
    for name, make in build_groups(set(args.groups)).items():
        print(f"running {name} ...", flush=True)
        result = run_group(name, make, args.rounds, args.warmup)
        transitions = (STEP_ONLY_STEPS if name.startswith("step_") else N_STEPS[name.split("_", 1)[1].rsplit("_", 1)[0]]) * NUM_ENVS
        result["wall_seconds_per_unit"] = {
            contender: {"median": transitions / summary["median"], "min": transitions / summary["max"], "max": transitions / summary["min"]}
            for contender, summary in result["throughputs"].items()
        }
        results.append(result)
        for contender, summary in result["throughputs"].items():
            print(f"  {contender}: median {summary['median']:.0f} transitions/s", flush=True)
    by_group = {result["group"]: result for result in results}
    targets = []
    for group, ratio_name, target in TARGETS:
        if group in by_group:
            ratio = by_group[group]["ratios"][ratio_name]
            targets.append(
                {"group": group, "ratio": ratio_name, "target": target, "median": ratio["median"],
                 "min": ratio["min"], "max": ratio["max"], "met": ratio["median"] >= target}
            )
    references = [
        {"group": group, "ratio": ratio_name, **{k: by_group[group]["ratios"][ratio_name][k] for k in ("median", "min", "max")}}
        for group, ratio_name in REFERENCES
        if group in by_group
    ]
    document = {
        "machine": machine_record(),
        "settings": {"rounds": args.rounds, "warmup": args.warmup, "num_envs": NUM_ENVS, "n_steps": N_STEPS,
                     "torch_threads": torch.get_num_threads()},
        "load_average": {"before": load_before, "after": os.getloadavg()},
        "targets": targets,
        "references": references,
        "groups": results,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(document, indent=2, default=str) + "\n")
    for entry in targets:
        print(f"{entry['group']}: {entry['ratio']} = {entry['median']:.2f}x "
              f"(range {entry['min']:.2f}-{entry['max']:.2f}x; target {entry['target']}x)")
    for entry in references:
        print(f"{entry['group']}: {entry['ratio']} = {entry['median']:.2f}x (range {entry['min']:.2f}-{entry['max']:.2f}x)")
    print(f"wrote {args.output.resolve()}")


if __name__ == "__main__":
    main()
