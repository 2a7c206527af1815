"""The compiled row of a vector-env source gives exactly the batch the general path gives.

Every row a vector env returns goes through ``VectorRowRecorder`` when its values can be stored as
they are, else through the general path (the conversion rule, warnings, errors). Here the same
collection runs twice, once with the compiled row turned off, on Gymnasium's and third-party
vector envs in each autoreset mode, including rows the compiled call declines (LunarLander's
observations overshoot their bounds: warned once, stored as returned).
"""

import warnings
from functools import partial

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from parallel_rollouts import ParallelRolloutCollector
from parallel_rollouts.groups import VectorEnvGroup
from tests.batch_compare import assert_batches_identical


def _sync_vector(env_id, num_envs, mode=AutoresetMode.NEXT_STEP, **kwargs):
    return gym.vector.SyncVectorEnv([partial(gym.make, env_id, **kwargs)] * num_envs, autoreset_mode=mode)


def _pong(num_envs):
    import ale_py

    gym.register_envs(ale_py)
    return gym.vector.SyncVectorEnv(
        [partial(gym.make, "ALE/Pong-v5", max_episode_steps=9, frameskip=1)] * num_envs,
        autoreset_mode=AutoresetMode.SAME_STEP,
    )


def _minigrid_dict(num_envs):
    import minigrid  # noqa: F401  (registers the envs)
    from gymnasium.wrappers import FilterObservation

    def make():
        return FilterObservation(gym.make("MiniGrid-Empty-5x5-v0", max_steps=7), ["image", "direction"])

    return gym.vector.SyncVectorEnv([make] * num_envs, autoreset_mode=AutoresetMode.DISABLED)


class _Overshooting(gym.Env):
    """Declares Box(-1, 1) and drifts past it now and then, as real envs overshoot declared bounds."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._observation(), {}

    def _observation(self):
        return np.array([1.3 * np.sin(self._t + self.np_random.random()), 0.5], np.float32)

    def step(self, action):
        self._t += 1
        return self._observation(), float(action), False, self._t >= 7, {}


CASES = {
    # Transposed state, one int seed only (every episode recorded -1).
    "CartPoleVectorEnv": lambda: gym.make_vec("CartPole-v1", num_envs=6, vectorization_mode="vector_entry_point"),
    "SyncVectorEnv-CartPole-next-step": lambda: _sync_vector("CartPole-v1", 3, max_episode_steps=5),
    "SyncVectorEnv-CartPole-same-step": lambda: _sync_vector("CartPole-v1", 3, AutoresetMode.SAME_STEP, max_episode_steps=5),
    "SyncVectorEnv-CartPole-disabled": lambda: _sync_vector("CartPole-v1", 3, AutoresetMode.DISABLED, max_episode_steps=5),
    # float64 observations and rewards.
    "MuJoCo-HalfCheetah-same-step": lambda: _sync_vector("HalfCheetah-v5", 2, AutoresetMode.SAME_STEP, max_episode_steps=6),
    "Box2D-LunarLander-next-step": lambda: _sync_vector("LunarLander-v3", 2, max_episode_steps=12),
    # Observations outside their declared bounds: declined rows, warned by the general path.
    "Overshooting-next-step": lambda: gym.vector.SyncVectorEnv([_Overshooting] * 3),
    # uint8 frames of 210x160x3.
    "ALE-Pong-same-step": lambda: _pong(2),
    # A Dict observation (an image and a Discrete leaf), reset by the collector.
    "MiniGrid-Dict-disabled": lambda: _minigrid_dict(3),
}


def _note_each_row(monkeypatch, outcomes: list, decline: bool = False) -> None:
    """Record, for every row, whether the compiled call took it (True) or declined it (False);
    with ``decline``, decline every row without calling it: the general path takes them all."""
    step = VectorEnvGroup.step

    def noting_step(self, t):
        rows = self._rows

        class Noting:
            def record(_, *arguments):
                n_done = -1 if decline else rows.record(*arguments)
                outcomes.append(n_done >= 0)
                return n_done

            def book(_, *arguments):  # the general path's books
                return rows.book(*arguments)

        self._rows = Noting()
        try:
            return step(self, t)
        finally:
            self._rows = rows

    monkeypatch.setattr(VectorEnvGroup, "step", noting_step)


def _collect(factory, episode_seeds="every"):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ParallelRolloutCollector(
            [factory], None, "sync", horizon=16, seed=5, episode_seeds=episode_seeds
        ) as collector:
            batches = [collector.collect() for _ in range(3)]
    messages = sorted({str(warning.message) for warning in caught if "observation space" in str(warning.message)})
    return batches, messages


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_compiled_row_gives_the_general_path_s_batch(case, monkeypatch):
    taken = []
    step = VectorEnvGroup.step
    _note_each_row(monkeypatch, taken)
    compiled, compiled_warnings = _collect(CASES[case])
    assert any(taken), f"{case}: the compiled row never took a row"
    monkeypatch.setattr(VectorEnvGroup, "step", step)
    declined = []
    _note_each_row(monkeypatch, declined, decline=True)
    general, general_warnings = _collect(CASES[case])
    assert declined and not any(declined), f"{case}: the general run reached the compiled row"
    for expected, got in zip(general, compiled):
        assert_batches_identical(expected, got)
    assert compiled_warnings == general_warnings
    assert sum(batch.final_observation_mask.sum() for batch in compiled) > 0, f"{case}: no episode ended"


def test_rows_outside_the_bounds_are_declined_and_warned_as_before(monkeypatch):
    outcomes = []
    _note_each_row(monkeypatch, outcomes)
    batches, messages = _collect(CASES["Overshooting-next-step"])
    assert True in outcomes and False in outcomes, "expected rows both taken and declined"
    assert messages and all("outside its observation space" in message for message in messages)
    assert max(float(np.abs(batch.observations).max()) for batch in batches) > 1.0  # stored as returned
