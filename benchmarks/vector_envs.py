"""Gymnasium vector envs in and out: interleaved throughput of each side against its baseline.

Run: ``python -m benchmarks.vector_envs [--rounds 7] [--output benchmark-results/vector_envs.json]``

Groups (every contender of a group is built first and stays alive; each round
times one unit of each, in a fixed order, and ratios are taken within a round):

``source_cartpole_1024``
    ``CartPoleVectorEnv`` with N=1024 (Gymnasium's NumPy-vectorized CartPole):
    a bare loop that calls the policy, steps the vector env and stores
    observations, rewards and flags into arrays allocated once, against the
    collector on the same vector env (``sync``; default settings and
    ``reuse_buffers=True``). One unit = ``horizon`` steps.
``source_async_scaling``
    The collector with ``backend="async"``: 2 workers each owning a
    ``CartPoleVectorEnv`` of N=512, against 1 worker owning N=1024; with the
    policy in the main process (the default) and in the workers
    (``policy_placement="workers"``).
``source_async_scaling_8192``
    The same at 2 x N=4096 against 1 x N=8192: ``CartPoleVectorEnv``'s step costs
    nearly as much at N=512 as at N=1024 (NumPy's fixed cost per call dominates;
    ``cartpole_vector_step_cost`` measures it), so splitting it in halves can only
    pay at sizes where a step's work grows with N.
``cartpole_vector_step_cost``
    ``CartPoleVectorEnv.step`` alone at N=512, 1024, 4096 and 8192 (transitions/s),
    the ceiling of any split.
``adapter_cartpole_16`` / ``adapter_half_ms_16``
    A loop stepping a vector env of 16 envs with precomputed random actions:
    ``ParallelVectorEnv`` (async, 2 workers; and sync) against Gymnasium's
    ``SyncVectorEnv(copy=False)`` and ``AsyncVectorEnv(shared_memory=True,
    copy=False)`` (one process per env), on CartPole and on a 0.5 ms env.
``envpool_*`` (only where EnvPool imports)
    EnvPool's own CartPole as a collector source and as a bare vector env, N=16 and N=256.
``multi_agent_spread_8``
    Multi-agent: 8 MPE ``simple_spread`` envs (3 agents each, 24 agent rows per step), one unit
    = 100 steps. The loop a user writes by hand (a Python loop over the envs' dicts, arrays
    allocated once, a reset when no agent is live), two such loops in two processes over 4 envs
    each (the two-core ceiling, run in the same round), the collector (``sync``, ``async`` at its
    defaults, rollout workers), SuperSuit's ``pettingzoo_env_to_vec_env_v1`` +
    ``concat_vec_envs_v1`` as a Stable-Baselines3 VecEnv (its documented SB3 route; ``num_cpus=2``:
    its subprocess workers, ``num_cpus=0``: in this process) and this library's SB3 VecEnv
    ``ParallelVecEnv`` (async, sync), each stepped by the same policy. Needs the ``multiagent``
    extra and SuperSuit.

``peers_cartpole_16`` / ``peers_half_ms_16``
    What a user would otherwise collect the same transitions with: 16 envs x 128 steps per unit,
    on CartPole-v1 and on the 0.5 ms env, every contender with the workload's own policy (the
    lean policy ``obs[:, 2] > 0`` on CartPole). The collector (``make_collector`` at its
    defaults, ``backend="sync"``, and with ``backend="async"``); the hand loop (``hand-loop`` of
    ``benchmarks.contenders``: a Python loop over ``gymnasium.make`` envs, preallocated arrays,
    a reset on done); two hand loops in two processes over 8 envs each (``hand-loop/2proc``:
    what two cores give in that round); the CleanRL-style storage loop over Gymnasium's
    ``SyncVectorEnv(copy=False)`` and ``AsyncVectorEnv(shared_memory=True, copy=False)`` and over
    Stable-Baselines3's ``DummyVecEnv`` and ``SubprocVecEnv``; TorchRL's ``Collector`` over a
    ``SerialEnv`` and over a ``ParallelEnv`` (one process per env) of ``GymEnv``, and its
    ``MultiSyncCollector`` with 2 workers each owning a ``SerialEnv`` of 8, ``frames_per_batch =
    16 x 128``, the same policy as a ``TensorDictModule``. A peer whose package is missing is
    skipped and listed under ``skipped`` with the reason. Ratios are taken against the
    collector's ``sync``, the hand loop and the two hand loops only. Throughput counts useful
    transitions: a Gymnasium vector env's autoreset rows (one per episode end) are not counted.

Every collector and loop uses the same cheap batched policy, so the numbers
compare the stepping machinery, not the policy.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import gymnasium as gym
import numpy as np

from parallel_rollouts import ParallelRolloutCollector, ParallelVectorEnv, make_collector
from parallel_rollouts.conformance.rounds import run_rounds, summarize_ratios, summarize_throughputs

from .contenders import make_contender
from .envs import HalfMillisecondEnv
from .report import machine_record
from .workloads import WORKLOADS

HORIZON = 128
MULTI_AGENT_STEPS = 100
ADAPTER_STEPS = {"cartpole": 256, "half_ms": 24}
# The peers groups: envs, steps per unit and TorchRL's MultiSyncCollector workers; --quick shrinks them.
PEER_SIZES = {"num_envs": 16, "horizon": HORIZON, "torchrl_workers": 2}
QUICK_PEER_SIZES = {"num_envs": 4, "horizon": 8, "torchrl_workers": 2}
PEER_WORKLOADS = ("cartpole", "half_ms")


def lean_policy(observations: np.ndarray) -> np.ndarray:
    """Push the cart toward the pole's lean: one vectorized comparison."""
    return (observations[:, 2] > 0).astype(np.int64)


def cartpole_vector(num_envs: int):
    return gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode="vector_entry_point")


def cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


def half_ms() -> gym.Env:
    return HalfMillisecondEnv()


class Contender:
    """Something timed in rounds: ``run()`` does one unit of ``transitions`` transitions; where
    fewer of them can be useful, it returns the useful count (an int)."""

    def __init__(self, name: str, run: Callable[[], None], transitions: int, close: Callable[[], None]) -> None:
        self.name, self.run, self.transitions, self.close = name, run, transitions, close


def bare_vector_loop(name: str, vector_env, horizon: int) -> Contender:
    """The loop a user writes: policy, step, store into arrays allocated once."""
    n = vector_env.num_envs
    observations = np.zeros((horizon + 1, n) + vector_env.single_observation_space.shape, dtype=np.float32)
    rewards = np.zeros((horizon, n), dtype=np.float64)
    terminations = np.zeros((horizon, n), dtype=bool)
    truncations = np.zeros((horizon, n), dtype=bool)
    actions = np.zeros((horizon, n), dtype=np.int64)
    observations[0], _ = vector_env.reset(seed=0)

    def run() -> None:
        for t in range(horizon):
            actions[t] = lean_policy(observations[t])
            observation, rewards[t], terminations[t], truncations[t], _ = vector_env.step(actions[t])
            observations[t + 1] = observation
        observations[0] = observations[horizon]

    return Contender(name, run, horizon * n, vector_env.close)


def collector(name: str, env_fns, horizon: int, policy: Callable = lean_policy, **options) -> Contender:
    instance = ParallelRolloutCollector(env_fns, policy, horizon=horizon, seed=0, **options)
    return Contender(name, instance.collect, horizon * instance.num_envs, instance.close)


def stepping_loop(name: str, vector_env, steps: int, seed: int = 0) -> Contender:
    """Step a vector env with precomputed random actions (the adapter benchmarks)."""
    vector_env.reset(seed=seed)
    actions = np.random.default_rng(seed).integers(0, 2, size=(steps, vector_env.num_envs))

    def run() -> None:
        step = vector_env.step
        for t in range(steps):
            step(actions[t])

    return Contender(name, run, steps * vector_env.num_envs, vector_env.close)


def spread_policy(observations: np.ndarray) -> np.ndarray:
    """Move toward the nearest landmark's side: one vectorized pass over every agent's row."""
    return (np.argmax(np.abs(observations[:, 4:6]), axis=1) * 2 + (observations[:, 4] > 0) + 1).astype(np.int64) % 5


def spread_env():
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env(max_cycles=25, continuous_actions=False)


class HandMultiAgentLoop:
    """The loop a user writes by hand over PettingZoo envs: dicts in, preallocated arrays out."""

    def __init__(self, num_envs: int, steps: int) -> None:
        self.envs = [spread_env() for _ in range(num_envs)]
        self.agents = self.envs[0].possible_agents
        rows = num_envs * len(self.agents)
        self.steps = steps
        self.observations = np.zeros((steps + 1, rows, 18), dtype=np.float32)
        self.rewards = np.zeros((steps, rows))
        self.dones = np.zeros((steps, rows), dtype=bool)
        self.actions = np.zeros((steps, rows), dtype=np.int64)
        for index, env in enumerate(self.envs):
            observations, _ = env.reset(seed=index)
            self._store(0, index, observations)

    def _store(self, t: int, index: int, observations: dict) -> None:
        base = index * len(self.agents)
        for k, agent in enumerate(self.agents):
            if agent in observations:
                self.observations[t, base + k] = observations[agent]

    def run(self) -> None:
        agents, count = self.agents, len(self.agents)
        for t in range(self.steps):
            self.actions[t] = spread_policy(self.observations[t])
            for index, env in enumerate(self.envs):
                base = index * count
                actions = {agent: self.actions[t, base + k] for k, agent in enumerate(agents) if agent in env.agents}
                observations, rewards, terminations, truncations, _ = env.step(actions)
                for k, agent in enumerate(agents):
                    if agent in rewards:
                        self.rewards[t, base + k] = rewards[agent]
                        self.dones[t, base + k] = terminations[agent] or truncations[agent]
                if not env.agents:
                    observations, _ = env.reset()
                self._store(t + 1, index, observations)
        self.observations[0] = self.observations[self.steps]

    def close(self) -> None:
        for env in self.envs:
            env.close()


def hand_multi_agent_loop(name: str, num_envs: int, steps: int) -> Contender:
    loop = HandMultiAgentLoop(num_envs, steps)
    return Contender(name, loop.run, steps * num_envs * len(loop.agents), loop.close)


_PROCESS_LOOP: HandMultiAgentLoop | None = None


def _hand_loop_unit(num_envs: int, steps: int) -> None:
    """One unit of a hand loop kept alive in a pool process (the two-process ceiling)."""
    global _PROCESS_LOOP
    if _PROCESS_LOOP is None:
        _PROCESS_LOOP = HandMultiAgentLoop(num_envs, steps)
    _PROCESS_LOOP.run()


def two_hand_loops(name: str, num_envs: int, steps: int) -> Contender:
    """Two independent hand loops over ``num_envs / 2`` envs each, in two processes: what two cores give."""
    import multiprocessing

    pool = multiprocessing.get_context("spawn").Pool(2)
    halves = [(num_envs // 2, steps)] * 2
    pool.starmap(_hand_loop_unit, halves)  # builds each process's envs before the rounds

    def close() -> None:
        pool.close()
        pool.join()

    return Contender(name, lambda: pool.starmap(_hand_loop_unit, halves), steps * num_envs * 3, close)


def supersuit_vec_env(name: str, num_envs: int, steps: int, num_cpus: int) -> Contender:
    """SuperSuit's PettingZoo-to-SB3 route, stepped by the same policy (SB3's VecEnv API)."""
    import supersuit

    vec_env = supersuit.concat_vec_envs_v1(
        supersuit.pettingzoo_env_to_vec_env_v1(spread_env()), num_envs, num_cpus=num_cpus, base_class="stable_baselines3"
    )
    return sb3_vec_env_contender(name, vec_env, steps)


def sb3_vec_env_contender(name: str, vec_env, steps: int) -> Contender:
    """Step an SB3 VecEnv with :func:`spread_policy`, as SB3's collection loop does."""
    state = {"observations": vec_env.reset()}

    def run() -> None:
        observations = state["observations"]
        for _ in range(steps):
            observations, _rewards, _dones, _infos = vec_env.step(spread_policy(observations))
        state["observations"] = observations

    return Contender(name, run, steps * vec_env.num_envs, vec_env.close)


def sb3_adapter_vec_env(name: str, num_envs: int, steps: int, backend: str) -> Contender:
    """This library's SB3 VecEnv over the same envs, stepped as :func:`supersuit_vec_env` steps SuperSuit's."""
    from parallel_rollouts.sb3 import ParallelVecEnv

    return sb3_vec_env_contender(name, ParallelVecEnv([spread_env] * num_envs, backend=backend, seed=0), steps)


def multi_agent_collector(name: str, num_envs: int, steps: int, **options) -> Contender:
    from mpe2 import simple_spread_v3

    instance = make_collector(
        simple_spread_v3, num_envs=num_envs, policy=spread_policy, horizon=steps, seed=0,
        env_kwargs={"max_cycles": 25, "continuous_actions": False}, **options,
    )
    return Contender(name, instance.collect, steps * instance.num_envs, instance.close)


def torch_lean_policy(observation):
    """:func:`lean_policy` on a batch of torch observations (TorchRL's policies take tensors)."""
    return (observation[..., 2] > 0).long()


def torch_sign_policy(observation):
    """``benchmarks.workloads.sign_policy`` (the 0.5 ms env's policy) on torch observations."""
    return (observation[..., 0] > 0).long()


def torchrl_cartpole():
    from torchrl.envs import GymEnv

    # Integer actions, as every other contender takes (TorchRL's default is one-hot).
    return GymEnv("CartPole-v1", categorical_action_encoding=True)


def torchrl_half_ms():
    from torchrl.envs import GymWrapper

    return GymWrapper(HalfMillisecondEnv(), categorical_action_encoding=True)


TORCHRL_PEERS = {"cartpole": (torchrl_cartpole, torch_lean_policy), "half_ms": (torchrl_half_ms, torch_sign_policy)}


def torchrl_collector(name: str, workload_name: str, sizes: dict, kind: str) -> Contender:
    """TorchRL's collector as its docs build it; one unit = one batch of ``num_envs * horizon`` frames.

    ``kind``: ``"serial"`` (``Collector`` over a ``SerialEnv``), ``"parallel"`` (``Collector`` over a
    ``ParallelEnv``, one process per env) or ``"multi-sync"`` (``MultiSyncCollector``, each worker
    process a ``Collector`` over a ``SerialEnv`` of its share of the envs).
    """
    from tensordict.nn import TensorDictModule
    from torchrl.collectors import Collector, MultiSyncCollector
    from torchrl.envs import ParallelEnv, SerialEnv

    make_env, policy_function = TORCHRL_PEERS[workload_name]
    num_envs, horizon, workers = sizes["num_envs"], sizes["horizon"], sizes["torchrl_workers"]
    policy = TensorDictModule(policy_function, in_keys=["observation"], out_keys=["action"])
    # The policy needs no transforms (no recurrent state): opt out of TorchRL's check for them.
    options = {"frames_per_batch": num_envs * horizon, "total_frames": -1, "auto_register_policy_transforms": False}
    if kind == "multi-sync":
        instance = MultiSyncCollector([partial(SerialEnv, num_envs // workers, make_env)] * workers, policy, **options)
    else:
        instance = Collector((SerialEnv if kind == "serial" else ParallelEnv)(num_envs, make_env), policy, **options)
    instance.set_seed(0)
    batches = iter(instance)

    def run() -> int:
        return next(batches).numel()  # every frame is a step with a real action (resets happen in the step)

    def close() -> None:
        instance.shutdown()
        # TorchRL 0.14.1: shutdown() leaves MultiSyncCollector's weight-sync scheme (made for any
        # nn.Module policy) open, and its __del__ then hangs the interpreter's exit; close it here.
        for scheme in (getattr(instance, "_weight_sync_schemes", None) or {}).values():
            scheme.shutdown()

    return Contender(name, run, num_envs * horizon, close)


def library_collector(name: str, workload_name: str, sizes: dict, backend: str) -> Contender:
    """The collector at its defaults but ``backend``; as ``make_collector`` builds it."""
    num_envs, horizon, workload = sizes["num_envs"], sizes["horizon"], WORKLOADS[workload_name]
    if workload_name == "cartpole":
        instance = make_collector(
            "CartPole-v1", num_envs=num_envs, policy=workload.policy, backend=backend, horizon=horizon, seed=0
        )
        return Contender(name, instance.collect, horizon * num_envs, instance.close)
    # HalfMillisecondEnv is not registered with Gymnasium: the same collector from its factories.
    return collector(name, workload.env_fns(num_envs), horizon, policy=workload.policy, backend=backend)


def peer(name: str, workload_name: str, sizes: dict, contender_name: str) -> Contender:
    """A contender of ``benchmarks.contenders`` (its ``collect()`` returns the useful transitions)."""
    num_envs, horizon = sizes["num_envs"], sizes["horizon"]
    built = make_contender(contender_name, WORKLOADS[workload_name], num_envs, horizon, seed=0)
    return Contender(name, built.collect, horizon * num_envs, built.close)


# The peers groups' contenders: (label, the package it needs or None, build(label, workload name, sizes)).
PEERS = (
    ("parallel_rollouts sync", None, partial(library_collector, backend="sync")),
    ("parallel_rollouts async", None, partial(library_collector, backend="async")),
    ("hand loop", None, partial(peer, contender_name="hand-loop")),
    # What two cores give now: two hand loops over 8 envs each in two processes, each sending its
    # half of the rollout back once per unit (the second core of a shared machine comes and goes).
    ("hand loop, 2 processes", None, partial(peer, contender_name="hand-loop/2proc")),
    ("Gymnasium SyncVectorEnv", None, partial(peer, contender_name="gym-sync")),
    ("Gymnasium AsyncVectorEnv", None, partial(peer, contender_name="gym-async")),
    ("SB3 DummyVecEnv", "stable_baselines3", partial(peer, contender_name="sb3-dummy")),
    ("SB3 SubprocVecEnv", "stable_baselines3", partial(peer, contender_name="sb3-subproc")),
    ("TorchRL Collector + SerialEnv", "torchrl", partial(torchrl_collector, kind="serial")),
    ("TorchRL Collector + ParallelEnv", "torchrl", partial(torchrl_collector, kind="parallel")),
    ("TorchRL MultiSyncCollector (2 workers)", "torchrl", partial(torchrl_collector, kind="multi-sync")),
)
# Not measured: PufferLib 3.0.0 did not install where these groups were written (its build
# downloads Raylib while pip gets its build requirements), so it has no contender here.
UNMEASURED_PEERS = {
    "PufferLib": "no contender: PufferLib 3.0.0 did not install where this group was written (its build downloads Raylib)"
}


class PeerGroup:
    """``make()`` of a peers group; ``skipped`` names each peer left out, with the reason.

    Its ratios are every contender's against each of ``references``, not every pair.
    """

    references = ("parallel_rollouts sync", "hand loop", "hand loop, 2 processes")

    def __init__(self, workload_name: str, sizes: dict) -> None:
        self.workload_name, self.sizes = workload_name, sizes
        self.skipped = dict(UNMEASURED_PEERS)
        self.peers = []
        for label, package, build in PEERS:
            if package is not None and importlib.util.find_spec(package) is None:
                self.skipped[label] = f"{package} is not installed"
            else:
                self.peers.append((label, build))

    def __call__(self) -> list[Contender]:
        contenders: list[Contender] = []
        try:
            for label, build in self.peers:
                contenders.append(build(label, self.workload_name, self.sizes))
        except BaseException:
            for contender in contenders:
                contender.close()  # worker processes must not outlive a failed start
            raise
        return contenders


def build_groups(selected: set[str], quick: bool = False) -> dict[str, Callable[[], list[Contender]]]:
    groups: dict[str, Callable[[], list[Contender]]] = {
        "source_cartpole_1024": lambda: [
            bare_vector_loop("bare loop", cartpole_vector(1024), HORIZON),
            collector("collector sync", cartpole_vector(1024), HORIZON, backend="sync"),
            collector("collector sync reuse_buffers", cartpole_vector(1024), HORIZON, backend="sync", reuse_buffers=True),
        ],
        "source_async_scaling": lambda: [
            collector("async 1 worker x N=1024", [partial(cartpole_vector, 1024)], HORIZON, backend="async", num_workers=1),
            collector(
                "async 2 workers x N=512", [partial(cartpole_vector, 512)] * 2, HORIZON, backend="async", num_workers=2
            ),
            # Rollout workers run the policy next to their vector env: no per-step exchange.
            collector(
                "rollout workers 1 x N=1024", [partial(cartpole_vector, 1024)], HORIZON, backend="async",
                num_workers=1, policy_placement="workers",
            ),
            collector(
                "rollout workers 2 x N=512", [partial(cartpole_vector, 512)] * 2, HORIZON, backend="async",
                num_workers=2, policy_placement="workers",
            ),
        ],
        # CartPoleVectorEnv's step costs nearly the same at N=512 as at N=1024 (NumPy's
        # per-call overhead dominates), so halves only pay where a step's work grows with N.
        "source_async_scaling_8192": lambda: [
            collector("async 1 worker x N=8192", [partial(cartpole_vector, 8192)], HORIZON, backend="async", num_workers=1),
            collector(
                "async 2 workers x N=4096", [partial(cartpole_vector, 4096)] * 2, HORIZON, backend="async", num_workers=2
            ),
            collector(
                "rollout workers 1 x N=8192", [partial(cartpole_vector, 8192)], HORIZON, backend="async",
                num_workers=1, policy_placement="workers",
            ),
            collector(
                "rollout workers 2 x N=4096", [partial(cartpole_vector, 4096)] * 2, HORIZON, backend="async",
                num_workers=2, policy_placement="workers",
            ),
        ],
        "cartpole_vector_step_cost": lambda: [
            stepping_loop(f"CartPoleVectorEnv N={n}", cartpole_vector(n), 256) for n in (512, 1024, 4096, 8192)
        ],
    }
    for env_name, env_fn in (("cartpole", cartpole), ("half_ms", half_ms)):
        steps = ADAPTER_STEPS[env_name]
        groups[f"adapter_{env_name}_16"] = partial(
            lambda env_fn, steps: [
                stepping_loop("ParallelVectorEnv async", ParallelVectorEnv([env_fn] * 16, backend="async", num_workers=2, copy=False), steps),
                stepping_loop("ParallelVectorEnv sync", ParallelVectorEnv([env_fn] * 16, backend="sync", copy=False), steps),
                stepping_loop("SyncVectorEnv", gym.vector.SyncVectorEnv([env_fn] * 16, copy=False), steps),
                stepping_loop(
                    "AsyncVectorEnv", gym.vector.AsyncVectorEnv([env_fn] * 16, shared_memory=True, copy=False), steps
                ),
            ],
            env_fn,
            steps,
        )
    for workload_name in PEER_WORKLOADS:
        groups[f"peers_{workload_name}_16"] = PeerGroup(workload_name, QUICK_PEER_SIZES if quick else PEER_SIZES)
    groups["multi_agent_spread_8"] = lambda: [
        hand_multi_agent_loop("hand loop", 8, MULTI_AGENT_STEPS),
        two_hand_loops("two hand loops (2 processes)", 8, MULTI_AGENT_STEPS),
        multi_agent_collector("collector sync", 8, MULTI_AGENT_STEPS, backend="sync"),
        multi_agent_collector("collector async", 8, MULTI_AGENT_STEPS, backend="async"),
        multi_agent_collector("collector rollout workers", 8, MULTI_AGENT_STEPS, backend="async", policy_placement="workers"),
        supersuit_vec_env("SuperSuit + SB3 VecEnv, num_cpus=2", 8, MULTI_AGENT_STEPS, num_cpus=2),
        supersuit_vec_env("SuperSuit + SB3 VecEnv, num_cpus=0", 8, MULTI_AGENT_STEPS, num_cpus=0),
        sb3_adapter_vec_env("ParallelVecEnv async", 8, MULTI_AGENT_STEPS, "async"),
        sb3_adapter_vec_env("ParallelVecEnv sync", 8, MULTI_AGENT_STEPS, "sync"),
    ]
    try:
        import envpool  # noqa: F401  (optional contender)
    except ImportError:
        envpool = None
    if envpool is not None:
        for n in (16, 256):
            groups[f"envpool_cartpole_{n}"] = partial(
                lambda n: [
                    bare_vector_loop("EnvPool bare loop", envpool.make_gymnasium("CartPole-v1", num_envs=n, seed=0), HORIZON),
                    collector("collector sync on EnvPool", envpool.make_gymnasium("CartPole-v1", num_envs=n, seed=0), HORIZON, backend="sync"),
                    bare_vector_loop("CartPoleVectorEnv bare loop", cartpole_vector(n), HORIZON),
                    collector("collector sync on CartPoleVectorEnv", cartpole_vector(n), HORIZON, backend="sync"),
                ],
                n,
            )
    return {name: make for name, make in groups.items() if not selected or name in selected}


def _rate(contender: Contender) -> float:
    start = time.perf_counter()
    counted = contender.run()
    elapsed = time.perf_counter() - start
    return (counted if isinstance(counted, int) else contender.transitions) / elapsed


def run_group(name: str, make: Callable[[], list[Contender]], rounds: int, warmup: int) -> dict:
    contenders = make()
    try:
        for contender in contenders:
            for _ in range(warmup):
                contender.run()
        measured = run_rounds(contenders, _rate, rounds, order="rotate")
        rates = {contender.name: samples for contender, samples in zip(contenders, measured.samples)}
    finally:
        for contender in contenders:
            contender.close()
    names = list(rates)
    references = getattr(make, "references", names)
    return {
        "group": name,
        "skipped": dict(getattr(make, "skipped", {})),
        "throughputs": {contender: summarize_throughputs(values) for contender, values in rates.items()},
        "ratios": {
            f"{first} / {second}": summarize_ratios(rates[first], rates[second])
            for first in names
            for second in references
            if first != second
        },
    }


TARGETS = (
    ("source_cartpole_1024", "collector sync / bare loop", 0.8),
    ("source_cartpole_1024", "collector sync reuse_buffers / bare loop", 0.8),
    ("source_async_scaling", "async 2 workers x N=512 / async 1 worker x N=1024", 1.5),
    ("source_async_scaling", "rollout workers 2 x N=512 / rollout workers 1 x N=1024", 1.5),
    ("source_async_scaling_8192", "async 2 workers x N=4096 / async 1 worker x N=8192", 1.5),
    ("source_async_scaling_8192", "rollout workers 2 x N=4096 / rollout workers 1 x N=8192", 1.5),
    ("adapter_cartpole_16", "ParallelVectorEnv async / AsyncVectorEnv", 3.0),
    ("adapter_cartpole_16", "ParallelVectorEnv sync / SyncVectorEnv", 0.8),
    ("adapter_cartpole_16", "ParallelVectorEnv async / SyncVectorEnv", 0.8),
    ("adapter_half_ms_16", "ParallelVectorEnv async / AsyncVectorEnv", 1.5),
    ("multi_agent_spread_8", "collector async / two hand loops (2 processes)", 0.8),
    ("multi_agent_spread_8", "collector sync / hand loop", 1.0),
    ("multi_agent_spread_8", "collector async / SuperSuit + SB3 VecEnv, num_cpus=2", 1.0),
    ("multi_agent_spread_8", "ParallelVecEnv async / SuperSuit + SB3 VecEnv, num_cpus=2", 1.0),
)


def _peer_versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    versions: dict[str, str | None] = {}
    for package in ("gymnasium", "stable-baselines3", "torch", "torchrl", "tensordict", "pufferlib"):
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            versions[package] = None
    return versions


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--groups", nargs="*", default=[], help="run only these groups")
    parser.add_argument("--output", type=Path, default=Path("benchmark-results/vector_envs.json"))
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: one round, no warm-up, the peers groups at 4 envs x 8 steps"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.warmup = 1, 0
    load_before = os.getloadavg()
    results = []
    for name, make in build_groups(set(args.groups), args.quick).items():
        print(f"running {name} ...", flush=True)
        for label, reason in getattr(make, "skipped", {}).items():
            print(f"  skipped {label}: {reason}", flush=True)
        results.append(run_group(name, make, args.rounds, args.warmup))
        for ratio_name, ratio in results[-1]["ratios"].items():
            print(f"  {ratio_name}: median {ratio['median']:.2f}x", flush=True)
    by_group = {result["group"]: result for result in results}
    targets = []
    for group, ratio_name, target in TARGETS:
        if group in by_group:
            median = by_group[group]["ratios"][ratio_name]["median"]
            targets.append({"group": group, "ratio": ratio_name, "target": target, "median": median, "met": median >= target})
    document = {
        "machine": machine_record(),
        "settings": {
            "rounds": args.rounds, "warmup": args.warmup, "quick": args.quick, "horizon": HORIZON,
            "adapter_steps": ADAPTER_STEPS, "peer_sizes": QUICK_PEER_SIZES if args.quick else PEER_SIZES,
            "peer_versions": _peer_versions(),
        },
        # Other programs' load while this ran (1, 5, 15-minute averages): ratios of process-based
        # contenders shift with it (an AsyncVectorEnv of 16 processes gets more of a loaded
        # machine than 2 workers do).
        "load_average": {"before": load_before, "after": os.getloadavg()},
        "targets": targets,
        "groups": results,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(document, indent=2, default=str) + "\n")
    for entry in targets:
        print(f"{entry['group']}: {entry['ratio']} = {entry['median']:.2f}x (target {entry['target']}x)")
    print(f"wrote {args.output.resolve()}")


if __name__ == "__main__":
    main()
