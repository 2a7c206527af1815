"""Envs for the conformance tests: each breaks exactly one thing that ``check_env`` checks.

Top-level classes and factories, so that the spawned process of the checks can
import them.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from functools import partial

import gymnasium as gym
import numpy as np
from gymnasium import spaces

BOX = spaces.Box(-10.0, 10.0, shape=(3,), dtype=np.float32)


class WalkEnv(gym.Env):
    """A correct env: a seeded random walk, 20-step episodes. Subclasses break one rule each."""

    observation_space = BOX
    action_space = spaces.Discrete(2)

    def __init__(self) -> None:
        self._state = np.zeros(3, dtype=np.float32)
        self._steps = 0

    def _draw(self) -> np.ndarray:
        return self.np_random.uniform(-1.0, 1.0, size=3).astype(np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._state = self._draw()
        self._steps = 0
        return self._state.copy(), {}

    def step(self, action):
        self._state = np.clip(self._state + 0.1 * self._draw() + (0.01 if action else -0.01), -5, 5).astype(np.float32)
        self._steps += 1
        return self._state.copy(), float(self._state[0]), False, self._steps >= 20, {}


class SeedIgnoringEnv(WalkEnv):
    """Draws from its own generator, created unseeded: every env instance runs its own trajectory."""

    def __init__(self) -> None:
        super().__init__()
        self._rng = np.random.default_rng()

    def _draw(self) -> np.ndarray:
        return self._rng.uniform(-1.0, 1.0, size=3).astype(np.float32)


class SeedOnceEnv(WalkEnv):
    """Seeds its generator at the first seeded reset only: a reused env does not restart its trajectory."""

    def __init__(self) -> None:
        super().__init__()
        self._rng = None

    def reset(self, *, seed=None, options=None):
        if self._rng is None:
            self._rng = np.random.default_rng(seed)
        self._state = self._draw()
        self._steps = 0
        return self._state.copy(), {}

    def _draw(self) -> np.ndarray:
        return self._rng.uniform(-1.0, 1.0, size=3).astype(np.float32)


class ProcessDependentEnv(WalkEnv):
    """Deterministic within a process, but its dynamics depend on the process id."""

    def step(self, action):
        observation, reward, terminated, truncated, info = super().step(action)
        # The whole pid (Linux's pid_max is at most 2**22), so two processes never agree: a pid
        # taken modulo a small number matched between this process and a spawned one about once
        # in that many runs.
        observation[1] = os.getpid() / 2.0**22
        return observation, reward, terminated, truncated, info


class AliasingEnv(WalkEnv):
    """Returns the same array from every call and writes the next state into it."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._state, {}

    def step(self, action):
        self._state += 0.1 * self._draw()
        self._steps += 1
        return self._state, float(self._state[0]), False, self._steps >= 20, {}


class GlobalNumpyRandomEnv(WalkEnv):
    """Draws from NumPy's legacy global generator."""

    def _draw(self) -> np.ndarray:
        return np.random.uniform(-1.0, 1.0, size=3).astype(np.float32)


class GlobalPythonRandomEnv(WalkEnv):
    """Draws from Python's global ``random``."""

    def _draw(self) -> np.ndarray:
        return np.array([random.uniform(-1.0, 1.0) for _ in range(3)], dtype=np.float32)


class OutOfSpaceEnv(WalkEnv):
    """Breaks its observation space at the 5th step, in the way ``kind`` says."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def step(self, action):
        observation, reward, terminated, truncated, info = super().step(action)
        if self._steps == 5:
            if self.kind == "shape":
                observation = np.zeros(4, dtype=np.float32)
            elif self.kind == "nan":
                observation[2] = np.nan
            elif self.kind == "float_bounds":
                observation[0] = 50.0
            elif self.kind == "dtype":
                observation = observation.astype(np.float64)
            elif self.kind == "reward":
                reward = "high"
        return observation, reward, terminated, truncated, info


class DiscreteOutOfRangeEnv(WalkEnv):
    """A Discrete(4) observation that returns 7 at the 3rd step."""

    observation_space = spaces.Discrete(4)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {}

    def step(self, action):
        _, reward, terminated, truncated, info = super().step(action)
        return (7 if self._steps == 3 else int(action)), reward, terminated, truncated, info


class UnseededDiscrete(spaces.Discrete):
    """An action space whose ``sample`` ignores its seed."""

    def sample(self, mask=None, probability=None):
        return int(np.random.default_rng().integers(self.n))


class UnseededActionsEnv(WalkEnv):
    action_space = UnseededDiscrete(2)


class MissionEnv(WalkEnv):
    """A Dict observation with a text entry, as MiniGrid's."""

    observation_space = spaces.Dict({"state": BOX, "mission": spaces.Text(20)})

    def reset(self, *, seed=None, options=None):
        observation, info = super().reset(seed=seed)
        return {"state": observation, "mission": "go"}, info

    def step(self, action):
        observation, *rest = super().step(action)
        return {"state": observation, "mission": "go"}, *rest


class ExitInStepEnv(WalkEnv):
    """Calls ``sys.exit(0)`` in ``step``, as a script-style env might on an error."""

    def step(self, action):
        raise SystemExit(0)


class InterruptInStepEnv(WalkEnv):
    """Raises ``KeyboardInterrupt`` itself in ``step`` (no Ctrl-C was pressed)."""

    def step(self, action):
        raise KeyboardInterrupt


class EnvBug(BaseException):
    """Neither an ``Exception`` nor one of the builtin ``BaseException`` subclasses."""


class BaseExceptionEnv(WalkEnv):
    def step(self, action):
        raise EnvBug("step broke")


class CtrlCInStepEnv(WalkEnv):
    """The user presses Ctrl-C while ``step`` runs; with ``swallow``, the env catches the interrupt and goes on."""

    swallow = False

    def step(self, action):
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            if not self.swallow:
                raise
        return super().step(action)


class SwallowingCtrlCEnv(CtrlCInStepEnv):
    swallow = True


class HangInResetEnv(WalkEnv):
    """``reset`` never returns (as an env waiting on a server that is down)."""

    def reset(self, *, seed=None, options=None):
        while True:
            time.sleep(3600)


class SwallowingHangEnv(WalkEnv):
    """Hangs in ``reset`` and catches everything raised there (a bare ``except:``), then carries on."""

    def reset(self, *, seed=None, options=None):
        try:
            while True:
                time.sleep(3600)
        except BaseException:
            pass
        return super().reset(seed=seed, options=options)


class ResetRaisingEnv(WalkEnv):
    """Builds, then raises in every ``reset`` (as an env whose server is down)."""

    def reset(self, *, seed=None, options=None):
        raise ValueError("no server at localhost:9000")


class SpawnedResetRaisingEnv(WalkEnv):
    """Resets in the process that was started, raises in ``reset`` in a process it starts."""

    def reset(self, *, seed=None, options=None):
        import multiprocessing

        if multiprocessing.parent_process() is not None:
            raise RuntimeError("the simulator licence is in the parent process only")
        return super().reset(seed=seed, options=options)


def reset_raising_vector() -> gym.vector.VectorEnv:
    """A vector env of two ``ResetRaisingEnv``: the autoreset check resets it first."""
    return gym.vector.SyncVectorEnv([ResetRaisingEnv, ResetRaisingEnv])


class RaisingCloseEnv(WalkEnv):
    def close(self):
        raise RuntimeError("the simulator is already gone")


# A child that runs until its parent has gone (it is reparented), so that none outlives the test run. The
# parent's pid comes in argv: read with os.getppid() at the child's start, it is already init's when the
# parent (a spawned check process) exited first, and the child would then wait for ever.
_CHILD = "import os, sys, time\nparent = int(sys.argv[1])\nwhile os.getppid() == parent:\n    time.sleep(0.2)"
#: The children every ProcessEnv started in this process, for the tests to stop.
STARTED: list[subprocess.Popen] = []


class ProcessEnv(WalkEnv):
    """Starts a child process (a simulator server); stops it in ``close()`` unless it is ``LeakyEnv``."""

    def __init__(self) -> None:
        super().__init__()
        self._server = subprocess.Popen([sys.executable, "-c", _CHILD, str(os.getpid())])
        STARTED.append(self._server)

    def close(self):
        self._server.terminate()
        self._server.wait(30)


class LeakyEnv(ProcessEnv):
    """Leaves its child running when closed."""

    def close(self):
        pass


def unregistered_namespace() -> gym.Env:
    """A factory that makes an id whose namespace no imported package registered (as 'ALE/...' without ale_py)."""
    return gym.make("NoSuchNamespace/Foo-v0")


def unpicklable_factory():
    """A factory capturing a lock: cloudpickle cannot send it to a worker."""
    lock = threading.Lock()

    def make() -> gym.Env:
        with lock:
            return WalkEnv()

    return make


LOCAL_ONLY_ID = "ConformanceLocalOnly-v0"


def register_local_only() -> partial:
    """Register an id in this process only; the factory of it cannot build the env in a spawned process."""
    if LOCAL_ONLY_ID not in gym.registry:
        gym.register(LOCAL_ONLY_ID, entry_point=WalkEnv)
    return partial(gym.make, LOCAL_ONLY_ID)


# Third-party envs, built the way their users build them.


def atari_pong() -> gym.Env:
    """Pong through Gymnasium's Atari wrappers; time-limited so that episodes end within a test."""
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make("ALE/Pong-v5", frameskip=1, max_episode_steps=240)
    env = gym.wrappers.AtariPreprocessing(env, frame_skip=4, screen_size=84, grayscale_obs=True)
    return gym.wrappers.FrameStackObservation(env, 4)


def minigrid_raw() -> gym.Env:
    import minigrid  # noqa: F401  (registers the MiniGrid ids)

    return gym.make("MiniGrid-Empty-5x5-v0", max_steps=30)


def minigrid_image() -> gym.Env:
    import minigrid.wrappers

    return minigrid.wrappers.ImgObsWrapper(minigrid_raw())


def minigrid_filtered() -> gym.Env:
    return gym.wrappers.FilterObservation(minigrid_raw(), filter_keys=["image", "direction"])


def slow_factory() -> gym.Env:
    """Builds a correct env here, and hangs in a spawned process (as an env waiting on a licence server)."""
    import multiprocessing
    import time

    if multiprocessing.parent_process() is not None:
        time.sleep(600)
    return WalkEnv()


def aliasing_vector() -> gym.vector.VectorEnv:
    """Gymnasium's SyncVectorEnv with copy=False returns its own buffer each step."""
    return gym.vector.SyncVectorEnv([WalkEnv] * 2, copy=False)
