"""CartPole with its velocities hidden: a partially observed task that needs memory."""

from __future__ import annotations

import gymnasium
import numpy as np

__all__ = ["ENV_ID", "KEPT_INDICES", "MAX_EPISODE_STEPS", "NUM_ACTIONS", "OBSERVATION_SCALE", "HideVelocities", "make_env"]

ENV_ID = "CartPole-v1"
#: CartPole's observation is (cart position, cart velocity, pole angle, pole angular velocity);
#: the policy sees the two positions only and has to infer the velocities from how they change.
KEPT_INDICES = (0, 2)
#: The kept features' limits: the episode ends when the cart leaves [-2.4, 2.4] or the pole
#: tilts past 12 degrees (0.2095 rad). The agents divide by them before their first layer.
OBSERVATION_SCALE = (2.4, 0.2095)
#: CartPole-v1's time limit: an episode that balances this long is truncated, so 500 is the best return.
MAX_EPISODE_STEPS = 500
#: Push the cart left or right.
NUM_ACTIONS = 2


class HideVelocities(gymnasium.ObservationWrapper):
    """Keeps the cart position and the pole angle of CartPole's observation, drops both velocities."""

    def __init__(self, env: gymnasium.Env) -> None:
        super().__init__(env)
        low = env.observation_space.low[list(KEPT_INDICES)]
        high = env.observation_space.high[list(KEPT_INDICES)]
        self.observation_space = gymnasium.spaces.Box(low, high, dtype=np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[list(KEPT_INDICES)].astype(np.float32, copy=False)


def make_env() -> gymnasium.Env:
    """One CartPole-v1 (500-step time limit) seen through `HideVelocities`."""
    return HideVelocities(gymnasium.make(ENV_ID))
