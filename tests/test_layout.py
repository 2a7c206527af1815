"""The one rollout layout: resolved once, immutable, handed whole to every group."""

import dataclasses
import copy as copy_module
import pickle
from functools import partial

import gymnasium as gym
import pytest
from gymnasium.vector import AutoresetMode

from parallel_rollouts import ParallelRolloutCollector
from parallel_rollouts.groups import EnvGroup, GroupChain, RolloutGroup, VectorEnvGroup
from parallel_rollouts.groups.gymnasium_envs import GymnasiumGroup
from parallel_rollouts.config.layout import RolloutLayout
from parallel_rollouts.config.spec import RolloutSpec


def _spec(**changes):
    settings = dict(env_fns=(lambda: gym.make("CartPole-v1"),), root_seed=7, horizon=5, info_keys=("x",), core_name="python")
    settings.update(changes)
    return RolloutSpec(**settings)


def test_a_spec_resolves_the_layout_from_the_envs_spaces_and_changes_no_state_of_its_own():
    spec = _spec()
    before = dataclasses.asdict(spec)
    layout = spec.resolve(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(4), num_envs=6)
    assert dataclasses.asdict(spec) == before
    assert (layout.num_envs, layout.horizon, layout.root_seed, layout.info_keys) == (6, 5, 7, ("x",))
    assert layout.observation_layout.leaves[0].shape == (3,)
    assert layout.action_layout.space == gym.spaces.Discrete(4)
    assert layout.core.__name__ == "parallel_rollouts.core.rows"
    storage = layout.allocate_storage()
    assert storage.observations[0].shape == (6, 6, 3) and storage.rewards.shape == (5, 6)
    assert list(storage.infos) == ["x"]


def test_the_layout_and_the_spec_cannot_be_changed_after_construction():
    spec = _spec()
    layout = spec.resolve(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(4), num_envs=2)
    for frozen, field in ((layout, "num_envs"), (layout, "observation_check"), (spec, "horizon")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(frozen, field, 3)


def test_the_layout_pickles_without_its_core_module_and_rebuilds_it_by_name():
    layout = _spec(core_name="compiled", observation_check="raise").resolve(
        gym.spaces.Dict({"a": gym.spaces.Box(0, 1, (2,)), "b": gym.spaces.Discrete(3)}), gym.spaces.Discrete(2), 4
    )
    state = layout.__getstate__()
    assert "core" not in state and "observation_layout" not in state
    copy = pickle.loads(pickle.dumps(layout))
    assert copy == layout
    assert copy.core is layout.core
    assert [leaf.name for leaf in copy.observation_layout.leaves] == [leaf.name for leaf in layout.observation_layout.leaves]
    assert copy.observation_check == "raise"


def test_every_group_kind_implements_the_one_interface_and_is_built_from_envs_offset_and_layout():
    cartpole = gym.make("CartPole-v1")
    layout = _spec().resolve(cartpole.observation_space, cartpole.action_space, num_envs=2)
    vector = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    groups = [
        EnvGroup([cartpole, gym.make("CartPole-v1")], 0, layout),
        VectorEnvGroup(vector, 0, layout),
        GymnasiumGroup([gym.make("CartPole-v1")], 0, layout, AutoresetMode.NEXT_STEP),
    ]
    groups.append(GroupChain([(0, 2, groups[0])]))
    for group in groups:
        assert isinstance(group, RolloutGroup), type(group).__name__
        group.close()


def test_a_collector_s_parts_share_the_layout_it_reports():
    with ParallelRolloutCollector(
        [partial(gym.make, "CartPole-v1")] * 3, None, "sync", horizon=4, seed=1, info_keys=(), observation_check="off"
    ) as collector:
        layout = collector._layout
        assert isinstance(layout, RolloutLayout)
        assert (layout.num_envs, layout.horizon, layout.observation_check) == (3, 4, "off")
        assert collector.observation_space == layout.observation_space
        assert collector.collect().observations.shape == (4, 3, 4)
        assert collector._backend.stepper.layout is layout


def test_the_layout_is_compared_by_value_and_says_it_cannot_be_hashed():
    layout = _spec().resolve(gym.spaces.Dict({"a": gym.spaces.Discrete(2)}), gym.spaces.Discrete(2), num_envs=1)
    assert layout == _spec().resolve(gym.spaces.Dict({"a": gym.spaces.Discrete(2)}), gym.spaces.Discrete(2), num_envs=1)
    with pytest.raises(TypeError, match="RolloutLayout"):
        hash(layout)


def test_a_copy_in_this_process_keeps_the_env_factories_and_a_pickle_leaves_them_behind():
    layout = _spec().resolve(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(4), num_envs=1)
    kept = copy_module.copy(layout)
    assert kept == layout and kept.spec.env_fns == layout.spec.env_fns and len(kept.env_fns) == 1
    sent = pickle.loads(pickle.dumps(layout))
    assert sent.spec.env_fns == () and sent.horizon == layout.horizon
