"""What each env of a :class:`~parallel_rollouts.sb3.ParallelVecEnv` runs inside.

:class:`SeededEpisodeEnv` wraps one env, in whichever process hosts it. It
does two things that must happen next to the env, and imports nothing from
Stable-Baselines3, so that worker processes never load it (nor PyTorch):

- **Every reset is seeded** from the collector's scheme
  (:mod:`~parallel_rollouts.config.seeding`): episode ``k`` of env ``i`` under root
  seed ``r`` is reset with ``episode_seed(r, i, k)``, autoresets included (with
  ``episode_seeds="first"``, only episode 0 of each stream; the others continue the
  env's generator, as ``DummyVecEnv``'s do). The
  main process counts episodes the same way, so it knows every seed without
  being told. A reset whose options hold :data:`RESTART_STREAM` starts a new
  stream (root seed given, episode count back to 0); that is how ``seed()``
  takes effect at the next ``reset()``.
- **Per-env requests** (``env_method``, ``get_attr``, ``set_attr``,
  ``env_is_wrapped``) for a subset of envs arrive at every env in one
  exchange; each env answers only if it is one of those asked, and answers on
  the env it wraps, exactly as ``DummyVecEnv`` does on its envs. An exception
  is returned, not raised, so that a missing attribute is an ``AttributeError``
  in the caller and leaves the vector env usable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

from ..checks.factories import not_an_env
from ..groups.agents import agent_env_attribute, check_parallel_env
from ..config.seeding import EpisodeSeeds

__all__ = ["RESTART_STREAM", "SeededEpisodeAgents", "SeededEpisodeEnv", "make_seeded_episode_env"]

# The reset option that restarts an env's seed stream at a new root seed.
RESTART_STREAM = "parallel_rollouts.restart_seed_stream"

# Outcome tags of a per-env request.
NOT_ASKED, RETURNED, RAISED = 0, 1, 2


def make_seeded_episode_env(
    env_fn: Callable[[], gym.Env], env_index: int, root_seed: int, every_episode: bool = True
) -> Any:
    """Call the user's factory and wrap what it returns (the factory each process calls): a
    :class:`SeededEpisodeEnv` around a single env, a :class:`SeededEpisodeAgents` around a
    PettingZoo parallel env. ``every_episode=False``: only each stream's first reset is seeded."""
    env = env_fn()
    if hasattr(env, "possible_agents") and not isinstance(env, gym.Env):
        # An AEC env is refused here, before the wrapper hides what tells it apart.
        check_parallel_env(env, f"env_fns[{env_index}]")
        return SeededEpisodeAgents(env, env_index, root_seed, every_episode)
    if not isinstance(env, gym.Env):
        raise not_an_env(f"env_fns[{env_index}]", env, vector_envs=False)
    return SeededEpisodeEnv(env, env_index, root_seed, every_episode)


class _SeedStream:
    """The episode seeds of env ``env_index`` under a root seed, in order; restarted by an option.

    With ``every_episode=False`` only the stream's first episode gets its seed; the later ones
    get ``None`` (the env continues its own generator).
    """

    def __init__(self, env_index: int, root_seed: int, every_episode: bool = True) -> None:
        self.seeded_env_index = env_index
        self._seed_stream = EpisodeSeeds(root_seed, env_index)
        self._next_episode = 0
        self._every_episode = every_episode

    def next_seed(self, seed: int | None, options: dict | None) -> tuple[int | None, dict | None]:
        """The seed of the reset about to happen (``seed`` itself when given; ``None``: unseeded)
        and the options left."""
        if options and RESTART_STREAM in options:
            options = dict(options)
            self._seed_stream = EpisodeSeeds(int(options.pop(RESTART_STREAM)), self.seeded_env_index)
            self._next_episode = 0
        if seed is None:
            if self._every_episode or self._next_episode == 0:
                seed = self._seed_stream.seed_of(self._next_episode)
            self._next_episode += 1
        return seed, options


class SeededEpisodeAgents:
    """A PettingZoo parallel env whose every reset takes the next seed of its stream.

    Its agents are sub-envs of the :class:`~parallel_rollouts.sb3.ParallelVecEnv`; they share the
    env's stream (episode ``k`` of env ``i`` is reset with ``episode_seed(r, i, k)``, ``i`` the
    factory's index). Per-env requests name factories: each answers on the env it wraps.
    """

    def __init__(self, env: Any, env_index: int, root_seed: int, every_episode: bool = True) -> None:
        self.env = env
        self.possible_agents = list(env.possible_agents)
        self._stream = _SeedStream(env_index, root_seed, every_episode)

    @property
    def seeded_env_index(self) -> int:
        return self._stream.seeded_env_index

    @property
    def agents(self) -> list:
        return self.env.agents

    @property
    def unwrapped(self) -> Any:
        return getattr(self.env, "unwrapped", self.env)

    @property
    def metadata(self) -> dict:
        return agent_env_attribute(self.env, "metadata")

    @property
    def render_mode(self) -> Any:
        return agent_env_attribute(self.env, "render_mode")

    def observation_space(self, agent: Any) -> Any:
        return self.env.observation_space(agent)

    def action_space(self, agent: Any) -> Any:
        return self.env.action_space(agent)

    def reset(self, seed: int | None = None, options: dict | None = None):
        seed, options = self._stream.next_seed(seed, options)
        return self.env.reset(seed=seed, options=options or None)

    def step(self, actions: dict):
        return self.env.step(actions)

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()

    def answer_sb3_request(self, kind: str, name: Any, args: tuple, kwargs: dict, indices: Sequence[int]) -> tuple:
        """As :meth:`SeededEpisodeEnv.answer_sb3_request`, ``indices`` naming factories; on the env itself
        (a PettingZoo env is no Gymnasium wrapper: ``env_is_wrapped`` is false)."""
        env = self.env
        return _answer(
            self.seeded_env_index in indices, kind, name, args, kwargs,
            read=lambda name: agent_env_attribute(env, name), env=env, is_wrapped=lambda wrapper_class: False,
        )


class SeededEpisodeEnv(gym.Wrapper):
    """One env whose every reset takes the next seed of its stream."""

    def __init__(self, env: gym.Env, env_index: int, root_seed: int, every_episode: bool = True) -> None:
        super().__init__(env)
        self.seeded_env_index = env_index
        self._stream = _SeedStream(env_index, root_seed, every_episode)
        # Steps go straight to the env: this wrapper changes only resets, and a wrapper's
        # `step` frame on every env step costs more than the vector step's own bookkeeping.
        self.step = env.step

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        seed, options = self._stream.next_seed(seed, options)
        if not options:  # as DummyVecEnv: `options` only when there are some, for envs whose reset takes none
            return self.env.reset(seed=seed)
        return self.env.reset(seed=seed, options=options)

    def answer_sb3_request(self, kind: str, name: Any, args: tuple, kwargs: dict, indices: Sequence[int]) -> tuple:
        """``(NOT_ASKED, None)``, ``(RETURNED, value)`` or ``(RAISED, exception)`` for one per-env request."""
        env = self.env
        return _answer(
            self.seeded_env_index in indices, kind, name, args, kwargs,
            read=env.get_wrapper_attr, env=env, is_wrapped=lambda wrapper_class: _is_wrapped(env, wrapper_class),
        )


def _answer(asked: bool, kind: str, name: Any, args: tuple, kwargs: dict, *, read, env, is_wrapped) -> tuple:
    """One per-env request on ``env`` (``read(name)`` reads an attribute): the outcome tag and value.

    An exception is returned, not raised, so that the caller raises it as the env's own.
    """
    if not asked:
        return NOT_ASKED, None
    try:
        if kind == "env_method":
            value = read(name)(*args, **kwargs)
        elif kind == "get_attr":
            value = read(name)
        elif kind == "set_attr":
            value = setattr(env, name, args[0])
        elif kind == "env_is_wrapped":
            value = is_wrapped(name)
        else:
            raise ValueError(f"unknown request {kind!r}")
    except Exception as error:
        return RAISED, error
    return RETURNED, value


def _is_wrapped(env: gym.Env, wrapper_class: type) -> bool:
    """Whether ``wrapper_class`` is among the wrappers of ``env`` (``env`` itself included)."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, wrapper_class):
            return True
        env = env.env
    return False
