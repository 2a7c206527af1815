"""Observations of edge shapes (0-d, ``(0,)``, ``(1,)``, nested Dict/Tuple leaves) come out of
``ParallelVectorEnv`` as ``SyncVectorEnv`` gives them, and out of the SB3 adapter as
``DummyVecEnv`` gives them: element by element, Python and NumPy type included, terminal
observations among them."""

from __future__ import annotations

from contextlib import closing

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from parallel_rollouts import ConfigurationError, ParallelVectorEnv
from tests.sb3_envs import replaying

pytestmark = pytest.mark.timeout(120)

SPACES = {
    "0-d Box": lambda: spaces.Box(-1.0, 1.0, shape=(), dtype=np.float64),
    "(1,) Box": lambda: spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32),
    "nested Dict/Tuple": lambda: spaces.Dict({
        "scalar": spaces.Box(-1.0, 1.0, shape=(), dtype=np.float32),
        "pair": spaces.Tuple((spaces.Discrete(5), spaces.Box(0, 9, shape=(1,), dtype=np.int64))),
    }),
    # SB3 takes no nested spaces: its edge case is a flat Dict of the same leaves.
    "flat Dict": lambda: spaces.Dict({
        "scalar": spaces.Box(-1.0, 1.0, shape=(), dtype=np.float32),
        "count": spaces.Discrete(5),
        "one": spaces.Box(0, 9, shape=(1,), dtype=np.int64),
    }),
    "empty Box": lambda: spaces.Box(-1.0, 1.0, shape=(0,), dtype=np.float32),
}
STORABLE = [name for name in SPACES if name != "empty Box"]


class EdgeShapes(gym.Env):
    """Observations drawn from the space with the env's own generator; episodes of 2-4 steps."""

    def __init__(self, space_name: str) -> None:
        self.observation_space = SPACES[space_name]()
        self.action_space = spaces.Discrete(2)

    def _observation(self):
        self.observation_space.seed(int(self.np_random.integers(2**31)))
        return self.observation_space.sample()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps_left = int(self.np_random.integers(2, 5))
        return self._observation(), {}

    def step(self, action):
        self.steps_left -= 1
        return self._observation(), 1.0, self.steps_left == 0, False, {}


def assert_same_element_by_element(expected, got, where="") -> None:
    assert type(got) is type(expected), f"{where}: {type(got).__name__} where {type(expected).__name__} was expected"
    if isinstance(expected, dict):
        assert list(got) == list(expected), where
        for key in expected:
            assert_same_element_by_element(expected[key], got[key], f"{where}[{key!r}]")
    elif isinstance(expected, (tuple, list)):
        assert len(got) == len(expected), where
        for index, (first, second) in enumerate(zip(expected, got)):
            assert_same_element_by_element(first, second, f"{where}[{index}]")
    elif isinstance(expected, np.ndarray) and expected.dtype == object:  # infos["final_obs"]: each env's own
        assert got.dtype == object and got.shape == expected.shape, where
        for index, (first, second) in enumerate(zip(expected, got)):
            assert_same_element_by_element(first, second, f"{where}[{index}]")
    elif isinstance(expected, (np.ndarray, np.generic)):
        assert got.dtype == expected.dtype and np.shape(got) == np.shape(expected), where
        np.testing.assert_array_equal(got, expected, err_msg=where)
    else:
        assert got == expected, where


def _fns(space_name: str, num_envs: int):
    return [lambda: EdgeShapes(space_name)] * num_envs


@pytest.mark.parametrize("backend", ["sync", "async"])
@pytest.mark.parametrize("space_name", STORABLE)
def test_same_step_final_observations_have_sync_vector_env_s_types(space_name, backend):
    options = {"num_workers": 1} if backend == "async" else {}
    reference = SyncVectorEnv(_fns(space_name, 3), autoreset_mode=AutoresetMode.SAME_STEP)
    with closing(reference), closing(
        ParallelVectorEnv(_fns(space_name, 3), backend=backend, autoreset_mode=AutoresetMode.SAME_STEP, **options)
    ) as ours:
        assert_same_element_by_element(reference.reset(seed=3), ours.reset(seed=3), "reset")
        finals = 0
        for t in range(12):
            actions = np.zeros(3, dtype=np.int64)
            expected, got = reference.step(actions), ours.step(actions)
            assert_same_element_by_element(expected, got, f"step {t}")
            finals += int(expected[2].sum())
        assert finals >= 3


@pytest.mark.parametrize("backend", ["sync", "async"])
@pytest.mark.parametrize("space_name", [name for name in STORABLE if name != "nested Dict/Tuple"])
def test_sb3_terminal_observations_have_dummy_vec_env_s_types(space_name, backend):
    from stable_baselines3.common.vec_env import DummyVecEnv

    from parallel_rollouts.sb3 import ParallelVecEnv

    ours = ParallelVecEnv(_fns(space_name, 2), backend=backend)
    # The control replays the episode seeds the adapter gives each env.
    reference = DummyVecEnv([replaying(fn, index, ours) for index, fn in enumerate(_fns(space_name, 2))])
    try:
        ours.seed(5)
        got = ours.reset()  # first: the control replays the seeds the adapter recorded
        assert_same_element_by_element(reference.reset(), got, "reset")
        terminals = 0
        for t in range(10):
            actions = np.zeros(2, dtype=np.int64)
            got = ours.step(actions)
            expected = reference.step(actions)
            assert_same_element_by_element(expected[0], got[0], f"step {t} observations")
            for index, (first, second) in enumerate(zip(expected[3], got[3])):
                if "terminal_observation" in first:
                    terminals += 1
                    assert_same_element_by_element(
                        first["terminal_observation"], second["terminal_observation"], f"step {t} env {index}"
                    )
        assert terminals >= 2
    finally:
        reference.close()
        ours.close()


@pytest.mark.parametrize("backend", ["sync", "async"])
def test_an_observation_space_with_no_values_is_refused_naming_the_space(backend):
    """A ``(0,)`` Box holds nothing to store: refused at construction with what to do, not
    stepped into zero-size storage."""
    with pytest.raises(ConfigurationError, match=r"has shape \(0,\), which holds no values; give it at least one element"):
        ParallelVectorEnv(_fns("empty Box", 2), backend=backend)
