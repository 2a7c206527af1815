"""Multi-agent envs stepped the way a Gymnasium vector env steps sub-envs, for :class:`~parallel_rollouts.ParallelVectorEnv`.

An :class:`AgentGymnasiumGroup` hosts PettingZoo ``ParallelEnv`` s, one column per agent of each
(agent ``k`` of ``possible_agents`` in the env's ``k``-th column), and writes one vector step into
row 0 of a one-step storage, as :class:`~parallel_rollouts.groups.gymnasium_envs.GymnasiumGroup`
does for single envs. Per env and step:

* the live agents (``env.agents`` before the step) act; the others' actions are not sent;
* a live agent's column gets what the step returned for it (its terminal observation at the
  step it is done); a column whose agent is not live gets a zero observation, reward 0 and no end;
* every column's info carries ``agent_live`` (its agent acted at this step: the row is a
  transition; false on every reset, a ``NEXT_STEP`` reset step included) and ``env_done`` (the
  env's episode ended at this step: no agent is live after it); after a reset ``agent_present``
  says which agents act next;
* the env's episode ends when no agent is live; the autoreset mode then applies to the whole env,
  as to one sub-env: ``NEXT_STEP`` resets it at its next step (actions ignored, the first
  observations returned), ``SAME_STEP`` resets it within the step, ``DISABLED`` waits for ``reset(options={"reset_mask": ...})`` covering all its
  columns. In ``SAME_STEP`` mode every agent that ends reports ``final_obs`` and ``final_info`` at
  that step, and its column shows what follows (the next episode's first observation, or zero while
  the env goes on without it), as a sub-env that resets within the step does.

A reset seeds each env with the seed of its first column (``reset(seed=s)`` gives column ``c`` the
seed ``s + c``, so env ``e`` the seed of its first column), and autoresets pass no seed, as
Gymnasium's vector envs do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from ..config.layout import RolloutLayout
from ..data.storage import RolloutStorage
from ..data.typed_actions import TypedActionReader
from ..errors import ObservationError, SpaceError, WorkerError
from .agents import agent_env_attribute, agent_spaces, check_parallel_env
from .gymnasium_base import GymnasiumGroupBase
from .requests import RaisedByEnv, answer_each
from .single_envs import describe_failure

__all__ = ["AgentGymnasiumGroup"]


class AgentGymnasiumGroup(GymnasiumGroupBase):
    """PettingZoo parallel envs behind the Gymnasium vector-env group's interface, one column per agent."""

    def __init__(self, envs: Sequence[Any], env_offset: int, layout: RolloutLayout, autoreset_mode: AutoresetMode) -> None:
        self.envs = list(envs)
        self.env_offset = env_offset
        self.autoreset_mode = autoreset_mode
        self._agents: list[tuple] = []
        self._starts: list[int] = []
        column = 0
        for index, env in enumerate(self.envs):
            check_parallel_env(env, f"env_fns[{index}]")
            agents, _, _ = agent_spaces(env, f"the multi-agent env at env {env_offset + column}")
            self._agents.append(agents)
            self._starts.append(column)
            column += len(agents)
        self.num_envs = column
        self._observation_layout = layout.observation_layout
        self._action_layout = layout.action_layout
        # Per env: the columns (relative to its first) of the agents live now, and whether its
        # episode ended at the previous step (it is then reset by the next, in NEXT_STEP mode).
        self._live: list[list[int]] = [[] for _ in self.envs]
        self._ended = [False] * len(self.envs)
        # Each env's last reset seed (-1: none given), for ``np_random_seed``.
        self._seeds = [-1] * len(self.envs)
        self._storage: RolloutStorage | None = None
        self._actions: TypedActionReader | None = None

    # -- the group interface an async worker serves ------------------------------------------

    def reset_all(self) -> None:
        """Nothing: the envs stay unreset until the user calls ``reset()``."""

    def begin(self, storage: RolloutStorage) -> None:
        self._storage = storage
        self._actions = TypedActionReader(self._action_layout, [leaf[0] for leaf in storage.actions])

    def step(self, t: int, columns: Sequence[int] | None = None) -> list | None:
        """Step every env with ``storage.actions[0]``; write row 0; return the info events (one per column)."""
        if columns is not None:
            raise SpaceError(
                "ready-first stepping (`send`/`recv` with env ids) steps single envs; a multi-agent env steps all "
                "its agents at once. Use `step`."
            )
        storage = self._storage
        actions = self._split_actions(self._actions.read())
        leaves = [np.zeros_like(leaf[0]) for leaf in storage.observations]
        rewards = np.zeros(self.num_envs)
        terminations = np.zeros(self.num_envs, dtype=bool)
        truncations = np.zeros(self.num_envs, dtype=bool)
        events: list = []
        failures = []
        for index, env in enumerate(self.envs):
            try:
                events.extend(self._step_env(index, env, actions, leaves, rewards, terminations, truncations))
            except (ObservationError, SpaceError):
                raise
            except Exception as error:
                failures.append((describe_failure(self.env_offset + self._starts[index], "step", error), error))
        if failures:
            raise WorkerError.from_failures([failure for failure, _ in failures]) from failures[0][1]
        for target, values in zip(storage.observations, leaves):
            target[0] = values
        storage.rewards[0] = rewards
        storage.terminations[0] = terminations
        storage.truncations[0] = truncations
        return events

    def _step_env(self, index, env, actions, leaves, rewards, terminations, truncations) -> list:
        agents, start, mode = self._agents[index], self._starts[index], self.autoreset_mode
        if self._ended[index]:
            if mode is AutoresetMode.DISABLED:
                first = self.env_offset + start
                raise RuntimeError(
                    f"the multi-agent env at envs {first}..{first + len(agents) - 1} ended its episode at the previous "
                    "step (infos['env_done']) and autoreset_mode is DISABLED; reset it "
                    "(`reset(options={'reset_mask': mask})` with all its envs in the mask) before `step`."
                )
            # NEXT_STEP: this step resets the env; no agent acted, so no row of it is a transition.
            observations, infos = self._reset_env(index, None, None)
            self._ended[index] = False
            return self._started(index, observations, infos, leaves, acted=())
        live = self._live[index]
        result = env.step({agents[k]: actions[start + k] for k in live})
        if not (isinstance(result, tuple) and len(result) == 5 and all(isinstance(part, dict) for part in result)):
            raise TypeError(
                f"`step` returned {type(result).__name__}; a PettingZoo ParallelEnv returns (observations, rewards, "
                "terminations, truncations, infos), five dicts keyed by agent."
            )
        observations, step_rewards, step_terminations, step_truncations, step_infos = result
        for k in live:
            agent = agents[k]
            rewards[start + k] = float(step_rewards[agent])
            terminations[start + k] = bool(step_terminations[agent])
            truncations[start + k] = bool(step_truncations[agent])
        after = self._columns_of(index, env.agents)
        ended = [k for k in live if terminations[start + k] or truncations[start + k]]
        for k in live:
            if k not in after and k not in ended:
                raise ValueError(
                    f"agent {agents[k]!r} (env {self.env_offset + start + k}) left env.agents at this step without "
                    "being terminated or truncated; an agent's episode must end at the step it leaves."
                )
        self._live[index] = after
        done = not after
        events = []
        if mode is AutoresetMode.SAME_STEP:
            # Each agent that ended reports its terminal observation, as a sub-env that resets within
            # the step does; its column then shows what follows: the env's next episode if the env
            # reset, else the zero row of an agent that is not live.
            events = [
                (self.env_offset + start + k, {"final_obs": observations[agents[k]], "final_info": step_infos.get(agents[k], {})})
                for k in ended
            ]
            if done:
                reset_observations, reset_infos = self._reset_env(index, None, None)
                return events + self._started(index, reset_observations, reset_infos, leaves, acted=live, env_done=True)
            shown = [k for k in after if agents[k] in observations]
        else:
            self._ended[index] = done
            shown = [k for k in sorted(set(live) | set(after)) if agents[k] in observations]
        self._write(index, shown, observations, leaves)
        return events + [
            (self.env_offset + start + k, {**step_infos.get(agents[k], {}), "agent_live": k in live, "env_done": done})
            for k in range(len(agents))
        ]

    def _reset_env(self, index: int, seed: int | None, options: dict | None) -> tuple[dict, dict]:
        """Reset env ``index``; remember its seed (``np_random_seed``: -1 when none was given)."""
        result = self.envs[index].reset(seed=seed, options=options)
        if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], dict)):
            raise TypeError(
                f"`reset` returned {type(result).__name__}; a PettingZoo ParallelEnv returns (observations, infos), "
                "two dicts keyed by agent."
            )
        self._seeds[index] = -1 if seed is None else int(seed)
        return result[0], result[1] if isinstance(result[1], dict) else {}

    def _started(
        self, index: int, observations: dict, infos: dict, leaves: list, acted=(), env_done: bool = False
    ) -> list:
        """After env ``index`` reset: its agents present get their observations; the events of its columns.

        ``acted``: the agents that acted in the step that ended with this reset (``SAME_STEP``), whose
        rows are transitions (``agent_live``); none after a reset step or a ``reset()``.
        """
        agents, start = self._agents[index], self._starts[index]
        self._live[index] = present = self._columns_of(index, self.envs[index].agents)
        for leaf in leaves:
            leaf[start : start + len(agents)] = 0
        self._write(index, present, observations, leaves)
        return [
            (
                self.env_offset + start + k,
                {**infos.get(agents[k], {}), "agent_live": k in acted, "env_done": env_done, "agent_present": k in present},
            )
            for k in range(len(agents))
        ]

    def _columns_of(self, index: int, names: Any) -> list[int]:
        agents = self._agents[index]
        columns = []
        for agent in names:
            if agent not in agents:
                raise ValueError(f"env.agents holds {agent!r}, which is not in possible_agents {list(agents)!r}.")
            columns.append(agents.index(agent))
        return columns

    def _write(self, index: int, columns: list[int], observations: dict, leaves: list) -> None:
        layout, start = self._observation_layout, self._starts[index]
        for k in columns:
            agent = self._agents[index][k]
            try:
                values = layout.flatten(observations[agent])
            except (SpaceError, KeyError) as error:
                raise ObservationError(
                    f"env {self.env_offset + start + k} (agent {agent!r}) returned an observation that does not match: "
                    f"{error}"
                ) from None
            for leaf_index, (target, value) in enumerate(zip(leaves, values)):
                array = np.asarray(value)
                if array.shape != layout.leaves[leaf_index].shape:
                    raise ObservationError(
                        f"env {self.env_offset + start + k} (agent {agent!r}) returned an observation of shape "
                        f"{array.shape!r}; its observation space {layout.leaves[leaf_index].space!r} expects shape "
                        f"{layout.leaves[leaf_index].shape!r}."
                    )
                target[start + k] = array

    # -- requests other than a step (:meth:`GymnasiumGroupBase.handle` dispatches them) --------

    def reset(self, seeds: Sequence, options: dict | None, reset_mask: np.ndarray | None) -> list:
        """Reset every env (or those whose columns ``reset_mask`` selects), each with its first column's seed."""
        seeds = self._mine(seeds)
        mask = np.ones(self.num_envs, dtype=bool) if reset_mask is None else np.asarray(self._mine(reset_mask), dtype=bool)
        storage = self._storage
        leaves = [leaf[0] for leaf in storage.observations]
        events: list = []
        failures = []
        for index, env in enumerate(self.envs):
            start, count = self._starts[index], len(self._agents[index])
            selected = mask[start : start + count]
            if not selected.any():
                continue
            if not selected.all():
                first = self.env_offset + start
                raise ValueError(
                    f"`reset_mask` selects some but not all of envs {first}..{first + count - 1}, the agents of one "
                    "multi-agent env; an env resets all its agents at once, so select all of them or none."
                )
            try:
                observations, infos = self._reset_env(index, seeds[start], options)
            except Exception as error:
                failures.append((describe_failure(self.env_offset + start, "reset", error), error))
                continue
            self._ended[index] = False
            events.extend(self._started(index, observations, infos, leaves))
            storage.terminations[0, start : start + count] = False
            storage.truncations[0, start : start + count] = False
            storage.rewards[0, start : start + count] = 0.0
        if failures:
            raise WorkerError.from_failures([failure for failure, _ in failures]) from failures[0][1]
        return events

    def call(self, name: str, args: tuple, kwargs: dict) -> list | RaisedByEnv:
        """One result per column: each env's answer, repeated for each of its agents."""
        def answer(indexed_env):
            index, env = indexed_env
            if name == "np_random_seed":
                # The seed of the env's last reset (-1: unseeded), as a Gymnasium env reports it.
                return self._seeds[index]
            attribute = agent_env_attribute(env, name)
            return attribute(*args, **kwargs) if callable(attribute) else attribute

        answers = answer_each(list(enumerate(self.envs)), self._first_columns, f"call({name!r})", answer)
        if isinstance(answers, RaisedByEnv):
            return answers
        return [result for index, result in enumerate(answers) for _ in self._agents[index]]

    def set_attr(self, name: str, values: Sequence) -> RaisedByEnv | None:
        """Each env takes the value of its first column."""
        values = self._mine(values)
        answered = answer_each(
            [(env, values[start]) for env, start in zip(self.envs, self._starts)], self._first_columns,
            f"set_attr({name!r})", lambda setting: setattr(setting[0], name, setting[1]),
        )
        return answered if isinstance(answered, RaisedByEnv) else None

    @property
    def _first_columns(self) -> list[int]:
        """Each env's first column, as a global index."""
        return [self.env_offset + start for start in self._starts]
