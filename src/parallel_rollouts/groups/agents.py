"""A PettingZoo ``ParallelEnv`` as a source of rollouts: one column per agent.

An :class:`AgentEnvGroup` owns one multi-agent env whose ``possible_agents`` are
``A`` agents sharing one observation space and one action space. It covers ``A``
columns of the batch (global indices ``env_offset .. env_offset + A - 1``), agent
``k`` of ``possible_agents`` in column ``env_offset + k``, and implements the
groups' one interface (:class:`~parallel_rollouts.groups.base.RolloutGroup`), so
every backend that hosts groups runs it unchanged. This module is the one home of
the multi-agent step rule:

* An agent is *live* at row ``t`` when it is in ``env.agents`` before the step.
  Only live agents' actions are sent (``env.step({agent: action})``).
* A row whose agent is not live (it has not arrived yet, or it is done while
  others go on) is marked in ``reset_steps`` (the batch's ``valid`` is false
  there): its reward is zero, it ends nothing, it counts in no episode, and its
  observation repeats the agent's last one (zero before the agent's first).
* Each agent's episode ends at the step that reports it terminated or
  truncated: its terminal observation goes to ``final_observations[t]`` and the
  episode (return, length, seed) is booked for its column.
* The env's episode ends when no agent is live (PettingZoo's rule); the env is
  then reset at once with its next episode seed, and row ``t + 1`` holds the
  first observations of the agents the reset returned.

Every agent's rows of one env episode carry that episode's seed
(``step_episode_seeds``): ``env.reset(seed=...)`` and the live agents' recorded
actions replay it. The seed stream is the one of the env's first column.
"""

from __future__ import annotations

from time import perf_counter
from typing import Any

import numpy as np
from gymnasium import Env, Space

from ..checks.env_returns import info_number
from ..checks.observations import ObservationChecker
from ..checks.rounding import RoundingNotices
from ..config.layout import RolloutLayout
from ..config.seeding import EpisodeSeeds
from ..data.alike import group_alike
from ..data.spaces import check_env_spaces
from ..errors import ObservationError, SpaceError, WorkerError
from .single_envs import describe_failure
from .source_group import UNKNOWN_SEED, SourceGroup

__all__ = ["AgentEnvGroup", "agent_env_attribute", "agent_spaces", "check_parallel_env", "is_parallel_env"]

#: Attributes every Gymnasium env has and a PettingZoo env may lack, with Gymnasium's defaults.
GYMNASIUM_DEFAULTS = {"metadata": {}, "render_mode": None}


def agent_env_attribute(env: Any, name: str) -> Any:
    """Attribute ``name`` of a multi-agent env; for the two every Gymnasium env has (``metadata``,
    ``render_mode``), Gymnasium's default when the env lacks it."""
    if name in GYMNASIUM_DEFAULTS:
        return getattr(env, name, GYMNASIUM_DEFAULTS[name])
    return getattr(env, name)


def is_parallel_env(value: Any) -> bool:
    """True for a PettingZoo ``ParallelEnv`` (or an object with its interface and an agent list)."""
    if isinstance(value, Env) or hasattr(value, "single_observation_space"):
        return False
    return (
        hasattr(value, "possible_agents")
        and callable(getattr(value, "observation_space", None))
        and callable(getattr(value, "action_space", None))
        and callable(getattr(value, "step", None))
        and callable(getattr(value, "reset", None))
    )


def check_parallel_env(env: Any, where: str) -> int:
    """Check a multi-agent env before its first reset; return its number of agents (its columns).

    ``where`` names it in messages (e.g. ``"env_fns[1]"``). An AEC env (agents acting in turn)
    is refused with the conversion to use.
    """
    if callable(getattr(env, "agent_iter", None)) or callable(getattr(env, "last", None)):
        raise SpaceError(
            f"{where} returned the PettingZoo AEC env {type(env).__name__}, whose agents act one at a time; "
            "the collector steps every live agent at once through PettingZoo's parallel API. Pass the env's "
            "`parallel_env` constructor instead, or convert it with `pettingzoo.utils.aec_to_parallel(env)`."
        )
    return len(agent_spaces(env, where)[0])


def agent_spaces(env: Any, where: str) -> tuple[tuple[Any, ...], Space, Space]:
    """``(possible_agents, observation space, action space)``: the spaces every agent shares.

    Agents with different spaces are refused, naming which agents declare which
    space, with the padding wrapper that gives them one.
    """
    agents = getattr(env, "possible_agents", None)
    if agents is None or isinstance(agents, (str, bytes)) or len(agents) == 0:
        raise SpaceError(
            f"{where} ({type(env).__name__}) has possible_agents={agents!r}; a PettingZoo ParallelEnv must list "
            "every agent that can appear, at least one, before its first reset."
        )
    agents = tuple(agents)
    if len(set(agents)) != len(agents):
        raise SpaceError(f"{where} ({type(env).__name__}) lists an agent twice in possible_agents={list(agents)!r}.")
    spaces = {role: [] for role in ("observation", "action")}
    for agent in agents:
        for role in spaces:
            try:
                spaces[role].append(getattr(env, f"{role}_space")(agent))
            except Exception as error:
                raise SpaceError(
                    f"{where} ({type(env).__name__}) raised {type(error).__name__} from "
                    f"{role}_space({agent!r}): {error}"
                ) from error
    for role, declared in spaces.items():
        kinds = group_alike(zip(agents, declared), _same)
        if len(kinds) > 1:
            listed = "; ".join(f"{names!r} declare {space!r}" for space, names in kinds)
            raise SpaceError(
                f"{where} ({type(env).__name__}): its agents declare different {role} spaces ({listed}). Every "
                "agent is a column of one batch, so all must share one observation and one action space. Wrap "
                "the env in `parallel_rollouts.PadAgentSpaces(env)` to pad them to a common space (zeros after "
                "each observation, the largest Discrete action space; see docs/multi-agent.md), or give each "
                "kind of agent its own collector over an env that exposes only those agents."
            )
    return agents, spaces["observation"][0], spaces["action"][0]


def _same(first: Space, second: Space) -> bool:
    try:
        return first is second or bool(first == second)
    except ValueError:
        return False


class AgentEnvGroup(SourceGroup):
    """One multi-agent env, stepped into ``len(possible_agents)`` columns of rollout storage.

    Parameters are those of :class:`~parallel_rollouts.groups.single_envs.EnvGroup`,
    except that ``env`` (a PettingZoo ``ParallelEnv``) replaces the list of envs.
    """

    def __init__(self, env: Any, env_offset: int, layout: RolloutLayout, incarnation: int = 0) -> None:
        self.agents, observation_space, action_space = agent_spaces(env, f"the multi-agent env at env {env_offset}")
        check_env_spaces(env_offset, observation_space, action_space, layout.observation_space, layout.action_space)
        self.source = self.env = env
        self.env_offset = env_offset
        self.num_envs = n = len(self.agents)
        self._column_of = {agent: column for column, agent in enumerate(self.agents)}
        self._observation_layout = layout.observation_layout
        self._action_layout = layout.action_layout
        self._info_keys = layout.info_keys
        self._core = layout.core
        self._checker = ObservationChecker(layout.observation_layout, layout.core, layout.observation_check, env_offset)
        self._rounding = RoundingNotices(layout.observation_layout, env_offset)
        # The env's episode seeds: the stream of its first column, one seed per env episode.
        self._episode_seeds = EpisodeSeeds(layout.root_seed, env_offset, incarnation)
        self._reseed = layout.episode_seeds == "every"
        self._episodes_started = 0
        # The episode books every source keeps (the core's StepRecorder); every agent's running
        # seed is its env's episode seed.
        self._init_books()
        # The columns of the agents live at the row the env stands at, in env.agents' order
        # (outlives a rollout, like the observations).
        self._live_columns: list[int] = []
        # The live agents of the row being booked, as a mask (the negation of its reset_steps row).
        self._live_mask = np.zeros(n, dtype=bool)
        self._current_observations = layout.observation_layout.allocate((1, n), np.zeros)

    @property
    def episodes_started(self) -> int:
        """Env episodes started with a seed of ours (the next seeded reset uses this number)."""
        return self._episodes_started

    def describe_column(self, column: int) -> str:
        """``"agent 'name' of the multi-agent env at envs a..b"``: who a group column is, for messages."""
        last = self.env_offset + self.num_envs - 1
        return f"agent {self.agents[column]!r} of the multi-agent env at envs {self.env_offset}..{last}"

    # -- resets ----------------------------------------------------------------------------

    def _reset(self, phase: str) -> Any:
        """Reset the env with its next episode seed (none after the first under ``episode_seeds="first"``)."""
        seeded = phase == "reset" or self._reseed
        seed = self._episode_seeds.seed_of(self._episodes_started) if seeded else None
        started = perf_counter()
        try:
            result = self.env.reset(seed=seed)
        except Exception as error:
            raise self._failure(phase, error) from error
        finally:
            if self._storage is not None:  # within a rollout: its timing counts the reset
                self._storage.env_reset_seconds[0] += (perf_counter() - started) / self.num_envs
        if seeded:
            self._episodes_started += 1
        self._running_seeds[:] = UNKNOWN_SEED if seed is None else seed
        if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], dict)):
            raise self._failure(
                phase,
                TypeError(
                    f"`reset` returned {type(result).__name__}; a PettingZoo ParallelEnv returns "
                    "(observations, infos), two dicts keyed by agent."
                ),
            )
        return result[0]

    def _start_episode(self, row: list[np.ndarray], observations: dict, describe) -> None:
        """After a reset: the agents in ``env.agents`` are live, their observations in ``row`` (others zero)."""
        live = self._agents_now("reset")
        if not live:
            raise self._failure(
                "reset",
                ValueError(
                    "`reset` left env.agents empty; a PettingZoo env's reset makes at least one agent live (an episode "
                    "with none would end before its first step)."
                ),
            )
        for leaf in row:
            leaf[...] = 0
        for column in live:
            self._write_observation(row, column, observations, describe)
        self._live_columns = live
        self._running_returns[:] = 0.0
        self._running_lengths[:] = 0

    def reset_all(self) -> None:
        """First reset of the env."""
        observations = self._reset("reset")
        describe = lambda column: f"an observation from its first `reset` (observations row t=0; {self.describe_column(column)})"  # noqa: E731
        row = [leaf[0] for leaf in self._current_observations]
        self._start_episode(row, observations, describe)
        self._check_columns(row, self._live_columns, describe)
        self._rounding.say()

    # -- one rollout -----------------------------------------------------------------------

    def _step_row(self, t: int) -> None:
        storage, agents, n = self._storage, self.agents, self.num_envs
        # Python lists, not arrays: with a handful of agents per env, per-element NumPy work costs more.
        live = self._live_columns
        actions = {agents[column]: self._action(t, column) for column in live}
        started = perf_counter()
        try:
            result = self.env.step(actions)
        except Exception as error:
            raise self._failure("step", error) from error
        storage.env_step_seconds[0] += (perf_counter() - started) / n
        observations, rewards, terminations, truncations, infos = self._unpack(result, t)

        # Row t: what the step returned for the agents live at it; the others' rows are not valid.
        reward_row, terminated_row, truncated_row = [0.0] * n, [False] * n, [False] * n
        for column in live:
            agent = agents[column]
            reward_row[column] = self._number(rewards, "rewards", agent, t)
            terminated_row[column] = self._flag(terminations, "terminations", agent, t)
            truncated_row[column] = self._flag(truncations, "truncations", agent, t)
        # The source's mask: a row whose agent is not live belongs to no episode.
        not_live = [True] * n
        for column in live:
            not_live[column] = False
        storage.reset_steps[t] = not_live
        storage.rewards[t] = reward_row
        storage.terminations[t] = terminated_row
        storage.truncations[t] = truncated_row
        for key in self._info_keys:
            row = [np.nan] * n
            for column in live:
                row[column] = self._info(infos, key, agents[column])
            storage.infos[key][t] = row

        # Row t + 1: each agent still (or newly) live gets its observation; done agents keep their last.
        ended = [column for column in live if terminated_row[column] or truncated_row[column]]
        after = self._agents_now("step", t)
        next_row = [leaf[t + 1] for leaf in storage.observations]
        if len(after) < n:
            # Agents not live after the step keep the observation they had (zero before they arrived).
            for leaf_next, leaf in zip(next_row, storage.observations):
                leaf_next[...] = leaf[t]
        describe = lambda column: f"an observation at step t={t} (observations row t={t + 1}; {self.describe_column(column)})"  # noqa: E731
        ended_set = set(ended)
        for column in after:
            if column in ended_set:
                raise self._revived(t, column)
            self._write_observation(next_row, column, observations, describe)
        after_set = set(after)
        for column in live:
            if column not in after_set and column not in ended_set:
                raise self._left_without_end(t, column)
        # The books of every source: the live agents' rewards count, the ended agents' episodes are booked.
        # With every agent live the mask counts every column, which the books do without one.
        counted = None if len(live) == n else np.logical_not(storage.reset_steps[t], out=self._live_mask)
        self._recorder.record_rows(t, counted)
        if ended:
            finals = [leaf[t] for leaf in storage.final_observations]
            what = lambda column: f"a terminal observation at step t={t} (final_observations row t={t}; {self.describe_column(column)})"  # noqa: E731
            for column in ended:
                self._write_observation(finals, column, observations, what)
                self._write_observation(next_row, column, observations, what)
            self._check([leaf[ended] for leaf in finals], what, np.asarray(ended))
        self._live_columns = after

        if not after:
            # No agent is live: the env's episode is over; reset it with its next seed.
            reset_observations = self._reset("autoreset")
            describe = lambda column: (  # noqa: E731
                f"an observation from the reset after the env's episode ended at step t={t} "
                f"(observations row t={t + 1}; {self.describe_column(column)})"
            )
            self._start_episode(next_row, reset_observations, describe)
            after = self._live_columns
        self._check_columns(next_row, after, describe)

    # -- reading what the env returned -----------------------------------------------------

    def _action(self, t: int, column: int) -> Any:
        """Column ``column``'s action of row ``t``, as Gymnasium's vector envs hand one to an env (a copy)."""
        leaves = self._storage.actions
        values = [leaf[t, column].copy() if leaf.ndim > 2 else leaf[t, column] for leaf in leaves]
        return self._action_layout.unflatten(values)

    def _unpack(self, result: Any, t: int) -> tuple[dict, dict, dict, dict, dict]:
        if not (isinstance(result, tuple) and len(result) == 5 and all(isinstance(part, dict) for part in result)):
            got = f"{type(result).__name__} of {len(result)}" if isinstance(result, tuple) else type(result).__name__
            raise self._failure(
                "step",
                TypeError(
                    f"`step` at t={t} returned {got}; a PettingZoo ParallelEnv returns (observations, rewards, "
                    "terminations, truncations, infos), five dicts keyed by agent."
                ),
            )
        return result

    def _agents_now(self, phase: str, t: int | None = None) -> list[int]:
        """The columns of ``env.agents`` (the live agents), each checked to be a possible agent."""
        columns = []
        for agent in getattr(self.env, "agents", ()):
            column = self._column_of.get(agent)
            if column is None:
                raise self._failure(
                    phase,
                    ValueError(
                        f"env.agents holds {agent!r}{'' if t is None else f' after step t={t}'}, which is not in "
                        f"possible_agents {list(self.agents)!r}; every agent that can appear must be listed there."
                    ),
                )
            columns.append(column)
        return columns

    def _number(self, values: dict, name: str, agent: Any, t: int) -> float:
        value = self._entry(values, name, agent, t)
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            array = np.asarray(value) if isinstance(value, np.ndarray) else None
            if array is None or array.ndim != 0 or array.dtype.kind not in "iuf":
                raise self._column_failure(
                    self._column_of[agent], "step",
                    TypeError(f"{name}[{agent!r}] at step t={t} is {type(value).__name__} {value!r}; expected a real number."),
                )
        return float(value)

    def _flag(self, values: dict, name: str, agent: Any, t: int) -> bool:
        value = self._entry(values, name, agent, t)
        if isinstance(value, (bool, np.bool_)) or (isinstance(value, (int, np.integer)) and value in (0, 1)):
            return bool(value)
        raise self._column_failure(
            self._column_of[agent], "step",
            TypeError(f"{name}[{agent!r}] at step t={t} is {type(value).__name__} {value!r}; expected a bool."),
        )

    def _entry(self, values: dict, name: str, agent: Any, t: int) -> Any:
        try:
            return values[agent]
        except KeyError:
            raise self._column_failure(
                self._column_of[agent], "step",
                KeyError(
                    f"`step` at t={t} returned {name} without agent {agent!r}, which was live (in env.agents) "
                    f"before the step (keys: {list(values)!r}); every live agent needs an entry."
                ),
            ) from None

    def _info(self, infos: dict, key: str, agent: Any) -> float:
        info = infos.get(agent)
        try:
            if not isinstance(info, dict) or key not in info:
                keys = sorted(map(str, info)) if isinstance(info, dict) else info
                raise KeyError(
                    f"infos[{agent!r}] has no key {key!r} (keys: {keys!r}); info_keys must name scalar entries "
                    "present in every live agent's info on every step"
                )
            return info_number(info[key], key)
        except (KeyError, TypeError, ValueError) as error:
            raise self._column_failure(self._column_of[agent], "info", error) from None

    def _write_observation(self, row: list[np.ndarray], column: int, observations: dict, describe) -> None:
        """Store agent ``column``'s observation into ``row`` (one ``[A, *leaf]`` array per leaf)."""
        agent = self.agents[column]
        if agent not in observations:
            raise ObservationError(
                f"env {self.env_offset + column} did not return {describe(column)}: the env's observations have no "
                f"entry for that agent, which is live (keys: {list(observations)!r})."
            )
        layout = self._observation_layout
        value = observations[agent]
        if not layout.is_nested:
            # The common case: an array the storage takes as it is.
            leaf = layout.leaves[0]
            if type(value) is np.ndarray and value.shape == leaf.shape and value.dtype == leaf.dtype:
                row[0][column] = value
                return
        try:
            values = layout.flatten(value)
        except SpaceError as error:
            raise ObservationError(
                f"env {self.env_offset + column} returned {describe(column)} that does not match its observation "
                f"space: {error}"
            ) from None
        converted = self._converted_column(column, values, describe(column))
        for target, array in zip(row, converted):
            target[column] = array

    def _check(self, row: list[np.ndarray], describe, columns: np.ndarray | None = None) -> None:
        self._checker.check(row, columns, describe)

    def _check_columns(self, row: list[np.ndarray], columns: list[int], describe) -> None:
        """Check the observations the env returned in ``row``: those of ``columns`` (the live agents).

        The other columns hold a done agent's last observation (checked when it arrived) or the zero
        of an agent not arrived yet, which is no value of the env's and may lie outside its space.
        """
        if len(columns) == self.num_envs:
            self._checker.check(row, None, describe)
        elif columns:
            self._checker.check([leaf[columns] for leaf in row], np.asarray(columns), describe)

    # -- errors ----------------------------------------------------------------------------

    def _hosting(self) -> str:
        last = self.env_offset + self.num_envs - 1
        return (
            f"the multi-agent env {type(self.env).__name__} hosting envs {self.env_offset}..{last} (agents "
            f"{list(self.agents)!r})"
        )

    def _column_failure(self, column: int, phase: str, error: BaseException) -> WorkerError:
        """A value the env returned for one agent is refused: the error names the env column and the agent."""
        # A KeyError's message would be shown quoted: it travels as the LookupError it is.
        kind = LookupError if isinstance(error, KeyError) else type(error)
        reason = kind(f"{self.describe_column(column)}: {error.args[0] if error.args else error}")
        return WorkerError.from_failures([describe_failure(self.env_offset + column, phase, reason)])

    def _revived(self, t: int, column: int) -> WorkerError:
        return self._column_failure(
            column, "step",
            ValueError(
                f"the agent ended its episode at step t={t} (terminated or truncated) but is still in env.agents "
                "after it; PettingZoo envs remove an agent from env.agents at the step it is done."
            ),
        )

    def _left_without_end(self, t: int, column: int) -> WorkerError:
        return self._column_failure(
            column, "step",
            ValueError(
                f"the agent left env.agents at step t={t} without being terminated or truncated there; an agent's "
                "episode must end (terminations or truncations true) at the step it leaves."
            ),
        )
