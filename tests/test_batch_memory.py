"""One owner of batch memory: a dropped batch's arrays are recycled, a held one never is."""

from __future__ import annotations

import weakref
from functools import partial

import numpy as np
import pytest

from parallel_rollouts import ParallelRolloutCollector
from tests.envs import ConstantPolicy, CountingEnv

BACKENDS = ["serial", "sync", "async"]


def _options(backend):
    return {"num_workers": 2} if backend == "async" else {}


def _fns(n=2, episode_length=3):
    return [partial(CountingEnv, env_id=i + 1, episode_length=episode_length + i) for i in range(n)]


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_dropped_batch_is_recycled_and_a_held_one_never_is(backend):
    with ParallelRolloutCollector(_fns(), ConstantPolicy(2), backend, horizon=5, seed=0, **_options(backend)) as collector:
        first = collector.collect()
        first_copy = first.observations.copy()
        first_rewards = weakref.ref(first.rewards)
        second = collector.collect()  # `first` is still held: new memory
        assert not np.shares_memory(second.observations, first.observations)
        np.testing.assert_array_equal(first.observations, first_copy)
        del first
        third = collector.collect()
        # The first batch's memory, now unreferenced, holds the third batch.
        assert third.rewards is first_rewards()
        fourth = collector.collect()  # `second` and `third` held: new memory
        assert len({_address(b.rewards) for b in (second, third, fourth)}) == 3
        reference = ParallelRolloutCollector(_fns(), ConstantPolicy(2), "sync", horizon=5, seed=0)
        expected = [reference.collect() for _ in range(4)][-1]
        reference.close()
        np.testing.assert_array_equal(fourth.observations, expected.observations)
        np.testing.assert_array_equal(fourth.final_observations, expected.final_observations)
        np.testing.assert_array_equal(fourth.rewards, expected.rewards)


@pytest.mark.parametrize("backend", ["sync", "async"])
def test_a_view_of_any_field_keeps_the_whole_batch_from_being_recycled(backend):
    with ParallelRolloutCollector(_fns(), ConstantPolicy(2), backend, horizon=5, seed=0, **_options(backend)) as collector:
        batch = collector.collect()
        kept = batch.final_observations[1:3]
        kept_copy = kept.copy()
        del batch
        later = [collector.collect() for _ in range(3)]
        # The kept array is never handed out again while it lives.
        assert not any(np.shares_memory(kept, b.final_observations) for b in later)
        np.testing.assert_array_equal(kept, kept_copy)


def test_rows_a_policy_kept_pin_their_batch():
    kept = []

    def policy(observations):
        kept.append(observations)
        return np.ones(observations.shape[0], np.int64)

    with ParallelRolloutCollector(_fns(), policy, "sync", horizon=4, seed=0) as collector:
        collector.collect()
        snapshot = np.stack(kept).copy()
        for _ in range(4):
            collector.collect()
    np.testing.assert_array_equal(np.stack(kept[:4]), snapshot)


class _WideCountingEnv(CountingEnv):
    """CountingEnv's observation repeated into 128-byte rows: cleared row by row, not whole."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        from gymnasium import spaces

        self.observation_space = spaces.Box(-1e6, 1e6, shape=(32,), dtype=np.float32)

    def _observation(self, last_action: float) -> np.ndarray:
        return np.tile(super()._observation(last_action), 8)


@pytest.mark.parametrize("env_class", [CountingEnv, _WideCountingEnv], ids=["16-byte rows", "128-byte rows"])
def test_final_observations_of_a_recycled_batch_hold_only_this_rollouts_ends(env_class):
    fns = [partial(env_class, env_id=i + 1, episode_length=2 + 3 * i) for i in range(2)]
    with ParallelRolloutCollector(fns, ConstantPolicy(2), "sync", horizon=7, seed=0) as collector:
        for _ in range(8):
            batch = collector.collect()
            ended = batch.final_observation_mask
            assert not batch.final_observations[~ended].any()
            assert (batch.final_observations[ended][:, 0] != 0).all()


def test_the_episodes_of_one_part_are_copied_so_the_batch_can_write_them():
    # A Ray actor's arrays come back read-only; with one actor there is one part to merge.
    from parallel_rollouts.data.storage import CompletedEpisodes

    part = CompletedEpisodes(*(np.arange(3, dtype=dtype) for dtype in (np.float64,) + (np.int64,) * 4))
    for array in (part.returns, part.lengths, part.env_indices, part.end_steps, part.seeds):
        array.setflags(write=False)
    merged = CompletedEpisodes.merge([part])
    for name in ("returns", "lengths", "env_indices", "end_steps", "seeds"):
        array = getattr(merged, name)
        assert array.flags.writeable and not np.shares_memory(array, getattr(part, name)), name
        np.testing.assert_array_equal(array, getattr(part, name))


_EPISODE_FIELDS = ("episode_returns", "episode_lengths", "episode_env_indices", "episode_end_steps", "episode_seeds")


def _counting_vector_env():
    import gymnasium as gym

    return gym.vector.SyncVectorEnv(_fns(3), autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)


@pytest.mark.parametrize("source", ["envs", "vector env"])
@pytest.mark.parametrize("backend", ["serial", "sync"])
def test_a_held_batch_keeps_its_episodes_while_later_rollouts_book_theirs(backend, source):
    """Each group writes its episode books into the same buffers every rollout: what a batch
    holds must be its own copy, unchanged by later rollouts, an abandoned one included."""
    calls = []

    def policy(observations):
        calls.append(None)
        if len(calls) == 20:  # part-way through the third rollout
            raise RuntimeError("policy failed on purpose")
        return np.ones(observations.shape[0], np.int64)

    env_fns = _fns(3) if source == "envs" else [_counting_vector_env]
    with ParallelRolloutCollector(env_fns, policy, backend, horizon=8, seed=0) as collector:
        first = collector.collect()
        assert first.episode_returns.size  # the books hold episodes to lose
        saved = {name: getattr(first, name).copy() for name in _EPISODE_FIELDS}
        later = [collector.collect()]
        with pytest.raises(RuntimeError, match="on purpose"):
            collector.collect()
        later += [collector.collect() for _ in range(2)]
        for name in _EPISODE_FIELDS:
            np.testing.assert_array_equal(getattr(first, name), saved[name], err_msg=name)
            assert not any(np.shares_memory(getattr(first, name), getattr(batch, name)) for batch in later), name
