"""The contenders of a throughput comparison: the collector and what users run instead.

Every contender runs one workload with ``num_envs`` envs and ``horizon`` steps per
``collect()``, so every collect is ``horizon * num_envs`` transitions. ``collect()``
returns how many of those were *useful*: Gymnasium's vector envs and EnvPool (in their
default next-step autoreset mode) spend the step after an episode ends on a reset row
whose action is ignored; every other contender has none.

Contenders, by name (``processes`` in the report says how many processes each uses):

``serial``, ``sync``, ``async``
    ``ParallelRolloutCollector`` with that backend and its DEFAULT settings: a fresh
    batch per collect that the caller owns, the compiled core, ``min(usable cores,
    num_envs)`` async workers unless ``--num-workers`` says otherwise.
``sync/reuse``, ``async/reuse``
    The same with ``reuse_buffers=True`` (every collect overwrites the same arrays).
``sync/python``
    ``sync`` with the pure-Python core.
``async/pipelined``, ``async/workers``
    ``async`` with ``pipelined=True`` / with ``policy_placement="workers"`` (rollout workers).
``hand-loop``
    The loop a CleanRL user writes by hand: preallocated ``obs``/``actions``/``rewards``/
    ``dones`` arrays, a Python loop over a list of envs, and ``env.reset()`` without a seed
    when an episode ends. No final observations, one ``dones`` flag for both ends, no
    episode books. Each observation is copied twice (into the next-observation array, then
    into ``obs``). One process.
``hand-loop-reseeding``
    The same loop resetting each finished env with the next of its per-episode seeds
    (``reset(seed=...)``), as the collector does so that any episode can be replayed
    alone: the like-for-like reference for what the collector records. One process.
``bare-loop``
    A Python loop over a list of envs writing into preallocated arrays, keeping final
    observations and separate termination/truncation flags, and resetting each finished
    env at once with a seed from a precomputed list (the per-episode reseeding the
    collector does too). One process.
``hand-loop/2proc``
    Two hand loops, each on half the envs, in two processes, with one exchange per collect:
    each sends its half of the rollout back to this process, which copies it into its own
    arrays. What a competent user writes to use two cores. Three processes.
``bare-loop/2proc``
    Two bare loops, each on half the envs, in two processes that exchange nothing but a
    count per collect: the stricter reference, the ceiling of any runner that uses two
    worker processes on this machine (how much of a second core two busy processes get).
    Three processes.
``hand-loop/shm/K``
    ``K`` hand loops, each on its share of the envs, in ``K`` processes writing their columns
    of the rollout straight into ``[T, N, ...]`` arrays in shared memory; the one exchange per
    collect is a message each way. What a competent user writes to use ``K`` cores on large
    observations (frames) without a framework; the ceiling of the ``K``-worker sweep
    (``--workers-sweep``). Like ``hand-loop``, it resets without a seed, keeps no final
    observations and one ``dones`` flag; the collector's contenders run at their defaults.
    ``K + 1`` processes; single-array spaces only.
``async/workers/K``, ``async/K``
    Rollout workers (``policy_placement="workers"``) and per-step ``async`` with
    ``num_workers=K`` (for ``async/K`` this process then steps no envs itself).
``gym-sync``
    A CleanRL-style storage loop (preallocated ``[T, N, ...]`` arrays) over Gymnasium's
    ``SyncVectorEnv(copy=False)``. One process.
``gym-async``
    The same loop over ``AsyncVectorEnv(shared_memory=True, copy=False)``, spawn context:
    one worker process per env, plus this one.
``envpool`` (optional)
    The same loop over EnvPool's own C++ ``CartPole-v1`` (``cartpole`` workload only),
    synchronous mode, ``batch_size = num_envs``, one thread per core. One process.
``sb3-subproc`` (optional)
    The same loop over Stable-Baselines3's ``SubprocVecEnv``: one worker process per env,
    plus this one. Its step returns the final observation in ``infos`` and the reset one in
    the batch, as the collector does.
``sb3-dummy`` (optional)
    The same loop over Stable-Baselines3's ``DummyVecEnv`` (its envs stepped in turn in this
    process). One process.

An optional contender whose package is not installed (or that has no equivalent of a
workload) is skipped with the reason recorded in the results.
"""

from __future__ import annotations

import importlib.util
import os
import re
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from parallel_rollouts import ParallelRolloutCollector
from parallel_rollouts.processes.slicing import usable_cores

from .workloads import Workload

__all__ = [
    "COLLECTOR_CONTENDERS",
    "Contender",
    "HEADLINE_CONTENDERS",
    "PEER_CONTENDERS",
    "REFERENCE_CONTENDER",
    "REFERENCE_CONTENDERS",
    "make_contender",
    "unavailable_reason",
]

#: The collector's settings per contender name (everything else: the collector's defaults).
COLLECTOR_CONTENDERS: dict[str, dict[str, Any]] = {
    "serial": {"backend": "serial"},
    "sync": {"backend": "sync"},
    "sync/reuse": {"backend": "sync", "reuse_buffers": True},
    "sync/python": {"backend": "sync", "core": "python"},
    "async": {"backend": "async"},
    "async/reuse": {"backend": "async", "reuse_buffers": True},
    "async/pipelined": {"backend": "async", "pipelined": True},
    "async/workers": {"backend": "async", "policy_placement": "workers"},
    # Opt-in: only each env's first episode is seeded (later ones continue its generator).
    "sync/first-seed": {"backend": "sync", "episode_seeds": "first"},
    "async/workers/first-seed": {"backend": "async", "policy_placement": "workers", "episode_seeds": "first"},
    # Opt-in: the policy reads plain read-only views of the batch's rows instead of rows of its
    # read-only mapping (the default, "protected"); or its own copy of each row.
    "sync/views": {"backend": "sync", "policy_inputs": "views"},
    "async/workers/views": {"backend": "async", "policy_placement": "workers", "policy_inputs": "views"},
    "sync/copies": {"backend": "sync", "policy_inputs": "copies"},
    "async/copies": {"backend": "async", "policy_inputs": "copies"},
    "async/workers/copies": {"backend": "async", "policy_placement": "workers", "policy_inputs": "copies"},
}
PEER_CONTENDERS = ("hand-loop", "hand-loop-reseeding", "bare-loop", "hand-loop/2proc", "bare-loop/2proc", "gym-sync", "gym-async", "envpool", "sb3-subproc", "sb3-dummy")
#: ``ratio_vs_reference`` in a comparison is taken against this contender.
REFERENCE_CONTENDER = "bare-loop"
#: Every contender's ratio is also reported against each of these that ran (``ratios``).
REFERENCE_CONTENDERS = ("hand-loop", "hand-loop-reseeding", "bare-loop")
#: What the comparison runs by default.
HEADLINE_CONTENDERS = ("hand-loop", "hand-loop-reseeding", "bare-loop", "hand-loop/2proc", "bare-loop/2proc", "sync", "sync/reuse", "async", "async/reuse",
                       "async/pipelined", "async/workers", "gym-sync", "gym-async", "envpool", "sb3-subproc")

# Episode seeds the bare loop draws up front per env; it cycles through them if a run
# outlasts them (only the cost of a seeded reset matters here, not the seed's value).
RAW_LOOP_SEEDS_PER_ENV = 1024


class Contender(Protocol):
    name: str
    #: Processes the contender runs in, this one included.
    processes: int

    def collect(self) -> int:
        """Collect ``horizon * num_envs`` transitions; return how many were useful."""

    def close(self) -> None: ...


#: ``hand-loop/shm/K``, ``async/workers/K`` and ``async/K``: the K-worker sweep's contenders.
SWEEP_CONTENDER = re.compile(r"^(hand-loop/shm|async/workers|async)/([1-9]\d*)$")


def sweep_contenders(cores: int, num_envs: int) -> list[str]:
    """The ``--workers-sweep`` contenders: for K = 1, 2, 4, ... up to ``cores`` (and ``num_envs``),
    K independent hand loops (the hand loop itself for K = 1), rollout workers and per-step async."""
    names, k = [], 1
    while k <= min(cores, num_envs):
        names += ["hand-loop" if k == 1 else f"hand-loop/shm/{k}", f"async/workers/{k}", f"async/{k}"]
        k *= 2
    return names


def unavailable_reason(name: str, workload: Workload, num_envs: int = 2) -> str | None:
    """Why ``name`` cannot run ``workload`` with ``num_envs`` envs here (a package missing, no
    equivalent env, too few envs to split), else ``None``."""
    if name.endswith("/2proc") and num_envs < 2:
        return "two processes need at least two envs"
    sweep = SWEEP_CONTENDER.match(name)
    if sweep and int(sweep.group(2)) > num_envs:
        return f"{sweep.group(2)} processes need at least as many envs"
    if sweep and sweep.group(1) == "hand-loop/shm" and workload.name == "dict_obs":
        return "the shared-memory loops store single-array spaces only"
    if name == "envpool":
        if importlib.util.find_spec("envpool") is None:
            return "envpool is not installed (pip install envpool)"
        if workload.envpool_task is None:
            return f"EnvPool has no built-in equivalent of the {workload.name!r} workload"
    if name in ("sb3-subproc", "sb3-dummy") and importlib.util.find_spec("stable_baselines3") is None:
        return "stable-baselines3 is not installed (pip install stable-baselines3)"
    return None


# -- storage shaped like a space ---------------------------------------------------------------


def allocate_like(space: gym.Space, leading_shape: tuple[int, ...]) -> Any:
    """Zeroed storage ``[*leading_shape, *space.shape]`` (a dict of them for a Dict space)."""
    if isinstance(space, spaces.Dict):
        return {key: allocate_like(subspace, leading_shape) for key, subspace in space.spaces.items()}
    if isinstance(space, (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
        return np.zeros(leading_shape + space.shape, dtype=space.dtype)
    raise TypeError(
        f"the hand-written benchmark loops store Box, Discrete, MultiDiscrete, MultiBinary and "
        f"Dict spaces; got {space!r}."
    )


def store(storage: Any, index: Any, value: Any) -> None:
    """``storage[index] = value``, key by key for a Dict space."""
    if isinstance(storage, dict):
        for key, leaf in storage.items():
            leaf[index] = value[key]
    else:
        storage[index] = value


def select(storage: Any, index: Any) -> Any:
    """``storage[index]``, key by key for a Dict space."""
    if isinstance(storage, dict):
        return {key: leaf[index] for key, leaf in storage.items()}
    return storage[index]


# -- the collector -----------------------------------------------------------------------------


class CollectorContender:
    """``ParallelRolloutCollector`` with the settings ``COLLECTOR_CONTENDERS[name]``."""

    def __init__(
        self, name: str, workload: Workload, num_envs: int, horizon: int, seed: int, num_workers: int | None,
        options: dict | None = None,
    ) -> None:
        self.name = name
        options = dict(COLLECTOR_CONTENDERS[name] if options is None else options)
        backend = options.pop("backend")
        if backend == "async" and num_workers is not None:
            options["num_workers"] = num_workers
        self.collector = ParallelRolloutCollector(
            workload.env_fns(num_envs), workload.policy, backend=backend, horizon=horizon, seed=seed, **options
        )
        workers = options.get("num_workers") or min(usable_cores(), num_envs)
        self.processes = 1 + (workers if backend == "async" else 0)

    def collect(self) -> int:
        return self.collector.collect().num_transitions

    def close(self) -> None:
        self.collector.close()


# -- the peers ---------------------------------------------------------------------------------


class VectorLoop:
    """CleanRL's rollout loop over a vector env, storage preallocated ``[T, N, ...]``.

    ``envs`` follows Gymnasium's vector API (``reset(seed=)`` and a five-tuple ``step``)
    and autoresets in the next step, as Gymnasium's and EnvPool's vector envs do by default.
    ``seed`` goes to the first ``reset`` (``None`` for envs seeded at construction).
    """

    def __init__(
        self, name: str, envs: Any, observation_space: gym.Space, action_space: gym.Space,
        num_envs: int, processes: int, policy: Any, horizon: int, seed: int | None,
    ) -> None:
        self.name = name
        self.processes = processes
        self.envs = envs
        self.policy = policy
        self.horizon = horizon
        self.num_envs = num_envs
        self.observations = allocate_like(observation_space, (horizon, num_envs))
        self.actions = allocate_like(action_space, (horizon, num_envs))
        self.rewards = np.zeros((horizon, num_envs), dtype=np.float64)
        self.terminations = np.zeros((horizon, num_envs), dtype=bool)
        self.truncations = np.zeros((horizon, num_envs), dtype=bool)
        # EnvPool takes its seed at construction and ignores (with a warning) one passed here.
        self._next_observation, _ = envs.reset() if seed is None else envs.reset(seed=seed)
        # Envs whose previous step ended an episode: their next step is an autoreset row.
        self._autoreset = np.zeros(num_envs, dtype=bool)

    def collect(self) -> int:
        envs, policy, num_envs = self.envs, self.policy, self.num_envs
        next_observation, autoreset = self._next_observation, self._autoreset
        useful = 0
        for step in range(self.horizon):
            store(self.observations, step, next_observation)
            action = policy(next_observation)
            self.actions[step] = action
            next_observation, reward, terminated, truncated, _ = envs.step(action)
            self.rewards[step] = reward
            self.terminations[step] = terminated
            self.truncations[step] = truncated
            useful += num_envs - int(np.count_nonzero(autoreset))
            autoreset = np.logical_or(terminated, truncated)
        self._next_observation, self._autoreset = next_observation, autoreset
        return useful

    def close(self) -> None:
        self.envs.close()


class StableBaselinesLoop:
    """The same storage loop over Stable-Baselines3's ``SubprocVecEnv`` (``DummyVecEnv`` with ``dummy``).

    SB3 resets a finished env within the same step (the batch holds the reset observation,
    ``infos[i]["terminal_observation"]`` the final one) and reports ``dones``, with
    ``infos[i]["TimeLimit.truncated"]`` telling truncations apart; the loop stores both and
    keeps final observations, as an SB3 user bootstrapping truncated episodes does.
    """

    def __init__(self, workload: Workload, num_envs: int, horizon: int, seed: int, dummy: bool = False) -> None:
        from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

        self.name = "sb3-dummy" if dummy else "sb3-subproc"
        self.processes = 1 if dummy else 1 + num_envs
        self.envs = (DummyVecEnv if dummy else SubprocVecEnv)(workload.env_fns(num_envs))
        try:
            self.policy = workload.policy
            self.horizon = horizon
            observation_space = self.envs.observation_space
            self.observations = allocate_like(observation_space, (horizon, num_envs))
            self.final_observations = allocate_like(observation_space, (horizon, num_envs))
            self.actions = allocate_like(self.envs.action_space, (horizon, num_envs))
            self.rewards = np.zeros((horizon, num_envs), dtype=np.float64)
            self.terminations = np.zeros((horizon, num_envs), dtype=bool)
            self.truncations = np.zeros((horizon, num_envs), dtype=bool)
            self.envs.seed(seed)
            self._next_observation = self.envs.reset()
        except BaseException:
            self.envs.close()
            raise

    def collect(self) -> int:
        envs, policy = self.envs, self.policy
        next_observation = self._next_observation
        for step in range(self.horizon):
            store(self.observations, step, next_observation)
            action = policy(next_observation)
            self.actions[step] = action
            next_observation, reward, dones, infos = envs.step(action)
            self.rewards[step] = reward
            for column in np.flatnonzero(dones):
                info = infos[column]
                truncated = bool(info.get("TimeLimit.truncated", False))
                self.truncations[step, column] = truncated
                self.terminations[step, column] = not truncated
                store(self.final_observations, (step, column), info["terminal_observation"])
        self._next_observation = next_observation
        return self.horizon * envs.num_envs

    def close(self) -> None:
        self.envs.close()


class HandLoop:
    """What a CleanRL user writes: step a list of envs in Python, reset on done, no final observations.

    ``reseed``: reset every finished env with the next of its per-episode seeds (drawn up
    front, like the bare loop's); otherwise with no seed, as CleanRL's loop does.
    """

    def __init__(
        self, workload: Workload, num_envs: int, horizon: int, seed: int, reseed: bool, first_column: int = 0
    ) -> None:
        self.name = "hand-loop-reseeding" if reseed else "hand-loop"
        self.processes = 1
        self.policy = workload.policy
        self.horizon = horizon
        self.envs = [env_fn() for env_fn in workload.env_fns(num_envs, first_column)]
        observation_space = self.envs[0].observation_space
        self.observations = allocate_like(observation_space, (horizon, num_envs))
        self.actions = allocate_like(self.envs[0].action_space, (horizon, num_envs))
        self.rewards = np.zeros((horizon, num_envs), dtype=np.float32)
        self.dones = np.zeros((horizon, num_envs), dtype=np.float32)
        self.next_observation = allocate_like(observation_space, (num_envs,))
        self._reseed = reseed
        seeds = np.random.SeedSequence(seed).generate_state(num_envs * RAW_LOOP_SEEDS_PER_ENV, np.uint32)
        self._episode_seeds = seeds.reshape(num_envs, RAW_LOOP_SEEDS_PER_ENV).tolist()
        self._episodes_started = [0] * num_envs
        for column, env in enumerate(self.envs):
            observation, _ = env.reset(seed=self._next_seed(column))
            store(self.next_observation, column, observation)

    def _next_seed(self, column: int) -> int:
        seeds = self._episode_seeds[column]
        seed = seeds[self._episodes_started[column] % len(seeds)]
        self._episodes_started[column] += 1
        return seed

    def collect(self) -> int:
        observations, next_observation = self.observations, self.next_observation
        rewards, dones, reseed = self.rewards, self.dones, self._reseed
        for t in range(self.horizon):
            store(observations, t, next_observation)
            action = self.policy(next_observation)
            self.actions[t] = action
            for column, env in enumerate(self.envs):
                observation, reward, terminated, truncated, _ = env.step(action[column])
                done = terminated or truncated
                if done:
                    observation, _ = env.reset(seed=self._next_seed(column)) if reseed else env.reset()
                store(next_observation, column, observation)
                rewards[t, column] = reward
                dones[t, column] = done
        return self.horizon * len(self.envs)

    def close(self) -> None:
        for env in self.envs:
            env.close()


class BareLoop:
    """No framework: step a list of envs in Python, write into preallocated arrays."""

    def __init__(self, workload: Workload, num_envs: int, horizon: int, seed: int, first_column: int = 0) -> None:
        self.name = "bare-loop"
        self.processes = 1
        self.policy = workload.policy
        self.horizon = horizon
        self.envs = [env_fn() for env_fn in workload.env_fns(num_envs, first_column)]
        observation_space = self.envs[0].observation_space
        self.observations = allocate_like(observation_space, (horizon + 1, num_envs))
        self.final_observations = allocate_like(observation_space, (horizon, num_envs))
        self.actions = allocate_like(self.envs[0].action_space, (horizon, num_envs))
        self.rewards = np.zeros((horizon, num_envs), dtype=np.float64)
        self.terminations = np.zeros((horizon, num_envs), dtype=bool)
        self.truncations = np.zeros((horizon, num_envs), dtype=bool)
        seeds = np.random.SeedSequence(seed).generate_state(num_envs * RAW_LOOP_SEEDS_PER_ENV, np.uint32)
        self._episode_seeds = seeds.reshape(num_envs, RAW_LOOP_SEEDS_PER_ENV).tolist()
        self._episodes_started = [0] * num_envs
        for column in range(num_envs):
            store(self.observations, (0, column), self._reset(column))

    def _reset(self, column: int) -> Any:
        seeds = self._episode_seeds[column]
        seed = seeds[self._episodes_started[column] % len(seeds)]
        self._episodes_started[column] += 1
        observation, _ = self.envs[column].reset(seed=seed)
        return observation

    def collect(self) -> int:
        observations, final_observations = self.observations, self.final_observations
        rewards, terminations, truncations = self.rewards, self.terminations, self.truncations
        for t in range(self.horizon):
            action = self.policy(select(observations, t))
            self.actions[t] = action
            for column, env in enumerate(self.envs):
                observation, reward, terminated, truncated, _ = env.step(action[column])
                rewards[t, column] = reward
                terminations[t, column] = terminated
                truncations[t, column] = truncated
                if terminated or truncated:
                    store(final_observations, (t, column), observation)
                    observation = self._reset(column)
                store(observations, (t + 1, column), observation)
        # The bootstrap row is where the next rollout starts.
        store(observations, 0, select(observations, self.horizon))
        return self.horizon * len(self.envs)

    def close(self) -> None:
        for env in self.envs:
            env.close()


def _loop_process(
    connection, loop_name: str, workload_name: str, num_envs: int, first_column: int, horizon: int, seed: int
) -> None:
    from .workloads import get_workload

    workload = get_workload(workload_name)
    if loop_name == "hand-loop":
        loop = HandLoop(workload, num_envs, horizon, seed, reseed=False, first_column=first_column)
    else:
        loop = BareLoop(workload, num_envs, horizon, seed, first_column=first_column)
    try:
        while connection.recv_bytes() == b"collect":
            useful = loop.collect()
            if loop_name == "hand-loop":
                # The one exchange per collect: this half's rollout goes to the learner's process.
                connection.send((useful, loop.observations, loop.actions, loop.rewards, loop.dones))
            else:
                connection.send_bytes(str(useful).encode())
    finally:
        loop.close()


class TwoProcesses:
    """Two loops, each on half the envs, in processes of their own: what a competent user
    writes to use two cores without a framework.

    ``hand-loop/2proc``: each process runs the hand loop and, once per collect, sends its
    half of the rollout (observations, actions, rewards, dones) back, where it is copied
    into this process's ``[T, N, ...]`` arrays; no other exchange.
    ``bare-loop/2proc``: each runs the bare loop and sends back nothing but a count: the
    stricter reference, the ceiling of any runner that uses two worker processes on this
    machine (how much of a second core two busy processes get).

    ``collect()`` starts both and waits for both.
    """

    def __init__(self, loop_name: str, workload: Workload, num_envs: int, horizon: int, seed: int) -> None:
        self.name = f"{loop_name}/2proc"
        self.processes = 3
        self._loop_name = loop_name
        self._halves = (num_envs // 2, num_envs - num_envs // 2)
        if loop_name == "hand-loop":
            env = workload.env_factory()
            try:
                self.observations = allocate_like(env.observation_space, (horizon, num_envs))
                self.actions = allocate_like(env.action_space, (horizon, num_envs))
            finally:
                env.close()
            self.rewards = np.zeros((horizon, num_envs), dtype=np.float32)
            self.dones = np.zeros((horizon, num_envs), dtype=np.float32)
        self._connections, self._workers = [], []
        try:
            _start_loops(self._connections, self._workers, _loop_process, [
                (loop_name, workload.name, half, index * self._halves[0], horizon, seed + index)
                for index, half in enumerate(self._halves)
            ])
        except BaseException:
            self.close()
            raise

    def collect(self) -> int:
        for connection in self._connections:
            connection.send_bytes(b"collect")
        if self._loop_name != "hand-loop":
            return sum(int(connection.recv_bytes()) for connection in self._connections)
        useful, first = 0, 0
        for connection, half in zip(self._connections, self._halves):
            count, observations, actions, rewards, dones = connection.recv()
            columns = (slice(None), slice(first, first + half))
            store(self.observations, columns, observations)
            self.actions[columns] = actions
            self.rewards[columns] = rewards
            self.dones[columns] = dones
            useful, first = useful + count, first + half
        return useful

    def close(self) -> None:
        _stop_processes(self._connections, self._workers)
        self._connections, self._workers = [], []


def _start_loops(connections: list, workers: list, target, arguments: list[tuple]) -> None:
    """Start one spawned process per ``arguments`` entry running ``target(pipe end, *entry)``;
    each is appended to ``workers`` and its other pipe end to ``connections`` as soon as it runs,
    so that the caller's close stops whatever started before a failure."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    for entry in arguments:
        parent, child = context.Pipe()
        worker = context.Process(target=target, args=(child, *entry), daemon=True)
        worker.start()
        child.close()
        connections.append(parent)
        workers.append(worker)


def _stop_processes(connections: list, workers: list) -> None:
    for connection in connections:
        try:
            connection.send_bytes(b"stop")
        except OSError:
            pass
        connection.close()
    for worker in workers:
        worker.join(10)
        if worker.is_alive():
            worker.kill()
            worker.join()


def _shared_fields(env: gym.Env, horizon: int, num_envs: int) -> dict[str, tuple[tuple, np.dtype]]:
    """The rollout fields the shared-memory loops write, as ``{name: (shape, dtype)}``."""
    return {
        "observations": ((horizon, num_envs) + env.observation_space.shape, env.observation_space.dtype),
        "actions": ((horizon, num_envs) + env.action_space.shape, env.action_space.dtype),
        "rewards": ((horizon, num_envs), np.dtype(np.float32)),
        "dones": ((horizon, num_envs), np.dtype(np.float32)),
    }


def _shared_loop_process(
    connection, workload_name: str, names: dict, num_envs: int, share: tuple[int, int], horizon: int, seed: int
) -> None:
    from multiprocessing import shared_memory

    from .workloads import get_workload

    start, stop = share
    workload = get_workload(workload_name)
    loop = HandLoop(workload, stop - start, horizon, seed, reseed=False, first_column=start)
    fields = _shared_fields(loop.envs[0], horizon, num_envs)
    segments = []
    try:
        for field, (shape, dtype) in fields.items():
            # The parent owns the segment and unlinks it; this process only maps it.
            segment = shared_memory.SharedMemory(name=names[field])
            segments.append(segment)
            # The loop writes its columns of the shared arrays in place: no copy per collect.
            setattr(loop, field, np.ndarray(shape, dtype, segment.buf)[:, start:stop])
        while connection.recv_bytes() == b"collect":
            connection.send_bytes(str(loop.collect()).encode())
    finally:
        loop.close()
        for field in fields:
            setattr(loop, field, None)  # no view may outlive the mapping
        for segment in segments:
            segment.close()


class SharedMemoryLoops:
    """``hand-loop/shm/K``: K hand loops in K processes, their columns written into shared memory."""

    def __init__(self, workload: Workload, num_envs: int, horizon: int, seed: int, k: int) -> None:
        from multiprocessing import shared_memory

        self.name = f"hand-loop/shm/{k}"
        self.processes = k + 1
        self._connections, self._workers, self._segments = [], [], []
        env = workload.env_factory()
        try:
            fields = _shared_fields(env, horizon, num_envs)
        finally:
            env.close()
        try:
            self.arrays = {}
            for field, (shape, dtype) in fields.items():
                segment = shared_memory.SharedMemory(create=True, size=max(1, int(np.prod(shape)) * dtype.itemsize))
                self._segments.append(segment)
                self.arrays[field] = np.ndarray(shape, dtype, segment.buf)
            names = {field: segment.name for field, segment in zip(fields, self._segments)}
            bounds = np.linspace(0, num_envs, k + 1).astype(int)
            _start_loops(self._connections, self._workers, _shared_loop_process, [
                (workload.name, names, num_envs, (int(bounds[index]), int(bounds[index + 1])), horizon, seed + index)
                for index in range(k)
            ])
        except BaseException:
            self.close()
            raise

    def collect(self) -> int:
        for connection in self._connections:
            connection.send_bytes(b"collect")
        return sum(int(connection.recv_bytes()) for connection in self._connections)

    def close(self) -> None:
        _stop_processes(self._connections, self._workers)
        self._connections, self._workers = [], []
        self.arrays = {}
        for segment in self._segments:
            try:
                segment.close()  # refused while a view of it lives: unlinked all the same
            except BufferError:
                pass
            finally:
                segment.unlink()
        self._segments = []


def make_contender(
    name: str, workload: Workload, num_envs: int, horizon: int, seed: int, num_workers: int | None = None
) -> Contender:
    """Build the contender called ``name`` (see the module docstring for the names)."""
    if name in COLLECTOR_CONTENDERS:
        return CollectorContender(name, workload, num_envs, horizon, seed, num_workers)
    reason = unavailable_reason(name, workload, num_envs)
    if reason is not None:
        raise ValueError(f"contender {name!r} cannot run here: {reason}.")
    sweep = SWEEP_CONTENDER.match(name)
    if sweep and sweep.group(1) == "hand-loop/shm":
        return SharedMemoryLoops(workload, num_envs, horizon, seed, int(sweep.group(2)))
    if sweep:
        options = {"backend": "async", "num_workers": int(sweep.group(2))}
        if sweep.group(1) == "async/workers":
            options["policy_placement"] = "workers"
        return CollectorContender(name, workload, num_envs, horizon, seed, None, options)
    if name in ("hand-loop", "hand-loop-reseeding"):
        return HandLoop(workload, num_envs, horizon, seed, reseed=name == "hand-loop-reseeding")
    if name == "bare-loop":
        return BareLoop(workload, num_envs, horizon, seed)
    if name in ("hand-loop/2proc", "bare-loop/2proc"):
        return TwoProcesses(name.split("/")[0], workload, num_envs, horizon, seed)
    if name == "gym-sync":
        envs = gym.vector.SyncVectorEnv(workload.env_fns(num_envs), copy=False)
        return _vector_loop(name, envs, 1, workload, horizon, seed)
    if name == "gym-async":
        envs = gym.vector.AsyncVectorEnv(workload.env_fns(num_envs), shared_memory=True, copy=False, context="spawn")
        return _vector_loop(name, envs, 1 + num_envs, workload, horizon, seed)
    if name == "envpool":
        import envpool

        threads = min(os.cpu_count() or 1, num_envs)
        envs = envpool.make(
            workload.envpool_task, env_type="gymnasium", num_envs=num_envs, batch_size=num_envs,
            num_threads=threads, seed=seed,
        )
        try:
            return VectorLoop(name, envs, envs.observation_space, envs.action_space, num_envs, 1, workload.policy, horizon, None)
        except BaseException:
            envs.close()
            raise
    if name in ("sb3-subproc", "sb3-dummy"):
        return StableBaselinesLoop(workload, num_envs, horizon, seed, dummy=name == "sb3-dummy")
    known = tuple(COLLECTOR_CONTENDERS) + PEER_CONTENDERS
    raise ValueError(f"unknown contender {name!r}; choose from {known!r}.")


def _vector_loop(name: str, envs, processes: int, workload: Workload, horizon: int, seed: int) -> VectorLoop:
    try:
        return VectorLoop(
            name, envs, envs.single_observation_space, envs.single_action_space, envs.num_envs, processes,
            workload.policy, horizon, seed,
        )
    except BaseException:
        envs.close()  # worker processes must not outlive a failed start
        raise
