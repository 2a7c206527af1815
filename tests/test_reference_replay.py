"""An oracle the backends do not share: replay every env column with plain Gymnasium.

Every backend steps its envs through the same ``EnvGroup``, so comparing backends
with each other checks the grouping, not the semantics. Here each column of each
batch is replayed on a fresh env from the same factory, driven only by what the
batch recorded: ``env.reset(seed=step_episode_seeds[t, i])`` where an episode
starts, then ``env.step(actions[t, i])``. Observations, rewards, terminations,
truncations, final observations and the bootstrap observation must all match
what the plain env returns, across consecutive collects.
"""

from __future__ import annotations

import warnings
from functools import partial

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import FrameStackObservation, NormalizeObservation, StickyAction

from parallel_rollouts import ParallelRolloutCollector, RolloutBatch

pytestmark = pytest.mark.timeout(300)

NUM_ENVS = 3
HORIZON = 20
COLLECTS = 3


def make_case(name: str) -> gym.Env:
    """The envs replayed: Gymnasium's own, its wrappers, and third-party simulators.

    Short time limits make episodes end (by truncation as well as termination)
    inside a few rollouts.
    """
    if name == "CartPole":
        return gym.make("CartPole-v1")
    if name == "CartPole-TimeLimit3":
        return gym.make("CartPole-v1", max_episode_steps=3)
    if name == "Pendulum-TimeLimit7":
        return gym.make("Pendulum-v1", max_episode_steps=7)
    if name == "FrozenLake-slippery":
        return gym.make("FrozenLake-v1", is_slippery=True)
    if name == "Taxi-TimeLimit12":
        return gym.make("Taxi-v4", max_episode_steps=12)
    if name == "MountainCar-TimeLimit10":
        return gym.make("MountainCar-v0", max_episode_steps=10)
    if name == "Acrobot-TimeLimit9":
        return gym.make("Acrobot-v1", max_episode_steps=9)
    if name == "StickyAction-CartPole":
        return StickyAction(gym.make("CartPole-v1"), repeat_action_probability=0.5)
    if name == "StickyAction-Pendulum":
        # Often repeats one action for longer than a rollout: an env that kept a view of
        # an action row would then see the row's next contents.
        return StickyAction(gym.make("Pendulum-v1", max_episode_steps=45), repeat_action_probability=0.95)
    if name == "FrameStack-CartPole":
        return FrameStackObservation(gym.make("CartPole-v1"), 3)
    if name == "NormalizeObservation-Pendulum":
        return NormalizeObservation(gym.make("Pendulum-v1", max_episode_steps=6))
    if name == "MuJoCo-InvertedPendulum":
        return gym.make("InvertedPendulum-v5", max_episode_steps=8)
    if name == "Box2D-LunarLander":
        return gym.make("LunarLander-v3", max_episode_steps=12)
    if name == "ALE-Pong-ram":
        import ale_py

        gym.register_envs(ale_py)
        return gym.make("ALE/Pong-v5", obs_type="ram", max_episode_steps=9)
    if name == "MiniGrid-Empty":
        from minigrid.wrappers import ImgObsWrapper

        return ImgObsWrapper(gym.make("MiniGrid-Empty-5x5-v0", max_steps=7))
    raise ValueError(name)


GYMNASIUM_CASES = [
    "CartPole",
    "CartPole-TimeLimit3",
    "Pendulum-TimeLimit7",
    "FrozenLake-slippery",
    "Taxi-TimeLimit12",
    "MountainCar-TimeLimit10",
    "Acrobot-TimeLimit9",
    "StickyAction-CartPole",
    "StickyAction-Pendulum",
    "FrameStack-CartPole",
    "NormalizeObservation-Pendulum",
]
THIRD_PARTY_CASES = ["MuJoCo-InvertedPendulum", "Box2D-LunarLander", "ALE-Pong-ram", "MiniGrid-Empty"]
# Wrappers that keep what they are given or keep state across steps: where reused
# buffers could leak one rollout into the next.
STATEFUL_CASES = ["StickyAction-Pendulum", "FrameStack-CartPole", "NormalizeObservation-Pendulum"]


def _column(value, t, env):
    """Row ``[t, env]`` (or ``[env]`` with ``t=None``) of a batch field, through dicts and tuples."""
    if isinstance(value, dict):
        return {key: _column(item, t, env) for key, item in value.items()}
    if isinstance(value, tuple):
        return tuple(_column(item, t, env) for item in value)
    return value[env] if t is None else value[t, env]


def _assert_same(recorded, returned, what: str) -> None:
    if isinstance(recorded, dict):
        for key in recorded:
            _assert_same(recorded[key], returned[key], f"{what}[{key!r}]")
        return
    if isinstance(recorded, tuple):
        for index, (a, b) in enumerate(zip(recorded, returned)):
            _assert_same(a, b, f"{what}[{index}]")
        return
    recorded = np.asarray(recorded)
    # The batch stores each leaf in its space's dtype, as a Gymnasium vector env does.
    expected = np.asarray(returned).astype(recorded.dtype)
    np.testing.assert_array_equal(recorded, expected, err_msg=what)


def _copy(value):
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return tuple(_copy(item) for item in value)
    array = np.array(value)
    # A scalar stays a (NumPy) scalar: envs such as FrozenLake index tables with it.
    return array[()] if array.ndim == 0 else array


def assert_replays(batches: list[RolloutBatch], factory) -> int:
    """Replay each column of consecutive ``batches`` on fresh envs; return the number of episodes that ended."""
    episodes_ended = 0
    for env_index in range(batches[0].num_envs):
        env = factory()
        next_observation = None  # None: the next row starts an episode
        try:
            for collect, batch in enumerate(batches):
                for t in range(batch.horizon):
                    where = f"collect {collect}, row {t}, env {env_index}"
                    if next_observation is None:
                        next_observation, _ = env.reset(seed=int(batch.step_episode_seeds[t, env_index]))
                    _assert_same(_column(batch.observations, t, env_index), next_observation, f"observations at {where}")
                    # A copy: the recorded action must not be what the env keeps.
                    action = _copy(_column(batch.actions, t, env_index))
                    observation, reward, terminated, truncated, _ = env.step(action)
                    assert batch.rewards[t, env_index] == np.float64(reward), f"reward at {where}"
                    assert batch.terminations[t, env_index] == terminated, f"termination at {where}"
                    assert batch.truncations[t, env_index] == truncated, f"truncation at {where}"
                    ended = terminated or truncated
                    assert batch.final_observation_mask[t, env_index] == ended, f"final_observation_mask at {where}"
                    if ended:
                        _assert_same(_column(batch.final_observations, t, env_index), observation, f"final_observations at {where}")
                        next_observation = None
                        episodes_ended += 1
                    else:
                        next_observation = observation
                if next_observation is not None:
                    _assert_same(
                        _column(batch.bootstrap_observations, None, env_index),
                        next_observation,
                        f"bootstrap_observations of collect {collect}, env {env_index}",
                    )
        finally:
            env.close()
    return episodes_ended


def collect(case: str, backend: str, reuse_buffers: bool = False) -> list[RolloutBatch]:
    factory = partial(make_case, case)
    extra = {"num_workers": 2} if backend in ("async", "ray") else {}
    with ParallelRolloutCollector(
        [factory] * NUM_ENVS, None, backend, horizon=HORIZON, seed=11, reuse_buffers=reuse_buffers, **extra
    ) as collector:
        batches = []
        for _ in range(COLLECTS):
            batch = collector.collect()
            # With reused buffers the next collect overwrites this batch: replay from a copy.
            batches.append(_copy_batch(batch) if reuse_buffers else batch)
    return batches


def _copy_batch(batch: RolloutBatch) -> RolloutBatch:
    import dataclasses

    return dataclasses.replace(
        batch,
        **{field.name: _copy(getattr(batch, field.name)) for field in dataclasses.fields(batch) if field.name not in ("seed", "infos", "values", "log_probs")},
    )


@pytest.fixture(autouse=True)
def _quiet_third_party_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


# The backends share their step code, so each needs the oracle on Gymnasium's envs;
# third-party simulators (slower to make) run where their processes differ, and
# Ray's part runs in tests/test_ray_backend.py, on that module's Ray instance.
PLAIN_CASES = [(case, backend) for case in GYMNASIUM_CASES for backend in ("serial", "sync", "async")] + [
    (case, backend) for case in THIRD_PARTY_CASES for backend in ("sync", "async") if (case, backend) != ("ALE-Pong-ram", "async")
]


@pytest.mark.parametrize("case, backend", PLAIN_CASES)
def test_every_column_replays_with_plain_gymnasium(case, backend):
    batches = collect(case, backend)
    episodes_ended = assert_replays(batches, partial(make_case, case))
    if case != "CartPole":
        # The case was chosen to end episodes inside the rollouts (autoreset is exercised).
        assert episodes_ended > 0


@pytest.mark.parametrize("backend", ["serial", "sync", "async"])
@pytest.mark.parametrize("case", STATEFUL_CASES)
def test_every_column_replays_with_reused_buffers(case, backend):
    assert_replays(collect(case, backend, reuse_buffers=True), partial(make_case, case))
