"""Columns and envs have names of their own: ``num_columns``, ``episode_columns``, ``lost_columns``,
and the map ``column_envs`` / ``column_agents``. Where a column is an env (single envs, a vector
env's sub-envs) the names that say "env" read the same values without a word; with multi-agent
envs they still do, and warn, naming the column names."""

from __future__ import annotations

import pickle
import warnings
from functools import partial

import gymnasium
import numpy as np
import pytest

from parallel_rollouts import ParallelRolloutCollector, make_collector
from tests.agent_envs import make_relay

AGENTS = ("a0", "a1", "a2", "late")


def _vector_cartpole():
    return gymnasium.make_vec("CartPole-v1", num_envs=3, vectorization_mode="vector_entry_point")


@pytest.mark.parametrize(
    "make",
    [
        partial(make_collector, "CartPole-v1", num_envs=3),
        partial(ParallelRolloutCollector, [_vector_cartpole]),
    ],
    ids=["single-envs", "vector-env-source"],
)
def test_where_each_column_is_an_env_the_env_names_and_the_column_names_agree_silently(make):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with make(horizon=60, seed=0) as collector:
            batch = collector.collect()
        assert collector.num_envs == collector.num_columns == 3
        assert collector.column_envs.tolist() == [0, 1, 2] and collector.column_agents == ()
        assert batch.num_envs == batch.num_columns == 3
        assert batch.column_envs.tolist() == [0, 1, 2] and batch.column_agents == ()
        assert batch.episode_columns.size > 0
        for same in (batch.episode_env_indices, batch.episode_envs):
            np.testing.assert_array_equal(same, batch.episode_columns)
        assert batch.lost_env_indices is batch.lost_columns
    assert "num_envs=3" in repr(collector)


def _multi_agent_batch():
    with ParallelRolloutCollector([make_relay] * 3, None, "sync", horizon=30, seed=5) as collector:
        return collector, collector.collect()


def test_multi_agent_columns_map_to_their_env_and_agent():
    collector, batch = _multi_agent_batch()
    assert batch.num_columns == collector.num_columns == 12 == batch.rewards.shape[1]
    assert batch.column_envs.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    np.testing.assert_array_equal(collector.column_envs, batch.column_envs)
    assert batch.column_agents == collector.column_agents == AGENTS * 3
    # Every ended episode's env and agent, from its column.
    assert batch.episode_columns.size > 4
    np.testing.assert_array_equal(batch.episode_envs, batch.episode_columns // 4)
    assert {batch.column_agents[column] for column in batch.episode_columns} <= set(AGENTS)
    assert "num_columns=12 (3 multi-agent envs)" in repr(collector)


@pytest.mark.parametrize(
    "owner, old, new, holds",
    [
        ("batch", "num_envs", "num_columns", "counts columns"),
        ("batch", "episode_env_indices", "episode_columns", "holds column indices"),
        ("batch", "lost_env_indices", "lost_columns", "holds column indices"),
        ("collector", "num_envs", "num_columns", "counts columns"),
    ],
)
def test_with_multi_agent_envs_an_env_name_holding_columns_warns_and_keeps_its_values(owner, old, new, holds):
    collector, batch = _multi_agent_batch()
    read = {"batch": batch, "collector": collector}[owner]
    message = rf"`{owner}\.{old}` {holds}, not envs, with multi-agent envs \(12 columns here: one per agent of 3 envs\)"
    with pytest.warns(FutureWarning, match=message) as caught:
        value = getattr(read, old)
    assert caught[0].filename == __file__  # it points at the line that read the name
    assert f"`{owner}.{new}`" in str(caught[0].message)
    np.testing.assert_array_equal(value, getattr(read, new))


def test_a_pickled_batch_keeps_its_column_map():
    _, batch = _multi_agent_batch()
    shipped = pickle.loads(pickle.dumps(batch))
    np.testing.assert_array_equal(shipped.column_envs, batch.column_envs)
    assert shipped.column_agents == batch.column_agents
    np.testing.assert_array_equal(shipped.episode_envs, batch.episode_envs)
    with pytest.warns(FutureWarning, match="episode_columns"):
        np.testing.assert_array_equal(shipped.episode_env_indices, batch.episode_columns)
