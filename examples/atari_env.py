"""An Atari env as agents are usually trained on it, for ``parallel-rollouts check``:

    parallel-rollouts check examples.atari_env:make_pong

Needs ``ale-py`` and OpenCV (``pip install "gymnasium[atari]" opencv-python-headless``).
The factory imports ``ale_py`` itself, so that a freshly spawned worker, which has
imported nothing of this process, can build the env too.
"""

from __future__ import annotations

import gymnasium as gym


def make_pong() -> gym.Env:
    """Pong with Gymnasium's AtariPreprocessing (84x84 grey, frame skip 4) and a stack of 4 frames."""
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make("ALE/Pong-v5", frameskip=1)  # AtariPreprocessing does the frame skipping
    env = gym.wrappers.AtariPreprocessing(env, frame_skip=4, screen_size=84, grayscale_obs=True)
    return gym.wrappers.FrameStackObservation(env, 4)
