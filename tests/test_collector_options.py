"""The collector's options parsed once, the one table of backends, and the layout over its spec."""

import dataclasses
import pickle
from functools import partial

import gymnasium as gym
import pytest

from parallel_rollouts import ConfigurationError, ParallelRolloutCollector
from parallel_rollouts.config.backends import (
    BACKENDS,
    VECTOR_ENV_BACKENDS,
    backends_taking,
)
from parallel_rollouts.config.spec import RolloutSpec
from parallel_rollouts.runners.options import CollectorOptions

DEFAULTS = {
    "policy": None, "backend": "sync", "horizon": 8, "seed": 3, "core": "python", "info_keys": (),
    "reuse_buffers": False, "observation_check": "warn", "episode_seeds": "every", "num_workers": None,
    "context": None, "step_timeout": None, "ray_options": None, "policy_placement": None, "pipelined": False,
    "max_restarts": None, "main_process_envs": None, "store_states": False, "max_policy_lag": 0,
    "policy_inputs": "protected",
}


def parse(**changes):
    return CollectorOptions.parse(num_factories=4, **{**DEFAULTS, **changes})


def test_parsing_derives_the_placement_and_the_recycling_from_the_options_given():
    options = parse()
    assert (options.backend, options.policy_placement, options.max_policy_lag) == ("sync", "main", 0)
    assert (options.rollout.batches_recycled, options.rollout.yield_to_learner) == (2, False)
    lagged = parse(backend="async", policy_placement="workers", max_policy_lag=1)
    assert (lagged.rollout.batches_recycled, lagged.rollout.yield_to_learner) == (3, True)
    assert parse(backend="async", max_policy_lag=1).rollout.yield_to_learner is False
    assert parse(backend="ray").policy_placement == "workers"


def test_the_options_are_frozen_and_the_spec_they_give_carries_the_factories():
    options = parse(info_keys=["x"], observation_check="raise")
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.backend = "async"
    factories = [partial(gym.make, "CartPole-v1")] * 2
    spec = options.spec(factories)
    assert isinstance(spec, RolloutSpec) and spec.env_fns == tuple(factories)
    assert (spec.root_seed, spec.horizon, spec.info_keys, spec.observation_check) == (3, 8, ("x",), "raise")
    assert options.rollout.env_fns == ()


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"backend": "threads"}, r"`backend` must be one of \('serial', 'sync', 'async', 'ray'\)"),
        ({"context": "spawn"}, r"`context` applies to backend 'async' only; got backend='sync'"),
        ({"backend": "ray", "main_process_envs": 1}, r"`main_process_envs` applies to backend 'async' only"),
        ({"backend": "sync", "pipelined": True}, r"`pipelined=True` overlaps the policy"),
        ({"backend": "ray", "policy_placement": "main"}, r"backend='ray' always runs the policy in its actors"),
        ({"backend": "sync", "policy_placement": "workers"}, r"`policy_placement='workers'` needs worker processes"),
        ({"backend": "async", "ray_options": {}}, r"`ray_options` applies to backend 'ray' only"),
        ({"backend": "ray", "ray_options": {"colour": 1}}, r"unknown `ray_options` key\(s\) \['colour'\]"),
        ({"max_policy_lag": 1, "reuse_buffers": True}, r"`max_policy_lag=1` collects the next batch"),
        ({"policy_inputs": "mirrors"}, r"`policy_inputs` must be one of"),
    ],
)
def test_every_option_is_refused_by_the_one_parse_with_the_collector_s_message(changes, message):
    with pytest.raises(ConfigurationError, match=message):
        parse(**changes)


def test_the_backend_table_says_what_each_option_and_front_door_applies_to():
    assert tuple(BACKENDS) == ("serial", "sync", "async", "ray")
    assert VECTOR_ENV_BACKENDS == ("sync", "async")
    assert backends_taking("num_workers") == ("async", "ray")
    assert backends_taking("context") == backends_taking("main_process_envs") == ("async",)
    assert [name for name, backend in BACKENDS.items() if backend.pipelined] == ["async"]


def test_a_layout_reads_its_spec_s_settings_and_leaves_the_factories_behind_when_pickled():
    spec = RolloutSpec((lambda: gym.make("CartPole-v1"),), 7, 5, ("x",), "python", episode_seeds="first")
    layout = spec.resolve(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), num_envs=1)
    assert layout.spec is spec
    assert (layout.horizon, layout.root_seed, layout.episode_seeds) == (5, 7, "first")
    with pytest.raises(AttributeError, match="no attribute 'colour'"):
        layout.colour  # noqa: B018
    copy = pickle.loads(pickle.dumps(layout))  # a lambda factory would not pickle
    assert copy == layout and copy.spec.env_fns == () and copy.episode_seeds == "first"


def test_the_runner_numbers_the_policy_versions_of_the_batches_it_hands_out():
    def policy(observations):
        return [0] * len(observations)

    for lag, versions in ((0, [0, 1, 2]), (1, [0, 0, 1])):
        with ParallelRolloutCollector(
            [partial(gym.make, "CartPole-v1")] * 2, policy, "sync", horizon=4, seed=1, max_policy_lag=lag
        ) as collector:
            assert [int(collector.collect().policy_versions[0, 0]) for _ in versions] == versions
