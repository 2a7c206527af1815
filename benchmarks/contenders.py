"""The contenders of a throughput comparison: the collector and the loops users write by hand.

Every contender runs one workload with ``num_envs`` envs and ``horizon`` steps per
``collect()``, so every collect is ``horizon * num_envs`` transitions. ``collect()``
returns how many of those were *useful*: Gymnasium's vector envs (in their
default ``NEXT_STEP`` autoreset mode) spend the step after an episode ends on a
reset row whose action is ignored; every other contender has none.

Contenders, by name:

``<backend>/<core>``
    ``ParallelRolloutCollector`` with that backend and per-step core.
``gym-sync-loop``, ``gym-async-loop``
    A CleanRL-style storage loop: preallocated ``[T, N, ...]`` NumPy arrays filled
    step by step from ``SyncVectorEnv`` / ``AsyncVectorEnv(shared_memory=True)``.
``raw-loop``
    No framework: a Python loop over a list of envs writing into preallocated
    arrays, keeping final observations and resetting each finished env at once
    with a seed from a precomputed list (the per-episode reseeding the collector
    does too). The floor a collector's overhead is measured against.
"""

from __future__ import annotations

from typing import Any, Protocol

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from parallel_rollouts import ParallelRolloutCollector

from .workloads import Workload

__all__ = [
    "BACKENDS",
    "COLLECTOR_CONTENDERS",
    "CORES",
    "Contender",
    "PEER_CONTENDERS",
    "REFERENCE_CONTENDER",
    "make_contender",
]

BACKENDS = ("serial", "sync", "async")
CORES = ("compiled", "python")
COLLECTOR_CONTENDERS = tuple(f"{backend}/{core}" for backend in BACKENDS for core in CORES)
PEER_CONTENDERS = ("gym-sync-loop", "gym-async-loop", "raw-loop")
#: Every ratio in a comparison is taken against this contender.
REFERENCE_CONTENDER = "gym-sync-loop"

# Episode seeds the raw loop draws up front per env; it cycles through them if a run
# outlasts them (only the cost of a seeded reset matters here, not the seed's value).
RAW_LOOP_SEEDS_PER_ENV = 1024


class Contender(Protocol):
    name: str

    def collect(self) -> int:
        """Collect ``horizon * num_envs`` transitions; return how many were useful."""

    def close(self) -> None: ...


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
    """``ParallelRolloutCollector`` with one backend and core."""

    def __init__(
        self,
        workload: Workload,
        num_envs: int,
        horizon: int,
        seed: int,
        backend: str,
        core: str,
        num_workers: int | None,
        reuse_buffers: bool,
    ) -> None:
        self.name = f"{backend}/{core}"
        async_options = {"num_workers": num_workers} if backend == "async" else {}
        self.collector = ParallelRolloutCollector(
            workload.env_fns(num_envs),
            workload.policy,
            backend=backend,
            horizon=horizon,
            seed=seed,
            core=core,
            reuse_buffers=reuse_buffers,
            **async_options,
        )

    def collect(self) -> int:
        return self.collector.collect().num_transitions

    def close(self) -> None:
        self.collector.close()


# -- the peers ---------------------------------------------------------------------------------


class GymnasiumVectorLoop:
    """CleanRL's rollout loop over a Gymnasium vector env, storage preallocated ``[T, N, ...]``."""

    def __init__(self, name: str, envs: gym.vector.VectorEnv, policy: Any, horizon: int, seed: int) -> None:
        self.name = name
        self.envs = envs
        self.policy = policy
        self.horizon = horizon
        num_envs = envs.num_envs
        self.observations = allocate_like(envs.single_observation_space, (horizon, num_envs))
        self.actions = allocate_like(envs.single_action_space, (horizon, num_envs))
        self.rewards = np.zeros((horizon, num_envs), dtype=np.float64)
        self.terminations = np.zeros((horizon, num_envs), dtype=bool)
        self.truncations = np.zeros((horizon, num_envs), dtype=bool)
        self._next_observation, _ = envs.reset(seed=seed)
        # Envs whose previous step ended an episode: their next step is an autoreset row.
        self._autoreset = np.zeros(num_envs, dtype=bool)

    def collect(self) -> int:
        envs, policy = self.envs, self.policy
        num_envs = envs.num_envs
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


class RawLoop:
    """No framework: step a list of envs in Python, write into preallocated arrays."""

    def __init__(self, workload: Workload, num_envs: int, horizon: int, seed: int) -> None:
        self.name = "raw-loop"
        self.policy = workload.policy
        self.horizon = horizon
        self.envs = [env_fn() for env_fn in workload.env_fns(num_envs)]
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


def make_contender(
    name: str,
    workload: Workload,
    num_envs: int,
    horizon: int,
    seed: int,
    num_workers: int | None = None,
    reuse_buffers: bool = True,
) -> Contender:
    """Build the contender called ``name`` (see the module docstring for the names)."""
    if name in COLLECTOR_CONTENDERS:
        backend, core = name.split("/")
        return CollectorContender(workload, num_envs, horizon, seed, backend, core, num_workers, reuse_buffers)
    env_fns = workload.env_fns(num_envs)
    if name == "gym-sync-loop":
        return GymnasiumVectorLoop(name, gym.vector.SyncVectorEnv(env_fns), workload.policy, horizon, seed)
    if name == "gym-async-loop":
        envs = gym.vector.AsyncVectorEnv(env_fns, shared_memory=True, context="spawn")
        try:
            return GymnasiumVectorLoop(name, envs, workload.policy, horizon, seed)
        except BaseException:
            envs.close()  # its worker processes must not outlive a failed start
            raise
    if name == "raw-loop":
        return RawLoop(workload, num_envs, horizon, seed)
    known = COLLECTOR_CONTENDERS + PEER_CONTENDERS
    raise ValueError(f"unknown contender {name!r}; choose from {known!r}.")
