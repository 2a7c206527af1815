"""ParallelVecEnv: the library's workers as a Stable-Baselines3 ``VecEnv``.

Needs the ``[sb3]`` extra; ``import parallel_rollouts`` alone never imports
Stable-Baselines3. The envs are stepped by a
:class:`~parallel_rollouts.ParallelVectorEnv` in ``SAME_STEP`` autoreset mode
(``"sync"``: in this process; ``"async"``: in worker processes on shared
memory), so step semantics, action checks, the observation conversion rule
and failure handling are that class's. This module only translates its
results into SB3's conventions, which are ``DummyVecEnv``'s: ``reset()``
returns observations alone (infos in ``reset_infos``), ``step_wait()``
returns ``(observations, rewards as float32, dones, infos)`` with one dict per
env, holding ``"TimeLimit.truncated"`` and, where an episode ended,
``"terminal_observation"``; the observation returned for that env is already
the next episode's first.

Every episode is reset with a seed from the collector's scheme
(:mod:`~parallel_rollouts.config.seeding`), autoresets included, and the seeds are
recorded: :meth:`ParallelVecEnv.episode_seeds` lists them, and a run is
reproducible from :attr:`ParallelVecEnv.root_seed`.
"""

from __future__ import annotations

import copy
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

try:
    from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvObs, VecEnvStepReturn
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "parallel_rollouts.sb3 needs Stable-Baselines3: install PyTorch first (CPU build: "
        "`pip install torch --index-url https://download.pytorch.org/whl/cpu`), then "
        "`pip install \"parallel-rollouts[sb3]\"`."
    ) from error

from ..checks.conversion import convert_row, explain_rejected_row
from ..errors import ConfigurationError, ObservationError, SpaceError
from .actions import batch_per_env_actions, whole_float_actions
from .env_side import NOT_ASKED, RAISED, RESTART_STREAM, make_seeded_episode_env
from ..config.backends import backends_taking
from ..config.seeding import EpisodeSeeds, check_episode_seeds, draw_root_seed, episode_seed, validate_seed
from ..data.alike import group_alike
from ..data.spaces import SpaceLayout
from ..vector_env import ParallelVectorEnv, check_env_factories, default_backend

__all__ = ["ParallelVecEnv"]


class ParallelVecEnv(VecEnv):
    """A Stable-Baselines3 ``VecEnv`` over the library's sync or async workers.

    Parameters
    ----------
    env_fns:
        One zero-argument callable per env, each returning a ``gymnasium.Env``
        with the same spaces (picklable for ``"async"``), as for ``DummyVecEnv``.
    backend:
        ``"sync"`` (every env in this process) or ``"async"`` (worker processes on shared
        memory), by keyword or second by position, as for
        :class:`~parallel_rollouts.ParallelVectorEnv`. ``None`` (default): ``"async"`` if an option only it uses is given
        (``start_method``, ``num_workers``, ``context``, ``step_timeout``,
        ``main_process_envs``), else ``"sync"``, which measured as fast as ``DummyVecEnv``
        in SB3's PPO; ``"async"`` pays from about half a millisecond a step with a free
        core per worker (``docs/sb3.md``).
    seed:
        Root seed of the episode seeds; ``None`` draws one (see :attr:`root_seed`).
        ``seed(s)`` later starts a new stream at root ``s`` from the next ``reset()``.
    episode_seeds:
        ``"every"`` (default): every episode is reset with its own seed from ``seed``,
        autoresets included, so each is replayable alone (:meth:`episode_seeds` lists
        them). ``"first"``: only each env's first episode after ``seed`` (and after each
        ``seed()``) is seeded; later ones continue the env's generator, as ``DummyVecEnv``'s
        autoresets do, and are listed with seed -1. The run stays reproducible from
        ``seed``; it saves the generator Gymnasium builds per seeded reset (on CartPole,
        about 17 µs a reset, some 5% of a sync step of 16 envs).
    num_workers:
        As for :class:`~parallel_rollouts.ParallelVectorEnv`: ``"async"``'s worker
        processes.
    context:
        As for :class:`~parallel_rollouts.ParallelVectorEnv`: ``"async"``'s
        multiprocessing start method (default ``"spawn"``).
    step_timeout:
        As for :class:`~parallel_rollouts.ParallelVectorEnv`: ``"async"``'s seconds to
        wait for one step before raising :class:`~parallel_rollouts.StepTimeoutError`.
    core:
        ``"auto"``, ``"compiled"`` or ``"python"``, as for
        :class:`~parallel_rollouts.ParallelVectorEnv`.
    start_method:
        ``SubprocVecEnv``'s name for ``context`` (a multiprocessing start method:
        ``"spawn"``, ``"forkserver"``, ``"fork"``), so that
        ``make_vec_env(..., vec_env_cls=ParallelVecEnv, vec_env_kwargs=dict(start_method="spawn"))``
        works as it does for ``SubprocVecEnv``; given without ``backend``, it selects
        ``"async"``. ``None`` (the default) starts the workers with ``"spawn"``. Give
        ``start_method`` or ``context``, not both.
    main_process_envs:
        As for :class:`~parallel_rollouts.ParallelVectorEnv`: how many envs (the first
        ones) this process steps itself while ``"async"``'s workers step the rest.

    Notes
    -----
    Actions are those of SB3's vec envs: ``actions[i]`` is env ``i``'s action. For
    an integer space (``Discrete``, ``MultiDiscrete``, ``MultiBinary``), float
    actions that are whole numbers, such as the ``0.0``/``1.0`` SB3's policies give
    for ``MultiBinary``, are taken as those integers; any other float (``0.5``) is
    refused with an :class:`~parallel_rollouts.ActionError` naming the env.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        backend: str | None = None,
        *,
        seed: int | None = None,
        episode_seeds: str = "every",
        num_workers: int | None = None,
        context: str | None = None,
        step_timeout: float | None = None,
        core: str = "auto",
        start_method: str | None = None,
        main_process_envs: int | None = None,
    ) -> None:
        self._vector_env: ParallelVectorEnv | None = None
        if backend is None:
            # A start method asks for worker processes, as it does of SubprocVecEnv.
            backend = default_backend(
                start_method=start_method, num_workers=num_workers, context=context, step_timeout=step_timeout,
                main_process_envs=main_process_envs,
            )
        if start_method is not None:
            if context is not None:
                raise ConfigurationError(
                    f"`start_method`={start_method!r} and `context`={context!r} both choose how workers start; "
                    "give one (`start_method` is SubprocVecEnv's name for `context`)."
                )
            if backend not in backends_taking("context"):
                raise ConfigurationError(
                    f"`start_method`={start_method!r} applies to backend 'async' only, which starts worker "
                    f"processes; backend={backend!r} runs every env in this process. Drop it, or use 'async'."
                )
            context = start_method
        check_env_factories(env_fns)
        root_seed = draw_root_seed() if seed is None else validate_seed(seed)
        every_episode = check_episode_seeds(episode_seeds) == "every"
        factories = [
            partial(make_seeded_episode_env, env_fn, index, root_seed, every_episode) for index, env_fn in enumerate(env_fns)
        ]
        self._vector_env = ParallelVectorEnv(
            factories,
            backend=backend,
            autoreset_mode=AutoresetMode.SAME_STEP,
            num_workers=num_workers,
            context=context,
            step_timeout=step_timeout,
            core=core,
            main_process_envs=main_process_envs,
        )
        try:
            vector_env = self._vector_env
            self.backend = backend
            self._observation_layout = SpaceLayout(vector_env.single_observation_space, "observation")
            self._action_layout = SpaceLayout(vector_env.single_action_space, "action")
            self._dict_observations = isinstance(vector_env.single_observation_space, gym.spaces.Dict)
            # The env's own info dicts reach this process unpickled only on "sync": copy them there,
            # as DummyVecEnv hands out deep copies.
            self._copy_info = copy.deepcopy if backend == "sync" else dict
            # Episode seeds: streams left behind by seed() as (root, episodes per env), then the current one.
            self._past_streams: list[tuple[int, np.ndarray]] = []
            self._root_seed = root_seed
            self._every_episode = every_episode
            # Episodes begun per factory (a multi-agent env's agents share its episodes).
            self._episodes = np.zeros(len(env_fns), dtype=np.int64)
            # The factory each sub-env comes from: itself, or, with multi-agent envs, the env of
            # its agent (``column_agents`` names the agents).
            self.column_agents = vector_env.column_agents
            self._factory_of = (
                np.asarray(vector_env._column_envs, dtype=np.int64) if self.column_agents
                else np.arange(len(env_fns), dtype=np.int64)
            )
            self._next_root: int | None = None
            super().__init__(vector_env.num_envs, vector_env.single_observation_space, vector_env.single_action_space)
            # As DummyVecEnv: the envs' metadata (render_fps for VecVideoRecorder, among others).
            self.metadata = self.get_attr("metadata", 0)[0]
        except BaseException:
            self._vector_env.close()
            raise

    # -- seeds -------------------------------------------------------------------------------

    @property
    def root_seed(self) -> int:
        """The root seed of the episode seeds: the ``seed=`` given (or drawn), or the last ``seed()``'s."""
        return self._root_seed if self._next_root is None else self._next_root

    def seed(self, seed: int | None = None) -> list[int]:
        """Start a new seed stream at root ``seed`` from the next ``reset()``; return each env's first seed.

        Episode ``k`` of env ``i`` after that reset is reset with
        ``seeding.episode_seed(seed, i, k)``, the seed the collector with
        ``seed=seed`` gives it. ``None`` draws a root from NumPy's global
        generator, as SB3's vec envs do.
        """
        if seed is None:
            seed = int(np.random.randint(0, np.iinfo(np.uint32).max, dtype=np.uint32))
        self._next_root = validate_seed(seed)
        return [episode_seed(self._next_root, int(factory), 0) for factory in self._factory_of]

    def episode_seeds(self) -> list[list[int]]:
        """Per env, the reset seed of every episode it has begun, in order (the current one last).

        With multi-agent envs, every agent's sub-env lists the episodes of its env. With
        ``episode_seeds="first"``, an episode that continued its env's generator is listed as -1.
        """
        streams = self._past_streams + [(self._root_seed, self._episodes)]
        recorded: list[list[int]] = []
        for factory in self._factory_of.tolist():
            seeds: list[int] = []
            for root, counts in streams:
                stream = EpisodeSeeds(root, factory)
                seeds.extend(
                    stream.seed_of(k) if self._every_episode or k == 0 else -1 for k in range(int(counts[factory]))
                )
            recorded.append(seeds)
        return recorded

    # -- reset and step ----------------------------------------------------------------------

    def reset(self) -> VecEnvObs:
        """Reset every env with its next episode seed and the options of ``set_options``; return the observations."""
        vector_env = self._require_open()
        if vector_env._step_in_flight:
            # A step started by step_async and never waited for: it has run (on "async" it is
            # running), so it is taken, its episodes and seeds booked, and its result dropped.
            self.step_wait()
        restart = self._next_root
        parts: list = []
        observations = None
        groups = self._options_groups()
        if self.column_agents:
            # A multi-agent env resets all its agents at once: check every group first, so that a
            # refused one leaves every env as it was.
            for _, mask in groups:
                if mask is not None:
                    vector_env._check_whole_envs(mask)
        for options, mask in groups:
            options = dict(options) if options else {}
            if restart is not None:
                options[RESTART_STREAM] = restart
            if mask is not None:
                options["reset_mask"] = mask
            observations, group_parts = vector_env._reset_unmerged(None, options or None)
            parts.extend(group_parts)
        if restart is not None:
            self._past_streams.append((self._root_seed, self._episodes))
            self._root_seed, self._episodes = restart, np.zeros_like(self._episodes)
            self._next_root = None
        self._episodes += 1
        self.reset_infos = [{} for _ in range(self.num_envs)]
        for part in parts:
            for index, info in part or ():
                self.reset_infos[index] = self._copy_info(info)
        self._reset_seeds()
        self._reset_options()
        return self._as_sb3_observations(observations)

    def _options_groups(self) -> list[tuple[dict, np.ndarray | None]]:
        """The envs grouped by equal reset options: one reset per group (a mask unless it is every env)."""
        groups = group_alike(enumerate(self._options), _same_options)
        if len(groups) == 1:
            return [(groups[0][0], None)]
        masks = []
        for options, members in groups:
            mask = np.zeros(self.num_envs, dtype=bool)
            mask[members] = True
            masks.append((options, mask))
        return masks

    def step_async(self, actions: np.ndarray) -> None:
        """Check the actions and start every env's step: on ``"async"`` the workers step while the
        caller goes on, until :meth:`step_wait`. A refused action raises here, and nothing steps."""
        vector_env = self._require_open()
        actions = batch_per_env_actions(self._action_layout, actions, self.num_envs)
        actions = whole_float_actions(self._action_layout, actions)
        vector_env._send_step(actions)

    def step_wait(self) -> VecEnvStepReturn:
        """Wait for the step :meth:`step_async` started; return ``(observations, rewards, dones,
        infos)`` in SB3's conventions."""
        vector_env = self._require_open()
        vector_env.check_usable()
        if not vector_env._step_in_flight:
            raise RuntimeError("`step_wait()` needs actions: call `step_async(actions)` (or `step(actions)`) first.")
        observations, rewards, terminations, truncations, parts = vector_env._receive_step()
        if self.column_agents:
            dones, infos = self._agent_dones_and_infos(terminations, truncations, parts)
            return self._as_sb3_observations(observations), rewards.astype(np.float32), dones, infos
        dones = terminations | truncations
        time_limits = (truncations & ~terminations).tolist()
        if not any(parts):  # no env reported anything (nor ended): the common step
            infos = [{"TimeLimit.truncated": limit} for limit in time_limits]
            return self._as_sb3_observations(observations), rewards.astype(np.float32), dones, infos
        ended = dones.nonzero()[0].tolist()
        env_infos: dict[int, dict] = {}
        terminal_observations = {}
        for index in ended:
            self.reset_infos[index] = {}
        for part in parts:
            for index, info in part or ():
                if not dones[index]:
                    env_infos[index] = self._copy_info(info)
                elif index not in terminal_observations:  # an ended env reports the step's end first ...
                    env_infos[index] = self._copy_info(info["final_info"])
                    terminal_observations[index] = self._terminal_observation(index, info["final_obs"])
                else:  # ... then the next episode's reset info, if any
                    self.reset_infos[index] = self._copy_info(info)
        # DummyVecEnv's keys and their order: the env's own, then these two.
        infos = []
        for index, limit in enumerate(time_limits):
            info = env_infos.get(index)
            if info is None:
                info = {}
            info["TimeLimit.truncated"] = limit
            if index in terminal_observations:
                info["terminal_observation"] = terminal_observations[index]
            infos.append(info)
        self._episodes[ended] += 1
        return self._as_sb3_observations(observations), rewards.astype(np.float32), dones, infos

    def _agent_dones_and_infos(self, terminations: np.ndarray, truncations: np.ndarray, parts: list) -> tuple:
        """SB3's ``dones`` and ``infos`` for the agents of multi-agent envs (one sub-env each).

        An agent that ends reports ``terminal_observation`` at its step, as a done env does; while
        its env goes on its sub-env shows zeros (``agent_live`` false). When the env's episode
        ends (it resets within the step), every sub-env of it whose agent did not act (done
        earlier, or never arrived) is done too, with a zero terminal observation and no reward:
        SuperSuit's ``black_death`` rows, so no episode of SB3's runs across two of the env's.
        """
        finals: dict[int, dict] = {}
        step_infos: dict[int, dict] = {}
        for part in parts:
            for index, info in part or ():
                # An ended agent's first event is its end (``final_obs``, ``final_info``), then its step's.
                if index not in finals and index not in step_infos and set(info) == {"final_obs", "final_info"}:
                    finals[index] = info
                else:
                    step_infos[index] = info
        dones = terminations | truncations
        env_done = np.array([bool(step_infos.get(index, {}).get("env_done")) for index in range(self.num_envs)])
        acted = np.array([bool(step_infos.get(index, {}).get("agent_live")) for index in range(self.num_envs)])
        black_death = env_done & ~dones & ~acted
        infos = []
        for index in range(self.num_envs):
            info, terminal = self._copy_info(step_infos.get(index, {})), None
            if index in finals:
                terminal = self._terminal_observation(index, finals[index]["final_obs"])
                self.reset_infos[index] = info if env_done[index] else {}
                info = {**self._copy_info(finals[index]["final_info"]), "agent_live": True}
            elif black_death[index]:
                terminal = self._terminal_observation(index, self._zero_observation())
                self.reset_infos[index] = info
                info = {"agent_live": False, "env_done": True}
            info["TimeLimit.truncated"] = bool(truncations[index] and not terminations[index])
            if terminal is not None:
                info["terminal_observation"] = terminal
            infos.append(info)
        self._episodes[np.unique(self._factory_of[env_done])] += 1
        return dones | black_death, infos

    def _zero_observation(self) -> Any:
        layout = self._observation_layout
        return layout.unflatten([np.zeros(leaf.shape, leaf.dtype) for leaf in layout.leaves])

    def _terminal_observation(self, index: int, observation: Any) -> Any:
        """The ended episode's last observation, stored as the space's dtypes under the conversion rule."""
        layout = self._observation_layout
        try:
            values = layout.flatten(observation)
        except SpaceError as error:
            raise ObservationError(
                f"env {index} returned a final observation that does not match the observation space: {error}"
            ) from None
        leaves = []
        for leaf, value in zip(layout.leaves, values):
            # A 0-d leaf as the env gives it: a `Box` of shape () as a 0-d array, a `Discrete` as a NumPy scalar.
            box = isinstance(leaf.space, gym.spaces.Box)
            converted = convert_row(value, leaf.shape, leaf.dtype)
            if converted is None:
                where = f" at {leaf.name}" if layout.is_nested else ""
                raise ObservationError(
                    f"env {index} returned a final observation{where} that its space {leaf.space!r} cannot hold: "
                    f"{explain_rejected_row(value, leaf.shape, leaf.dtype)}."
                )
            value = np.array(converted, dtype=leaf.dtype)
            leaves.append(value[()] if value.ndim == 0 and not box else value)
        return _in_env_key_order(layout.unflatten(leaves), observation)

    def _as_sb3_observations(self, observations: Any) -> VecEnvObs:
        """Dict observations as the ``OrderedDict`` SB3's vec envs return; others unchanged."""
        return OrderedDict(observations) if self._dict_observations else observations

    # -- per-env access ----------------------------------------------------------------------

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """Attribute ``attr_name`` of each env asked (``env.get_wrapper_attr``, as ``DummyVecEnv``)."""
        return self._per_env("get_attr", attr_name, (), {}, indices)

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Set ``attr_name`` to ``value`` on each env asked (``setattr`` on the env, as ``DummyVecEnv``)."""
        self._per_env("set_attr", attr_name, (value,), {}, indices)

    def env_method(self, method_name: str, *method_args, indices: VecEnvIndices = None, **method_kwargs) -> list[Any]:
        """Call method ``method_name`` of each env asked; one result per env asked."""
        return self._per_env("env_method", method_name, method_args, method_kwargs, indices)

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        """Whether each env asked is wrapped (anywhere in its chain) with ``wrapper_class``."""
        return self._per_env("env_is_wrapped", wrapper_class, (), {}, indices)

    def _per_env(self, kind: str, name: Any, args: tuple, kwargs: dict, indices: VecEnvIndices) -> list[Any]:
        vector_env = self._require_open()
        asked = self._checked_indices(indices)
        # Each env answers for the factories asked (with multi-agent envs, each agent's sub-env
        # asks its env, whose answer every agent of it repeats).
        factories = sorted(set(self._factory_of[asked].tolist()))
        answers = vector_env.call("answer_sb3_request", kind, name, args, kwargs, factories)
        values = {}
        for env_index, (outcome, value) in enumerate(answers):
            if outcome == NOT_ASKED:
                continue
            if outcome == RAISED:
                if hasattr(value, "add_note"):
                    value.add_note(f"(raised by env {env_index} in {kind}({name!r}))")
                raise value
            values[env_index] = value
        return [values[index] for index in asked]

    def _checked_indices(self, indices: VecEnvIndices) -> list[int]:
        asked = []
        for index in self._get_indices(indices):
            if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
                raise ConfigurationError(f"`indices` must hold env indices (ints); got {index!r}.")
            if not -self.num_envs <= index < self.num_envs:
                raise IndexError(f"env index {index} is out of range for {self.num_envs} envs.")
            asked.append(int(index) % self.num_envs)
        return asked

    # -- rendering and closing ---------------------------------------------------------------

    def get_images(self) -> Sequence[np.ndarray | None]:
        """Every env's ``render()`` when the render mode is ``"rgb_array"`` (else ``None`` each, with a warning)."""
        if self.render_mode != "rgb_array":
            warnings.warn(
                f"The render mode is {self.render_mode}, but get_images() needs 'rgb_array' to return images.",
                stacklevel=2,
            )
            return [None] * self.num_envs
        return list(self._require_open().render())

    def close(self) -> None:
        """Close every env and release the workers and shared memory (again: nothing)."""
        if self._vector_env is not None:
            self._vector_env.close()

    def __enter__(self) -> ParallelVecEnv:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _require_open(self) -> ParallelVectorEnv:
        # ParallelVectorEnv itself refuses use after close or a failure (VectorEnvClosedError).
        return self._vector_env

    def __repr__(self) -> str:
        return f"ParallelVecEnv(backend={self.backend!r}, num_envs={self.num_envs})"


def _in_env_key_order(rebuilt: Any, original: Any) -> Any:
    """``rebuilt`` (nested in the space's key order) with every dict's keys in the order the env gave them.

    A ``Dict`` space sorts its keys, while an env (MiniGrid behind ``FilterObservation``, say) may
    return them in another order; ``DummyVecEnv`` hands out the env's own dict, so its order is kept.
    """
    if isinstance(rebuilt, dict) and isinstance(original, Mapping):
        keys = [key for key in original if key in rebuilt]
        mapping_type = OrderedDict if isinstance(original, OrderedDict) else dict
        return mapping_type((key, _in_env_key_order(rebuilt[key], original[key])) for key in keys)
    if isinstance(rebuilt, tuple) and isinstance(original, Sequence) and len(original) == len(rebuilt):
        return tuple(_in_env_key_order(part, given) for part, given in zip(rebuilt, original))
    return rebuilt


def _same_options(first: dict, second: dict) -> bool:
    """Equal reset options (options NumPy cannot compare as one bool count as different)."""
    try:
        return bool(first == second)
    except (ValueError, TypeError):
        return False
