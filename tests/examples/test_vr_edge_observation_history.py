"""The VR env read through its last few observations: the layout the actor relies on, same episodes."""

from __future__ import annotations

import numpy as np

import pytest

from examples.vr_edge.baselines import ConstantLevel
from examples.vr_edge.episodes import play_episodes
from examples.vr_edge.observation_history import ObservationHistory, make_env
from examples.vr_edge.synthetic_env import ObservationLayout, SyntheticVREdgeEnv


def test_each_user_block_holds_its_newest_then_older_features_and_shared_ones_follow():
    env_kwargs = {"num_users": 3, "report_delay_steps": 1, "episode_length": 20}
    stacked, plain = make_env(3, **env_kwargs), SyntheticVREdgeEnv(**env_kwargs)
    layout = plain.observation_layout
    first, _ = stacked.reset(seed=5)
    seen = [plain.reset(seed=5)[0]]
    assert first.shape == stacked.observation_space.shape == (3 * layout.size,)
    rng = np.random.default_rng(0)
    for _ in range(6):
        action = rng.integers(0, layout.num_levels, size=3)
        observation, reward, *_ = stacked.step(action)
        expected, expected_reward, *_ = plain.step(action)
        seen.insert(0, expected)
        assert reward == expected_reward
        # At a reset the older copies repeat the first observation.
        copies = [seen[min(lag, len(seen) - 1)] for lag in range(3)]
        users = observation[: 3 * 3 * layout.per_user_features].reshape(3, 3, layout.per_user_features)
        for lag, copy in enumerate(copies):
            np.testing.assert_array_equal(users[:, lag], layout.per_user(copy))
        shared = observation[3 * 3 * layout.per_user_features :]
        split = layout.num_users * layout.per_user_features
        np.testing.assert_array_equal(shared, np.concatenate([copy[split:] for copy in copies]))


def test_the_wrapped_layout_keeps_feature_indices_for_the_actor():
    env = make_env(2, num_users=4)
    assert env.observation_layout == ObservationLayout(
        num_users=4, per_user_features=2 * env.env_layout.per_user_features, shared_features=2 * env.env_layout.shared_features
    )
    assert env.observation_layout.feature("last_level") == env.env_layout.feature("last_level")
    assert make_env(1, num_users=4).__class__ is SyntheticVREdgeEnv


def test_a_policy_reading_only_the_newest_copy_plays_the_same_episodes():
    layout = ObservationLayout(3)
    controller = ConstantLevel(layout, level=2, stall_guard=0.05)
    width = layout.per_user_features

    def newest_only(observations):
        users = observations[:, : 3 * 2 * width].reshape(len(observations), 3, 2, width)[:, :, 0]
        shared = observations[:, 3 * 2 * width :][:, : layout.shared_features]
        return controller(np.concatenate([users.reshape(len(observations), -1), shared], axis=1))

    env_kwargs = {"num_users": 3, "episode_length": 25, "report_delay_steps": 1}
    assert play_episodes(newest_only, [0, 1, 2], env_kwargs, history_steps=2) == play_episodes(controller, [0, 1, 2], env_kwargs)


@pytest.mark.parametrize("steps", [1, 0, 2.0, True])
def test_a_history_of_fewer_than_two_steps_or_not_an_int_is_rejected(steps):
    with pytest.raises(ValueError, match=rf"`steps` must be an int >= 2 \(1 is the plain env\); got {steps!r}"):
        ObservationHistory(SyntheticVREdgeEnv(num_users=2), steps)
