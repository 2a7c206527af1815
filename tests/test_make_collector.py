"""make_collector: a registered Gymnasium env id gives the same collector as hand-written factories."""

import pickle
from functools import partial

import gymnasium
import numpy as np
import pytest
from gymnasium.wrappers import TransformReward

import parallel_rollouts
from parallel_rollouts import ConfigurationError, ParallelRolloutCollector, make_collector
from tests.batch_compare import assert_batches_identical
from tests.envs import ConstantPolicy

# Registered here, in this process only: spawned workers never run this line.
LOCAL_ID = "ParallelRolloutsTestCounting-v0"
if LOCAL_ID not in gymnasium.registry:
    gymnasium.register(LOCAL_ID, entry_point="tests.envs:CountingEnv", kwargs={"episode_length": 4})


def double(reward):
    return 2.0 * reward


def add_one(reward):
    return reward + 1.0


def test_an_env_id_in_one_line_gives_the_same_batch_as_hand_written_factories():
    with make_collector("CartPole-v1", num_envs=3, backend="sync", horizon=40, seed=7) as collector:
        from_id = collector.collect()
    env_fns = [partial(gymnasium.make, "CartPole-v1") for _ in range(3)]
    with ParallelRolloutCollector(env_fns, backend="sync", horizon=40, seed=7) as collector:
        by_hand = collector.collect()
    assert from_id.observations.shape == (40, 3, 4)
    assert_batches_identical(from_id, by_hand)


def test_the_one_liner_is_exported_next_to_the_collector():
    assert parallel_rollouts.make_collector is make_collector


def test_env_kwargs_reach_gymnasium_make():
    # A CartPole episode cannot fail within 3 steps, so every episode is truncated at 3.
    with make_collector("CartPole-v1", num_envs=2, horizon=9, seed=0, env_kwargs={"max_episode_steps": 3}) as collector:
        batch = collector.collect()
    assert not batch.terminations.any()
    expected = np.zeros((9, 2), dtype=bool)
    expected[2::3] = True
    np.testing.assert_array_equal(batch.truncations, expected)


def test_constructor_arguments_of_the_env_go_through_env_kwargs():
    with make_collector(LOCAL_ID, num_envs=2, horizon=6, seed=0, env_kwargs={"episode_length": 2}) as collector:
        batch = collector.collect()
    np.testing.assert_array_equal(batch.episode_lengths, [2, 2, 2, 2, 2, 2])


def test_wrappers_are_applied_in_order_to_every_env():
    wrappers = [partial(TransformReward, func=double), partial(TransformReward, func=add_one)]
    with make_collector("CartPole-v1", num_envs=2, horizon=5, seed=0, wrappers=wrappers) as collector:
        batch = collector.collect()
    np.testing.assert_array_equal(batch.rewards, np.full((5, 2), 3.0))  # (1 * 2) + 1, not (1 + 1) * 2


def test_collector_keyword_arguments_pass_through():
    with make_collector("CartPole-v1", num_envs=2, horizon=3, seed=0, core="python", info_keys=()) as collector:
        assert collector.core == "python"
        assert collector.num_envs == 2


def test_factories_pickle_with_plain_pickle_and_rebuild_the_env():
    with make_collector("CartPole-v1", num_envs=1, horizon=1, seed=0) as collector:
        env_fn = collector._spec.env_fns[0]
    env = pickle.loads(pickle.dumps(env_fn))()
    assert env.spec.id == "CartPole-v1"
    env.close()


def test_async_workers_make_an_env_registered_only_in_this_process():
    policy = ConstantPolicy(num_envs=4, value=1)
    common = dict(num_envs=4, policy=policy, horizon=10, seed=3)
    with make_collector(LOCAL_ID, backend="async", num_workers=2, **common) as collector:
        from_workers = collector.collect()
    with make_collector(LOCAL_ID, backend="sync", **common) as collector:
        in_process = collector.collect()
    assert_batches_identical(from_workers, in_process)


def test_an_env_spec_is_accepted_like_an_id():
    spec = gymnasium.spec("CartPole-v1")
    with make_collector(spec, num_envs=2, horizon=4, seed=1) as collector:
        assert collector.collect().observations.shape == (4, 2, 4)


@pytest.mark.parametrize(
    "args, kwargs, match",
    [
        (("CartPol-v1",), {}, r"`env_id` 'CartPol-v1' is not a registered Gymnasium env: .*Did you mean: `CartPole`\?"),
        (("no_such_package:Thing-v0",), {}, r"names module 'no_such_package', which cannot be imported"),
        ((gymnasium.make,), {}, r"`env_id` must be a registered Gymnasium env id .* use ParallelRolloutCollector"),
        (("CartPole-v1",), {"num_envs": 0}, r"`num_envs` must be an int >= 1; got 0"),
        (("CartPole-v1",), {"env_kwargs": ["max_episode_steps"]}, r"`env_kwargs` must be a dict .* got list"),
        (("CartPole-v1",), {"wrappers": TransformReward}, r"`wrappers` must be a list of callables"),
        (("CartPole-v1",), {"wrappers": [TransformReward, 3]}, r"wrappers\[1\] is not callable; got 3"),
        (("CartPole-v1",), {"backend": "threads"}, r"`backend` must be one of"),
    ],
)
def test_bad_arguments_are_named(args, kwargs, match):
    with pytest.raises(ConfigurationError, match=match):
        make_collector(*args, **kwargs)


@pytest.mark.parametrize("env_fns", ["CartPole-v1", ["CartPole-v1", "CartPole-v1"]])
def test_an_env_id_given_to_the_collector_points_to_make_collector(env_fns):
    with pytest.raises(ConfigurationError, match=r"make_collector\('CartPole-v1', num_envs=\.\.\., \.\.\.\)"):
        ParallelRolloutCollector(env_fns)
