"""RolloutBatch: what one ``collect()`` returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .columns import column_env_indices, warn_env_name_holds_columns
from .recurrent_record import RecurrentRecord
from .spaces import SpaceLayout

__all__ = ["TIMING_FIELDS", "RolloutBatch"]

#: Fields measured with a clock: they differ from run to run, unlike every other field,
#: which the same seed reproduces bit for bit.
TIMING_FIELDS = ("env_step_seconds", "env_reset_seconds", "env_wait_seconds")


@dataclass(frozen=True)
class RolloutBatch:
    """One rollout of ``horizon`` steps of ``num_columns`` columns, as NumPy arrays.

    Leading dims are ``[time, column]`` (written ``[T, N]`` below). A column is one
    env: a single env, or a sub-env of a Gymnasium vector env; a PettingZoo env
    spans one column per agent (``column_envs`` and ``column_agents`` map each
    column to its env and agent). Observation and action fields mirror their
    space: a Box gives one array, a Dict space a dict of arrays, a Tuple space a
    tuple of arrays, each ``[T, N, *leaf_shape]``.

    Attributes
    ----------
    observations:
        ``[T, N, ...]``: the observation the action at ``[t, env]`` was chosen
        from. After an episode ends at ``[t, env]``, row ``t + 1`` already holds
        the next episode's first observation.
    actions:
        ``[T, N, ...]`` in the action space's dtype.
    rewards:
        ``[T, N]`` float64.
    terminations:
        ``[T, N]`` bool: the episode ended at ``[t, env]`` by reaching a terminal
        state. ``dones`` is the union with ``truncations``.
    truncations:
        ``[T, N]`` bool: the episode ended at ``[t, env]`` by a time limit or other
        truncation.
    values:
        ``[T, N]`` float32 value estimates when the policy returned them
        (:class:`~parallel_rollouts.PolicyOutput`), otherwise ``None``.
    log_probs:
        ``[T, N]`` float32 log-probabilities of the actions when the policy returned
        them (:class:`~parallel_rollouts.PolicyOutput`), otherwise ``None``.
    final_observations:
        ``[T, N, ...]``: where ``final_observation_mask[t, env]`` is true, the
        terminal observation returned by that step; elsewhere zero. Bootstrap a
        truncated episode from it.
    final_observation_mask:
        ``[T, N]`` bool: true exactly where an episode ended.
    bootstrap_observations:
        ``[N, ...]``: the observation after the last step, the one the next
        ``collect()`` starts from.
    step_episode_seeds:
        ``[T, N]`` int64: the reset seed of the episode the step at ``[t, env]``
        belongs to.
    episode_returns:
        One entry per episode that ended in this rollout, ordered by end step
        then column (as are the four arrays below): its undiscounted return,
        counted from its reset, which may lie in an earlier rollout. With
        multi-agent envs, one entry per agent and env episode.
    episode_lengths:
        Each ended episode's length, counted from its reset.
    episode_columns:
        Each ended episode's column (its env's with single and vector envs, its
        agent's with multi-agent envs; ``episode_envs`` gives the env).
    episode_end_steps:
        The ``t`` each ended episode ended at.
    episode_seeds:
        Each ended episode's reset seed.
    infos:
        ``{key: [T, N] float64}`` for each requested ``info_keys`` entry, taken
        from the info dict of the step at ``[t, env]``.
    seed:
        The collector's root seed, so the run can be reproduced.
    lost_columns:
        int64 columns some of whose rows in this batch were lost because the
        worker hosting them died or hung and was replaced (``max_restarts``);
        empty otherwise. Their lost rows are zero and ``valid`` is false there.
    valid:
        ``[T, N]`` bool: false on the reset steps of a Gymnasium vector env with
        next-step autoreset (the step after an episode's end, whose action the
        env ignored; see ``docs/batch-contract.md``), on the rows of a multi-agent
        env's agents that are not live (not arrived yet, or done while others go
        on; see ``docs/multi-agent.md``), and on every row lost with
        a replaced worker (from the row it was lost at: ``async`` keeps the rows
        its slice wrote before; ``ray`` loses the whole rollout of the slice).
        True everywhere else. Mask the loss with it.
    env_step_seconds:
        ``[N]`` float64: seconds each env spent in its ``step`` calls during this
        rollout, measured where the env runs. A sub-env of a Gymnasium vector env
        is credited an equal share of each batched call. The slowest env (the
        straggler every step waits for) is
        ``argmax(env_step_seconds + env_reset_seconds)``.
    env_reset_seconds:
        ``[N]`` float64: seconds each env spent in its ``reset`` calls
        (autoresets) during this rollout, measured as ``env_step_seconds``.
    env_wait_seconds:
        ``[N]`` float64: for ``backend="async"``, the seconds this process spent
        waiting for the reply of the worker hosting each env during this rollout
        (every env of a worker shows the worker's figure). Replies are read in
        worker order, so the first worker's figure also holds the time all
        workers step in parallel. Zero for the other backends.
    policy_versions:
        ``[T, N]`` int64 (a read-only view): which snapshot of the policy acted on the
        row, counted as the number of ``collect()`` calls that had completed their rollout
        when it was taken (a batch a warning made an error dropped counts). With
        ``max_policy_lag=0`` batch ``k`` (from 0) holds ``k``; with ``max_policy_lag=1``
        it holds ``k - 1`` (``0`` for the first batch): the policy as it was when batch
        ``k - 1`` was handed out, before the caller learned from it.
    column_envs:
        ``[N]`` int64: the env (numbered from 0, in factory order) each column
        belongs to: ``arange(N)`` unless the envs are multi-agent, where an env's
        agents are consecutive columns.
    column_agents:
        With multi-agent envs, the agent behind each column (``N`` names, each
        env's ``possible_agents`` in order); empty otherwise, as the collector's
        ``column_agents``.
    initial_state:
        With a recurrent policy (``None`` otherwise; the same for the four below),
        NumPy copies of its state, each leaf in the nesting ``initial_state()``
        returns (see ``docs/recurrent.md``): ``[N, ...]``, the state the policy was
        given at row 0 (already reset where row 0 starts an episode).
    episode_starts:
        ``[T, N]`` bool: true where the state was reset to the initial state before
        the policy saw the row.
    final_states:
        ``[T, N, ...]``: where ``final_observation_mask`` is true, the next state the
        policy returned at that row (the state to evaluate ``final_observations``
        with); zero elsewhere.
    bootstrap_states:
        ``[N, ...]``: the state for ``bootstrap_observations`` (reset where that row
        starts an episode; the next batch's ``initial_state``).
    states:
        ``[T, N, ...]``: the state given at every row, with ``store_states=True``;
        ``None`` otherwise.
    """

    observations: Any
    actions: Any
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    values: np.ndarray | None
    log_probs: np.ndarray | None
    final_observations: Any
    final_observation_mask: np.ndarray
    bootstrap_observations: Any
    step_episode_seeds: np.ndarray
    episode_returns: np.ndarray
    episode_lengths: np.ndarray
    episode_columns: np.ndarray
    episode_end_steps: np.ndarray
    episode_seeds: np.ndarray
    infos: dict[str, np.ndarray]
    seed: int
    lost_columns: np.ndarray
    valid: np.ndarray
    env_step_seconds: np.ndarray
    env_reset_seconds: np.ndarray
    env_wait_seconds: np.ndarray
    policy_versions: np.ndarray
    column_envs: np.ndarray
    column_agents: tuple
    initial_state: Any = None
    episode_starts: np.ndarray | None = None
    final_states: Any = None
    bootstrap_states: Any = None
    states: Any = None

    @property
    def dones(self) -> np.ndarray:
        """``[T, N]`` bool: ``terminations | truncations``."""
        return self.terminations | self.truncations

    @property
    def horizon(self) -> int:
        return self.rewards.shape[0]

    @property
    def num_columns(self) -> int:
        """``N``: the batch's columns (an env's, or with multi-agent envs an agent's)."""
        return self.rewards.shape[1]

    @property
    def num_envs(self) -> int:
        """``N`` where each column is an env (single envs, a vector env's sub-envs).

        With multi-agent envs it counts columns too, and reading it warns
        (``FutureWarning``): read :attr:`num_columns`, and :attr:`column_envs` for
        the envs.
        """
        self._warn_if_columns_are_agents("num_envs", "num_columns")
        return self.num_columns

    @property
    def episode_env_indices(self) -> np.ndarray:
        """:attr:`episode_columns` under its earlier name: each ended episode's env where each
        column is an env. With multi-agent envs reading it warns: read :attr:`episode_columns`,
        or :attr:`episode_envs` for the envs."""
        self._warn_if_columns_are_agents("episode_env_indices", "episode_columns")
        return self.episode_columns

    @property
    def lost_env_indices(self) -> np.ndarray:
        """:attr:`lost_columns` under its earlier name: the envs that lost rows where each column
        is an env. With multi-agent envs reading it warns: read :attr:`lost_columns`."""
        self._warn_if_columns_are_agents("lost_env_indices", "lost_columns")
        return self.lost_columns

    @property
    def episode_envs(self) -> np.ndarray:
        """Each ended episode's env (``column_envs[episode_columns]``); with single and vector
        envs, the same as :attr:`episode_columns`."""
        return self.column_envs[self.episode_columns]

    def _warn_if_columns_are_agents(self, old: str, new: str) -> None:
        if self.column_agents:
            warn_env_name_holds_columns("batch", old, new, self.column_envs, stacklevel=4)

    @property
    def num_transitions(self) -> int:
        return self.rewards.size

    @classmethod
    def from_result(
        cls,
        result,
        observation_layout: SpaceLayout,
        action_layout: SpaceLayout,
        seed: int,
        policy_version: int = 0,
        column_envs: tuple = (),
        column_agents: tuple = (),
    ) -> RolloutBatch:
        """Assemble the batch from a runner's :class:`~parallel_rollouts.runners.base.RolloutResult`;
        ``column_envs`` and ``column_agents`` as the layout has them (empty without multi-agent envs)."""
        storage, episodes = result.storage, result.episodes
        has_values, has_log_probs = result.has_values, result.has_log_probs
        horizon, num_envs = storage.rewards.shape
        valid = ~storage.reset_steps
        if result.lost_from_rows is not None:
            valid &= np.arange(horizon)[:, None] < result.lost_from_rows[None, :]
        wait = result.env_wait_seconds
        recurrent = {}
        if result.recurrent is not None:
            recurrent = _recurrent_fields(result.recurrent, result.lost_from_rows)
        return cls(
            observations=observation_layout.unflatten([leaf[:horizon] for leaf in storage.observations]),
            actions=action_layout.unflatten(list(storage.actions)),
            rewards=storage.rewards,
            terminations=storage.terminations,
            truncations=storage.truncations,
            values=storage.values if has_values else None,
            log_probs=storage.log_probs if has_log_probs else None,
            final_observations=observation_layout.unflatten(list(storage.final_observations)),
            final_observation_mask=storage.terminations | storage.truncations,
            bootstrap_observations=observation_layout.unflatten(
                [leaf[horizon] for leaf in storage.observations]
            ),
            step_episode_seeds=storage.step_episode_seeds,
            episode_returns=episodes.returns,
            episode_lengths=episodes.lengths,
            episode_columns=episodes.env_indices,
            episode_end_steps=episodes.end_steps,
            episode_seeds=episodes.seeds,
            infos=dict(storage.infos),
            seed=seed,
            lost_columns=result.lost_env_indices,
            valid=valid,
            env_step_seconds=storage.env_step_seconds[0],
            env_reset_seconds=storage.env_reset_seconds[0],
            env_wait_seconds=np.zeros(num_envs) if wait is None else wait,
            # One value per batch: a read-only view of one number, not T x N of them.
            policy_versions=np.broadcast_to(np.int64(policy_version), (horizon, num_envs)),
            column_envs=column_env_indices(column_envs, num_envs),
            column_agents=tuple(column_agents),
            **recurrent,
        )


def _recurrent_fields(record: RecurrentRecord, lost_from_rows: np.ndarray | None) -> dict:
    """The batch's state fields; rows lost with a replaced worker are zero, like every other field."""
    if lost_from_rows is not None:
        horizon = record.episode_starts.shape[0]
        lost = np.arange(horizon)[:, None] >= lost_from_rows[None, :]
        record.episode_starts[lost] = False
        for leaves in (record.final_states, record.states or []):
            for leaf in leaves:
                leaf[lost] = 0
        lost_part_way = lost_from_rows < horizon
        for leaf in record.bootstrap_states:
            leaf[lost_part_way] = 0
        lost_before_any_row = lost_from_rows < 0
        for leaf in record.initial_state:
            leaf[lost_before_any_row] = 0
    return record.batch_fields()
