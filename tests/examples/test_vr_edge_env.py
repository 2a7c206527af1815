"""Behaviour of the synthetic VR edge environment and its baseline policies."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env

from examples.vr_edge.baselines import BandwidthShareHeuristic, LowestBitratePolicy
from examples.vr_edge.synthetic_env import (
    DEFAULT_BITRATE_LADDER_MBPS,
    INITIAL_BUFFER_S,
    SyntheticVREdgeEnv,
    _max_min_fair_allocation,
    make_env,
)

INFO_KEYS = ("quality", "stall_penalty", "smoothness_penalty", "stall_time")
EVALUATION_SEEDS = (0, 1, 2, 3, 4)


def _random_policy(num_users: int, seed: int):
    rng = np.random.default_rng(seed)
    num_levels = len(DEFAULT_BITRATE_LADDER_MBPS)
    return lambda observations: rng.integers(
        0, num_levels, size=(observations.shape[0], num_users), dtype=np.int64
    )


def _run_episode(env: SyntheticVREdgeEnv, policy, seed: int) -> tuple[float, bool, bool, int]:
    """Play one episode with a batched policy; return (return, terminated, truncated, steps)."""
    observation, _ = env.reset(seed=seed)
    episode_return, steps = 0.0, 0
    while True:
        action = policy(observation[None])[0]
        observation, reward, terminated, truncated, _ = env.step(action)
        episode_return += reward
        steps += 1
        if terminated or truncated:
            return episode_return, terminated, truncated, steps


def _trajectory(env: SyntheticVREdgeEnv, actions: np.ndarray, seed: int | None = None):
    observations = [env.reset(seed=seed)[0]]
    steps = []
    for action in actions:
        observation, reward, terminated, truncated, info = env.step(action)
        observations.append(observation)
        steps.append((reward, terminated, truncated, info))
        if terminated or truncated:
            break
    return np.stack(observations), steps


# --- spaces ------------------------------------------------------------------------------------


def test_spaces_are_a_flat_float32_box_and_one_level_per_user():
    env = SyntheticVREdgeEnv(num_users=5)
    layout = env.observation_layout

    assert isinstance(env.observation_space, spaces.Box)
    assert env.observation_space.dtype == np.float32
    assert env.observation_space.shape == (5 * layout.per_user_features + layout.link_history_len,)
    assert np.all(env.observation_space.low == 0.0)
    assert np.all(np.isfinite(env.observation_space.high))
    assert np.all(env.observation_space.high <= 10.0)

    assert isinstance(env.action_space, spaces.MultiDiscrete)
    np.testing.assert_array_equal(env.action_space.nvec, [len(DEFAULT_BITRATE_LADDER_MBPS)] * 5)


@pytest.mark.parametrize("mean_bandwidth_per_user_mbps", [2.0, 25.0, 500.0])
def test_observations_stay_inside_the_space_over_many_random_steps(mean_bandwidth_per_user_mbps):
    # Scarce and abundant bandwidth push the rate features against both ends of their bounds.
    env = SyntheticVREdgeEnv(
        num_users=4, seed=3, mean_bandwidth_per_user_mbps=mean_bandwidth_per_user_mbps
    )
    env.action_space.seed(3)
    observation, _ = env.reset()
    for _ in range(1500):
        assert observation.dtype == np.float32
        assert env.observation_space.contains(observation)
        observation, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            observation, _ = env.reset()
    assert env.observation_space.contains(observation)


def test_a_user_taking_most_of_the_link_is_clipped_to_the_rate_bound():
    # Idle neighbours leave most of the link to user 0, whose 400 Mbps stream needs 16 times
    # a typical 25 Mbps share: its measured throughput runs past the observable range.
    env = SyntheticVREdgeEnv(num_users=32, seed=0, bitrate_ladder_mbps=(1.0, 400.0))
    latest_throughput_of_user_0 = env.observation_layout.per_user_features - 1
    env.reset()
    greedy_user_0 = np.zeros(32, dtype=np.int64)
    greedy_user_0[0] = 1
    observed_rates = []
    for _ in range(10):
        observation, *_ = env.step(greedy_user_0)
        assert env.observation_space.contains(observation)
        observed_rates.append(observation[latest_throughput_of_user_0])
    assert max(observed_rates) == env.observation_space.high[latest_throughput_of_user_0]


def test_layout_decodes_the_observation_back_to_physical_units():
    env = SyntheticVREdgeEnv(num_users=3, seed=0)
    observation, _ = env.reset()
    decoded = env.observation_layout.decode(observation)
    np.testing.assert_allclose(decoded.buffer_s, INITIAL_BUFFER_S, rtol=1e-6)
    np.testing.assert_array_equal(decoded.last_level, [0, 0, 0])

    action = np.array([5, 2, 0])
    observation, *_ = env.step(action)
    decoded = env.observation_layout.decode(observation[None])
    np.testing.assert_array_equal(decoded.last_level, action[None])
    assert decoded.throughput_mbps.shape == (1, 3, env.observation_layout.throughput_history_len)
    assert decoded.link_share_mbps.shape == (1, env.observation_layout.link_history_len)
    assert np.all(decoded.link_share_mbps > 0)


# --- seeding and determinism -------------------------------------------------------------------


def test_same_seed_and_actions_give_identical_trajectories():
    actions = np.random.default_rng(11).integers(0, 6, size=(150, 8))
    observations_a, steps_a = _trajectory(SyntheticVREdgeEnv(), actions, seed=7)
    observations_b, steps_b = _trajectory(SyntheticVREdgeEnv(), actions, seed=7)
    np.testing.assert_array_equal(observations_a, observations_b)
    assert steps_a == steps_b


def test_constructor_seed_gives_the_same_first_episode_as_reset_seed():
    actions = np.random.default_rng(5).integers(0, 6, size=(60, 8))
    from_constructor, steps_constructor = _trajectory(SyntheticVREdgeEnv(seed=21), actions)
    from_reset, steps_reset = _trajectory(SyntheticVREdgeEnv(seed=None), actions, seed=21)
    np.testing.assert_array_equal(from_constructor, from_reset)
    assert steps_constructor == steps_reset


def test_constructor_seed_is_only_used_by_the_first_reset():
    env = SyntheticVREdgeEnv(seed=21)
    first, _ = env.reset()
    second, _ = env.reset()
    assert not np.array_equal(first, second)


def test_different_seeds_give_different_trajectories():
    actions = np.random.default_rng(11).integers(0, 6, size=(50, 8))
    observations_a, steps_a = _trajectory(SyntheticVREdgeEnv(), actions, seed=1)
    observations_b, steps_b = _trajectory(SyntheticVREdgeEnv(), actions, seed=2)
    assert not np.array_equal(observations_a[:10], observations_b[:10])
    assert [step[0] for step in steps_a] != [step[0] for step in steps_b]


def test_substeps_are_deterministic_and_change_results_only_slightly():
    actions = np.random.default_rng(4).integers(0, 6, size=(200, 8))
    coarse = _trajectory(SyntheticVREdgeEnv(simulation_substeps=1), actions, seed=9)
    fine = _trajectory(SyntheticVREdgeEnv(simulation_substeps=8), actions, seed=9)
    fine_again = _trajectory(SyntheticVREdgeEnv(simulation_substeps=8), actions, seed=9)

    np.testing.assert_array_equal(fine[0], fine_again[0])
    assert fine[1] == fine_again[1]
    coarse_return = sum(step[0] for step in coarse[1])
    fine_return = sum(step[0] for step in fine[1])
    assert fine_return == pytest.approx(coarse_return, rel=0.05, abs=1.0)


# --- episode ends ------------------------------------------------------------------------------


def test_always_highest_bitrate_on_a_thin_link_terminates_the_session():
    env = SyntheticVREdgeEnv(seed=0, mean_bandwidth_per_user_mbps=10.0, episode_length=200)
    highest = np.full(env.num_users, len(DEFAULT_BITRATE_LADDER_MBPS) - 1)
    env.reset()
    summed_stall_s = 0.0
    for step in range(1, env.episode_length + 1):
        _, _, terminated, truncated, info = env.step(highest)
        summed_stall_s += info["stall_time"] * env.num_users
        if terminated or truncated:
            break
    assert terminated and not truncated
    assert step < env.episode_length
    # Some user's cumulative stall passed the limit, so the users' total did too.
    assert summed_stall_s > env.max_cumulative_stall_s


@pytest.mark.parametrize("seed", EVALUATION_SEEDS)
def test_lowest_bitrate_is_truncated_at_episode_length(seed):
    env = SyntheticVREdgeEnv(episode_length=60)
    _, terminated, truncated, steps = _run_episode(env, LowestBitratePolicy(env.num_users), seed)
    assert truncated and not terminated
    assert steps == 60


def test_random_policy_terminates_some_episodes_and_finishes_others():
    env = SyntheticVREdgeEnv()
    outcomes = [
        _run_episode(env, _random_policy(env.num_users, seed), seed)[1:3] for seed in range(8)
    ]
    assert any(terminated for terminated, _ in outcomes)
    assert any(truncated for _, truncated in outcomes)


def test_step_outside_an_episode_raises():
    env = SyntheticVREdgeEnv(episode_length=1)
    with pytest.raises(RuntimeError, match="call `reset` first"):
        env.step(np.zeros(env.num_users, dtype=np.int64))
    env.reset(seed=0)
    _, _, _, truncated, _ = env.step(np.zeros(env.num_users, dtype=np.int64))
    assert truncated
    with pytest.raises(RuntimeError, match="without an active episode"):
        env.step(np.zeros(env.num_users, dtype=np.int64))


@pytest.mark.parametrize(
    "action, match",
    [
        (np.zeros(3, dtype=np.int64), r"shape \(8,\).*got int64 array of shape \(3,\)"),
        (np.zeros(8), r"integer action.*got float64"),
        (np.full(8, 6), r"must lie in \[0, 5\]"),
        (np.full(8, -1), r"must lie in \[0, 5\]"),
    ],
)
def test_invalid_actions_are_rejected(action, match):
    env = SyntheticVREdgeEnv(seed=0)
    env.reset()
    with pytest.raises(ValueError, match=match):
        env.step(action)


# --- reward and info ---------------------------------------------------------------------------


def test_every_step_info_holds_the_reward_components():
    env = SyntheticVREdgeEnv(seed=1, mean_bandwidth_per_user_mbps=15.0)
    env.action_space.seed(1)
    env.reset()
    saw_stall = saw_switch = False
    for _ in range(300):
        _, reward, terminated, truncated, info = env.step(env.action_space.sample())
        assert set(INFO_KEYS) <= info.keys()
        assert all(type(info[key]) is float for key in INFO_KEYS)
        assert reward == pytest.approx(
            info["quality"] - info["stall_penalty"] - info["smoothness_penalty"], abs=1e-12
        )
        assert 0.0 <= info["quality"] <= 1.0
        assert info["stall_penalty"] == pytest.approx(env.stall_penalty_per_s * info["stall_time"])
        assert info["smoothness_penalty"] >= 0.0
        saw_stall |= info["stall_time"] > 0
        saw_switch |= info["smoothness_penalty"] > 0
        if terminated or truncated:
            env.reset()
    assert saw_stall and saw_switch


def test_steady_lowest_bitrate_scores_zero_quality_and_no_switch_penalty():
    env = SyntheticVREdgeEnv(seed=2)
    env.reset()
    _, reward, _, _, info = env.step(np.zeros(env.num_users, dtype=np.int64))
    assert info["quality"] == 0.0
    assert info["smoothness_penalty"] == 0.0
    assert reward == -info["stall_penalty"]


def test_check_env_passes_without_warnings():
    env = SyntheticVREdgeEnv(seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # Render checks need a registered spec; this env deliberately registers nothing.
        check_env(env.unwrapped, skip_render_check=True)


# --- link sharing ------------------------------------------------------------------------------


def _water_filling_reference(demand: np.ndarray, capacity: float) -> np.ndarray:
    allocation = np.zeros_like(demand)
    unsatisfied = np.ones(demand.size, dtype=bool)
    while unsatisfied.any() and capacity > 1e-12:
        share = capacity / unsatisfied.sum()
        grant = np.where(unsatisfied, np.minimum(demand - allocation, share), 0.0)
        allocation += grant
        capacity -= grant.sum()
        unsatisfied &= demand - allocation > 1e-12
    return allocation


def test_link_is_shared_max_min_fairly():
    rng = np.random.default_rng(0)
    for _ in range(300):
        num_users = int(rng.integers(1, 10))
        demand = rng.uniform(0.0, 50.0, size=num_users) * (rng.random(num_users) < 0.9)
        capacity = float(rng.uniform(0.1, 1.2) * max(demand.sum(), 1.0))
        allocation = _max_min_fair_allocation(demand, capacity)
        np.testing.assert_allclose(allocation, _water_filling_reference(demand, capacity),
                                   atol=1e-9)
        assert np.all(allocation <= demand)
        assert allocation.sum() <= capacity + 1e-9


# --- parameter validation ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_users": 0}, r"`num_users` must be an integer >= 1, got 0"),
        ({"num_users": 2.0}, r"`num_users` must be an integer >= 1, got 2\.0"),
        ({"episode_length": 0}, r"`episode_length` must be an integer >= 1, got 0"),
        ({"simulation_substeps": 0}, r"`simulation_substeps` must be an integer >= 1, got 0"),
        ({"seed": -1}, r"`seed` must be an integer >= 0, got -1"),
        ({"bitrate_ladder_mbps": (10.0, 5.0)}, r"`bitrate_ladder_mbps` .*got \(10\.0, 5\.0\)"),
        ({"bitrate_ladder_mbps": (5.0,)}, r"`bitrate_ladder_mbps` must be at least 2"),
        ({"mean_bandwidth_per_user_mbps": 0.0}, r"`mean_bandwidth_per_user_mbps` .*> 0, got 0\.0"),
        ({"degraded_bandwidth_fraction": 1.5}, r"`degraded_bandwidth_fraction` .*got 1\.5"),
        ({"degraded_bandwidth_fraction": 0.0}, r"`degraded_bandwidth_fraction` .*got 0\.0"),
        ({"max_cumulative_stall_s": -1.0}, r"`max_cumulative_stall_s` .*got -1\.0"),
        ({"stall_penalty_per_s": float("nan")}, r"`stall_penalty_per_s` .*>= 0, got nan"),
        ({"smoothness_penalty_weight": -0.5}, r"`smoothness_penalty_weight` .*got -0\.5"),
    ],
)
def test_invalid_environment_parameters_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SyntheticVREdgeEnv(**kwargs)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"safety_fraction": 0.0}, r"`safety_fraction` must be in \(0, 1\], got 0\.0"),
        ({"safety_fraction": 1.2}, r"`safety_fraction` must be in \(0, 1\], got 1\.2"),
        ({"low_buffer_s": -0.1}, r"`low_buffer_s` must be in \[0, 2\.0\], got -0\.1"),
        ({"prediction_window": 0}, r"`prediction_window` .*\[1, 8\], got 0"),
    ],
)
def test_invalid_heuristic_parameters_are_rejected(kwargs, match):
    layout = SyntheticVREdgeEnv().observation_layout
    with pytest.raises(ValueError, match=match):
        BandwidthShareHeuristic(layout, **kwargs)


def test_invalid_baseline_inputs_are_rejected():
    with pytest.raises(ValueError, match=r"`num_users` must be an integer >= 1, got 0"):
        LowestBitratePolicy(0)
    with pytest.raises(TypeError, match=r"`layout` must be an ObservationLayout"):
        BandwidthShareHeuristic(8)
    env = SyntheticVREdgeEnv(seed=0)
    observation, _ = env.reset()
    heuristic = BandwidthShareHeuristic(env.observation_layout)
    with pytest.raises(ValueError, match=r"shape \[num_envs, 56\], got shape \(56,\)"):
        heuristic(observation)
    with pytest.raises(ValueError, match=r"got shape \(56,\)"):
        LowestBitratePolicy(env.num_users)(observation)


# --- baselines ---------------------------------------------------------------------------------


def test_baselines_return_int64_levels_for_a_batch():
    envs = [SyntheticVREdgeEnv(num_users=3, seed=seed) for seed in range(4)]
    observations = np.stack([env.reset()[0] for env in envs])
    for policy in (LowestBitratePolicy(3), BandwidthShareHeuristic(envs[0].observation_layout)):
        actions = policy(observations)
        assert actions.shape == (4, 3)
        assert actions.dtype == np.int64
        assert all(envs[0].action_space.contains(action) for action in actions)


def test_heuristic_steps_down_when_bandwidth_or_buffer_drops():
    env = SyntheticVREdgeEnv(num_users=2, seed=0)
    layout = env.observation_layout
    observation, _ = env.reset()
    heuristic = BandwidthShareHeuristic(layout, safety_fraction=0.8, low_buffer_s=1.0)

    link_slice = slice(-layout.link_history_len, None)
    rich, thin, thin_buffer = (observation.copy() for _ in range(3))
    rich[link_slice] = 2.0   # 50 Mbps equal share: 0.8 * 50 = 40 -> 30 Mbps level
    thin[link_slice] = 0.6   # 15 Mbps equal share: 0.8 * 15 = 12 -> 10 Mbps level
    thin_buffer[link_slice] = 2.0
    # 0.5 s buffered, half of `low_buffer_s`: 0.5 * 40 = 20 -> 18 Mbps level
    thin_buffer[:: layout.per_user_features][: layout.num_users] = 0.25

    actions = heuristic(np.stack([rich, thin, thin_buffer]))
    np.testing.assert_array_equal(actions[0], [3, 3])
    np.testing.assert_array_equal(actions[1], [1, 1])
    np.testing.assert_array_equal(actions[2], [2, 2])


def test_heuristic_scores_more_than_lowest_and_random_over_fixed_seeds():
    env = SyntheticVREdgeEnv()
    policies = {
        "random": lambda seed: _random_policy(env.num_users, seed),
        "lowest": lambda seed: LowestBitratePolicy(env.num_users),
        "heuristic": lambda seed: BandwidthShareHeuristic(env.observation_layout),
    }
    mean_return = {
        name: np.mean([_run_episode(env, make_policy(seed), seed)[0] for seed in EVALUATION_SEEDS])
        for name, make_policy in policies.items()
    }
    assert mean_return["random"] < mean_return["lowest"] < mean_return["heuristic"]


def test_make_env_passes_parameters_through():
    env = make_env(num_users=3, seed=4, episode_length=10)
    assert isinstance(env, SyntheticVREdgeEnv)
    assert (env.num_users, env.episode_length) == (3, 10)
    np.testing.assert_array_equal(env.reset()[0], SyntheticVREdgeEnv(3).reset(seed=4)[0])


def test_an_env_pickled_mid_episode_continues_identically():
    env = SyntheticVREdgeEnv(num_users=3, seed=4)
    env.reset()
    actions = np.random.default_rng(0).integers(0, 6, size=(20, 3))
    for action in actions[:5]:
        env.step(action)
    clone = pickle.loads(pickle.dumps(env))
    for action in actions[5:]:
        original_step, cloned_step = env.step(action), clone.step(action)
        np.testing.assert_array_equal(original_step[0], cloned_step[0])
        assert original_step[1:] == cloned_step[1:]
