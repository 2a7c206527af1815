"""The core's GymnasiumRowStepper behind ParallelVectorEnv: the rewards and end flags it stores itself
(Python floats and bools) and those the group stores by NumPy's rules (NumPy scalars) give the rows
gymnasium's SyncVectorEnv gives, on both cores and in both autoreset modes."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from parallel_rollouts import ParallelVectorEnv


class Counter(gym.Env):
    """Ends every ``length`` steps; ``numpy_values`` returns a np.float32 reward and np.bool_ flags."""

    def __init__(self, length, numpy_values):
        self.observation_space = spaces.Box(-100, 100, (2,), np.float32)
        self.action_space = spaces.Discrete(3)
        self.length, self.numpy_values, self.t = length, numpy_values, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.t, -1], np.float32), {}

    def step(self, action):
        self.t += 1
        reward, terminated, truncated = 0.5 * action + self.t, self.t % self.length == 0, self.t == 2 * self.length - 1
        if self.numpy_values:
            reward, terminated, truncated = np.float32(reward), np.bool_(terminated), np.bool_(truncated)
        return np.array([self.t, action], np.float32), reward, terminated, truncated, {}


def _makers(numpy_envs):
    return [lambda i=i: Counter(3 + i % 3, i in numpy_envs) for i in range(5)]


@pytest.mark.parametrize("core", ["compiled", "python"])
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
@pytest.mark.parametrize("numpy_envs", [(), (1, 3), (0, 1, 2, 3, 4)])
def test_rows_match_sync_vector_env(core, mode, numpy_envs):
    if core == "compiled":
        from parallel_rollouts import active_core

        if active_core() != "compiled":
            pytest.skip("the compiled core is not built")
    ours = ParallelVectorEnv(_makers(numpy_envs), backend="sync", autoreset_mode=mode, core=core)
    theirs = SyncVectorEnv(_makers(numpy_envs), autoreset_mode=mode)
    try:
        ours.reset(seed=0)
        theirs.reset(seed=0)
        rng = np.random.default_rng(0)
        for _ in range(25):
            actions = rng.integers(0, 3, 5)
            got, expected = ours.step(actions), theirs.step(actions)
            for index in range(4):
                np.testing.assert_array_equal(got[index], expected[index])
                assert got[index].dtype == expected[index].dtype
    finally:
        ours.close()
        theirs.close()
