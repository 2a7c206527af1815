"""Behaviour of the synthetic VR edge environment, its QoE reports and its baseline controllers."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env

from examples.vr_edge.baselines import BASELINES, ConstantLevel, DeadlineRule, ThroughputRule, load_tuned, tuned_baselines
from examples.vr_edge.episodes import QOE_METRICS, play_episodes
from examples.vr_edge.synthetic_env import (
    FEATURES,
    ObservationLayout,
    SyntheticVREdgeEnv,
    CHANNEL_MOMENTUM,
    CHANNEL_RESTORING,
    MOTION_TO_PHOTON_BUDGET_MS,
    THROUGHPUT_HISTORY_LEN,
    _channel_innovation,
    _max_min_fair_allocation,
    make_env,
)
from examples.vr_edge.traces import TRACE_SPLITS, jittered_regime

NUM_LEVELS = 6


def _random_actions(num_users: int, steps: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, NUM_LEVELS, size=(steps, num_users))


def _trajectory(env: SyntheticVREdgeEnv, actions: np.ndarray, seed: int | None = None):
    observations = [env.reset(seed=seed)[0]]
    steps = []
    for action in actions:
        observation, reward, terminated, truncated, info = env.step(action)
        observations.append(observation)
        steps.append((reward, terminated, truncated, {key: info[key] for key in info if np.isscalar(info[key])}))
        if terminated or truncated:
            break
    return np.stack(observations), steps


# --- spaces and observations -----------------------------------------------------------------


def test_spaces_are_a_flat_float32_box_and_one_level_per_user():
    env = SyntheticVREdgeEnv(num_users=5)
    assert env.observation_space == spaces.Box(0.0, 5.0, shape=(5 * len(FEATURES) + 1,), dtype=np.float32)
    assert env.action_space == spaces.MultiDiscrete([NUM_LEVELS] * 5)
    assert env.observation_layout.size == env.observation_space.shape[0]


def test_observations_stay_inside_the_space_and_empty_slots_read_zero():
    env = SyntheticVREdgeEnv(num_users=8, episode_length=100)
    layout = env.observation_layout
    saw_empty = False
    for seed in range(4):
        observations, _ = _trajectory(env, _random_actions(8, 100, seed), seed=seed)
        assert all(env.observation_space.contains(observation) for observation in observations)
        per_user = layout.per_user(observations)
        empty = per_user[..., layout.feature("active")] == 0
        saw_empty |= bool(empty.any())
        assert np.all(per_user[empty] == 0)
        np.testing.assert_allclose(observations[:, -1], (~empty).mean(axis=1), atol=1e-6)
    assert saw_empty


def test_layout_rejects_observations_of_another_size():
    size = 4 * len(FEATURES) + 1
    with pytest.raises(ValueError, match=rf"last dimension of {size} \(4 users\), got shape \(2, {size - 1}\)"):
        ObservationLayout(4).per_user(np.zeros((2, size - 1)))


def test_the_observation_holds_each_users_throughput_history_oldest_first():
    env = SyntheticVREdgeEnv(num_users=8, seed=6)
    layout = env.observation_layout
    observations, _ = _trajectory(env, _random_actions(8, 60, seed=2))
    users = layout.per_user(observations)
    present = users[..., layout.feature("active")] == 1
    first, latest = layout.feature(f"throughput_{THROUGHPUT_HISTORY_LEN}"), layout.feature("throughput_1")
    assert latest - first == THROUGHPUT_HISTORY_LEN - 1 >= 7
    history = users[..., first : latest + 1]
    checked = 0
    for t in range(THROUGHPUT_HISTORY_LEN, len(observations)):
        # A user present for the whole window: lag k at step t is the newest sample of step t - k + 1.
        stayed = present[t - THROUGHPUT_HISTORY_LEN + 1 : t + 1].all(axis=0)
        for lag in range(1, THROUGHPUT_HISTORY_LEN + 1):
            np.testing.assert_array_equal(history[t, stayed, -lag], history[t - lag + 1, stayed, -1])
        checked += int(stayed.sum())
    assert checked > 100


# --- seeding ---------------------------------------------------------------------------------


def test_same_seed_and_actions_give_identical_trajectories():
    actions = _random_actions(4, 60, seed=0)
    first = _trajectory(SyntheticVREdgeEnv(num_users=4), actions, seed=11)
    second = _trajectory(SyntheticVREdgeEnv(num_users=4), actions, seed=11)
    np.testing.assert_array_equal(first[0], second[0])
    assert first[1] == second[1]
    other = _trajectory(SyntheticVREdgeEnv(num_users=4), actions, seed=12)
    assert not np.array_equal(first[0][:5], other[0][:5])


def test_constructor_seed_is_used_by_the_first_reset_only():
    env = SyntheticVREdgeEnv(num_users=3, seed=4)
    first = env.reset()[0]
    np.testing.assert_array_equal(first, SyntheticVREdgeEnv(num_users=3).reset(seed=4)[0])
    env.step(np.zeros(3, dtype=np.int64))
    # A reset without a seed continues the generator instead of replaying seed 4.
    second = env.reset()[0]
    assert not np.array_equal(second, first)


def test_substeps_are_deterministic_and_change_results():
    actions = np.ones((200, 8), dtype=np.int64)
    returns = {}
    for substeps in (1, 4):
        _, steps = _trajectory(SyntheticVREdgeEnv(simulation_substeps=substeps), actions, seed=5)
        _, again = _trajectory(SyntheticVREdgeEnv(simulation_substeps=substeps), actions, seed=5)
        assert steps == again
        returns[substeps] = sum(step[0] for step in steps)
    # Finer intervals let a queue built early in a step delay the rest of it, so results move.
    assert returns[1] != returns[4]


def assert_pickled_mid_episode_continues_identically(env, actions) -> None:
    """Step ``env`` (already reset) five times, pickle it, and step both with the rest of ``actions``."""
    for action in actions[:5]:
        env.step(action)
    clone = pickle.loads(pickle.dumps(env))
    for action in actions[5:]:
        original, cloned = env.step(action), clone.step(action)
        np.testing.assert_array_equal(original[0], cloned[0])
        assert original[1:4] == cloned[1:4]


def test_an_env_pickled_mid_episode_continues_identically():
    env = SyntheticVREdgeEnv(num_users=3, seed=4)
    env.reset()
    assert_pickled_mid_episode_continues_identically(env, _random_actions(3, 30, seed=0))


# --- traces, users, episodes -------------------------------------------------------------------


@pytest.mark.parametrize("split", sorted(TRACE_SPLITS))
def test_each_episode_draws_a_regime_of_its_split_from_the_seed(split):
    env = SyntheticVREdgeEnv(traces=split)
    names = {env.reset(seed=seed)[1]["regime"] for seed in range(40)}
    assert names == {regime.name for regime in TRACE_SPLITS[split]}
    assert env.reset(seed=3)[1] == env.reset(seed=3)[1]


def test_train_and_test_regimes_differ():
    train, test = TRACE_SPLITS["train"], TRACE_SPLITS["test"]
    assert not {regime.name for regime in train} & {regime.name for regime in test}
    assert all(a.mean_capacity_mbps != b.mean_capacity_mbps for a, b in zip(train, test))


def test_jittered_regimes_stay_inside_the_spread_and_follow_the_rng():
    regime = TRACE_SPLITS["train"][2]
    spread = 0.25
    jittered = [jittered_regime(regime, spread, np.random.default_rng(seed)) for seed in range(200)]
    # (value, base) pairs of every scaled quantity, as the docstring lists them.
    pairs = [
        (np.array([j.mean_capacity_mbps for j in jittered]), regime.mean_capacity_mbps),
        (np.array([j.log_std for j in jittered]), regime.log_std),
        (np.array([1.0 - j.ar_coefficient for j in jittered]), 1.0 - regime.ar_coefficient),
        (np.array([j.degraded_enter_probability for j in jittered]), regime.degraded_enter_probability),
        (np.array([j.degraded_exit_probability for j in jittered]), regime.degraded_exit_probability),
        (np.array([1.0 - j.degraded_fraction for j in jittered]), 1.0 - regime.degraded_fraction),
    ]
    for values, base in pairs:
        ratios = values / base
        assert ratios.min() >= 1.0 / (1.0 + spread) - 1e-12 and ratios.max() <= 1.0 + spread + 1e-12
        # The factors cover the range on both sides rather than sitting at one value.
        assert ratios.min() < 0.85 and ratios.max() > 1.15
    assert {j.name for j in jittered} == {regime.name}
    same = jittered_regime(regime, spread, np.random.default_rng(3))
    assert same == jittered[3]
    assert jittered_regime(regime, 0.0, np.random.default_rng(0)) == regime
    # Exactly six draws, whatever the spread: the rest of the episode's draws do not move.
    for any_spread in (0.0, spread, 3.0):
        used, reference = np.random.default_rng(9), np.random.default_rng(9)
        jittered_regime(regime, any_spread, used)
        reference.uniform(size=6)
        assert used.random() == reference.random()
    # A spread far past the usual keeps every parameter meaningful.
    for seed in range(200):
        wild = jittered_regime(regime, 20.0, np.random.default_rng(seed))
        assert 0.0 <= wild.ar_coefficient <= 0.995 and 0.05 <= wild.degraded_fraction <= 1.0
        assert 0.0 <= wild.degraded_enter_probability <= 1.0 and 0.0 <= wild.degraded_exit_probability <= 1.0
        assert wild.mean_capacity_mbps > 0 and wild.log_std > 0
    for bad in (-0.1, float("nan")):
        with pytest.raises(ValueError, match=r"`spread` must be a finite number >= 0, got"):
            jittered_regime(regime, bad, np.random.default_rng(0))


def test_trace_jitter_zero_plays_the_split_unchanged_and_jitter_is_seeded():
    actions = _random_actions(8, 60, seed=5)
    plain, _ = _trajectory(SyntheticVREdgeEnv(traces="test"), actions, seed=11)
    unjittered, _ = _trajectory(SyntheticVREdgeEnv(traces="test", trace_jitter=0.0), actions, seed=11)
    jittered, _ = _trajectory(SyntheticVREdgeEnv(traces="test", trace_jitter=0.5), actions, seed=11)
    again, _ = _trajectory(SyntheticVREdgeEnv(traces="test", trace_jitter=0.5), actions, seed=11)
    np.testing.assert_array_equal(plain, unjittered)
    np.testing.assert_array_equal(jittered, again)
    assert not np.array_equal(plain, jittered)
    env = SyntheticVREdgeEnv(traces="train", trace_jitter=0.5)
    assert {env.reset(seed=seed)[1]["regime"] for seed in range(40)} == {r.name for r in TRACE_SPLITS["train"]}


def test_users_join_and_leave_during_episodes():
    env = SyntheticVREdgeEnv(num_users=8, episode_length=200)
    counts = []
    for seed in range(3):
        env.reset(seed=seed)
        for _ in range(200):
            _, _, terminated, truncated, info = env.step(np.zeros(8, dtype=np.int64))
            counts.append(info["active_users"])
            if terminated or truncated:
                break
    assert len(set(counts)) > 2


def test_lowest_level_runs_to_the_time_limit_and_highest_level_fails_the_session():
    env = SyntheticVREdgeEnv(episode_length=200)
    _, lowest = _trajectory(env, np.zeros((200, 8), dtype=np.int64), seed=1)
    assert len(lowest) == 200 and lowest[-1][2] and not lowest[-1][1]
    _, highest = _trajectory(env, np.full((200, 8), 5), seed=1)
    assert len(highest) < 200 and highest[-1][1] and not highest[-1][2]


def test_step_outside_an_episode_raises():
    env = SyntheticVREdgeEnv(num_users=2, episode_length=1)
    with pytest.raises(RuntimeError, match="call `reset` first"):
        env.step(np.zeros(2, dtype=np.int64))
    env.reset(seed=0)
    env.step(np.zeros(2, dtype=np.int64))
    with pytest.raises(RuntimeError, match="without an active episode"):
        env.step(np.zeros(2, dtype=np.int64))


@pytest.mark.parametrize(
    "action, match",
    [
        (np.zeros(3, dtype=np.int64), r"shape \(2,\), one quality level per user, got int64 array of shape \(3,\)"),
        (np.zeros(2, dtype=np.float32), r"got float32 array"),
        (np.array([0, 6]), r"levels must lie in \[0, 5\]"),
        (np.array([-1, 0]), r"levels must lie in \[0, 5\]"),
    ],
)
def test_invalid_actions_are_rejected(action, match):
    env = SyntheticVREdgeEnv(num_users=2)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=match):
        env.step(action)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_users": 0}, r"`num_users` must be an integer >= 1, got 0"),
        ({"traces": "field"}, r"`traces` must be one of \['test', 'train'\], got 'field'"),
        ({"drop_penalty": -1.0}, r"`drop_penalty` must be a finite number >= 0, got -1.0"),
        ({"max_cumulative_stall_s": 0.0}, r"`max_cumulative_stall_s` must be > 0"),
        ({"simulation_substeps": 0}, r"`simulation_substeps` must be an integer >= 1"),
        ({"trace_jitter": -0.5}, r"`trace_jitter` must be a finite number >= 0, got -0.5"),
    ],
)
def test_invalid_environment_parameters_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SyntheticVREdgeEnv(**kwargs)


def test_check_env_passes_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # Render checks need a registered spec; this env deliberately registers nothing.
        check_env(SyntheticVREdgeEnv(seed=0).unwrapped, skip_render_check=True)


def test_make_env_passes_parameters_through():
    env = make_env(num_users=3, seed=4, episode_length=10, traces="test")
    assert (env.num_users, env.episode_length, env.traces) == (3, 10, "test")


# --- the reward ------------------------------------------------------------------------------


def test_reward_is_displayed_quality_minus_the_penalties_in_info():
    env = SyntheticVREdgeEnv()
    env.reset(seed=3)
    for action in _random_actions(8, 50, seed=1):
        _, reward, terminated, truncated, info = env.step(action)
        expected = info["quality"] - info["late_penalty"] - info["drop_penalty"] - info["switch_penalty"]
        assert reward == pytest.approx(expected, abs=1e-12)
        assert 0.0 <= info["late_rate"] <= 1.0 and 0.0 <= info["drop_rate"] <= 1.0
        if terminated or truncated:
            break


@pytest.mark.parametrize("level", [0, 3, 5])
def test_the_first_step_pays_no_switching_penalty(level):
    env = SyntheticVREdgeEnv()
    env.reset(seed=0)
    _, _, _, _, info = env.step(np.full(8, level))
    assert info["switch_penalty"] == 0.0 and info["switches"] == 0.0
    _, _, _, _, info = env.step(np.full(8, (level + 1) % NUM_LEVELS))
    assert info["switch_penalty"] > 0.0 and info["switches"] == info["active_users"]


def test_dropped_frames_earn_no_quality():
    env = SyntheticVREdgeEnv(max_cumulative_stall_s=100.0)
    env.reset(seed=2)
    fully_dropped = 0
    for _ in range(40):
        _, _, _, _, info = env.step(np.full(8, 5))
        present = info["users_present"]
        if info["drop_rate"] == 1.0:
            fully_dropped += 1
            assert info["quality"] == 0.0
            assert np.all(info["user_quality"][present] == 0.0)
    assert fully_dropped > 0


def test_info_marks_the_users_present_and_empty_slots_show_no_quality():
    env = SyntheticVREdgeEnv()
    observation, _ = env.reset(seed=0)
    present = env.observation_layout.per_user(observation)[:, 0] == 1
    assert not present.all()
    _, _, _, _, info = env.step(np.ones(8, dtype=np.int64))
    assert np.array_equal(info["users_present"], present)
    assert np.all(info["user_quality"][~present] == 0.0) and np.all(info["user_quality"][present] > 0.0)
    latency = info["frame_latency_ms"]
    assert latency.shape == (8, 8) and np.all(latency[~present] == 0.0) and np.all(latency[present] > 0.0)


# --- the sender queue and the channel -------------------------------------------------------


def _overloaded_env():
    """An env just after a step at the top level left some user's sender a backlog."""
    env = SyntheticVREdgeEnv(max_cumulative_stall_s=100.0)
    observation, _ = env.reset(seed=2)
    layout = env.observation_layout
    for _ in range(50):
        observation = env.step(np.full(8, 5))[0]
        queue = layout.per_user(observation)[:, layout.feature("queue_delay")]
        if queue.max() > 0.2:
            return env, int(queue.argmax())
    raise AssertionError("no backlog built up at the top level")


def test_a_backlog_left_by_an_overshoot_delays_the_next_steps_frames():
    env, user = _overloaded_env()
    layout = env.observation_layout
    # The same state and random draws without the backlog: only the carried queue differs.
    drained = pickle.loads(pickle.dumps(env))
    drained._backlog_mbit[:] = 0.0
    lowest = np.zeros(8, dtype=np.int64)
    carried, fresh = env.step(lowest), drained.step(lowest)
    mean_latency = layout.feature("mean_latency")
    assert layout.per_user(carried[0])[user, mean_latency] > layout.per_user(fresh[0])[user, mean_latency]
    assert carried[1] < fresh[1]
    assert carried[4]["late_rate"] + carried[4]["drop_rate"] > fresh[4]["late_rate"] + fresh[4]["drop_rate"]


def test_the_backlog_drains_and_never_holds_frames_past_the_drop_threshold():
    env, _ = _overloaded_env()
    layout = env.observation_layout
    drop_after_ms = MOTION_TO_PHOTON_BUDGET_MS + 1e3 / np.asarray(env._frame_rate)
    for _ in range(3):
        observation = env.step(np.zeros(8, dtype=np.int64))[0]
        queued_ms = layout.per_user(observation)[:, layout.feature("queue_delay")] * MOTION_TO_PHOTON_BUDGET_MS
        assert np.all(queued_ms <= drop_after_ms + 1e-9)
    # At the lowest level the cell has room to spare, so the queue empties.
    assert np.all(queued_ms == 0.0)


def test_the_slow_channel_has_the_stationary_spread_asked_for_and_persistent_trends():
    rng = np.random.default_rng(0)
    log_std = 0.3
    innovation = float(_channel_innovation(log_std))
    deviation = velocity = 0.0
    path = np.empty(100_000)
    for step, noise in enumerate(rng.standard_normal(path.size)):
        velocity = CHANNEL_MOMENTUM * velocity - CHANNEL_RESTORING * deviation + innovation * noise
        deviation += velocity
        path[step] = deviation
    assert np.std(path[1000:]) == pytest.approx(log_std, rel=0.1)
    # A user whose gain fell over the last step will most likely keep losing gain: the trend
    # in a throughput history predicts the next samples.
    changes = np.diff(path)
    assert np.corrcoef(changes[:-1], changes[1:])[0, 1] > 0.8


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


def test_airtime_is_shared_max_min_fairly():
    rng = np.random.default_rng(0)
    for _ in range(200):
        num_users = int(rng.integers(1, 10))
        demand = rng.uniform(0.0, 0.5, size=num_users) * (rng.random(num_users) < 0.9)
        capacity = float(rng.uniform(0.1, 1.2) * max(demand.sum(), 0.01))
        allocation = _max_min_fair_allocation(demand, capacity)
        np.testing.assert_allclose(allocation, _water_filling_reference(demand, capacity), atol=1e-9)
        assert allocation.sum() <= capacity + 1e-9


# --- baselines and QoE -----------------------------------------------------------------------


def test_every_baseline_has_tuned_parameters_and_returns_valid_levels_for_a_batch():
    env = SyntheticVREdgeEnv()
    assert set(load_tuned()) == set(BASELINES)
    observations = np.stack([env.reset(seed=seed)[0] for seed in range(3)])
    for _ in range(3):
        for policy in tuned_baselines(env.observation_layout).values():
            levels = policy(observations)
            assert levels.dtype == np.int64 and levels.shape == (3, 8)
            assert levels.min() >= 0 and levels.max() < NUM_LEVELS
        observations[0] = env.step(np.ones(8, dtype=np.int64))[0]


def test_baselines_validate_their_inputs():
    layout = ObservationLayout(8)
    with pytest.raises(TypeError, match="`layout` must be an ObservationLayout"):
        ThroughputRule("layout")
    with pytest.raises(ValueError, match=r"`safety` must be in \(0, 1.0\], got 1.5"):
        ThroughputRule(layout, safety=1.5)
    with pytest.raises(ValueError, match=r"`level` must be an integer in \[0, 5\], got 6"):
        ConstantLevel(layout, level=6)
    with pytest.raises(ValueError, match=r"add a leading env dimension"):
        DeadlineRule(layout)(np.zeros(layout.size))


def _two_users_at_level_3():
    """A one-env observation of two present users (72 fps, resolution 1, complexity 1) last at level 3.

    Returns the layout, the observation and its `[1, users, features]` view to fill in.
    """
    layout = ObservationLayout(2)
    observation = np.zeros((1, layout.size))
    users = layout.per_user(observation)
    users[0, :, layout.feature("active")] = 1.0
    users[0, :, layout.feature("frame_rate")] = 0.8
    users[0, :, layout.feature("resolution")] = 0.66
    users[0, :, layout.feature("complexity")] = 0.5
    users[0, :, layout.feature("last_level")] = 0.6  # level 3
    return layout, observation, users


def test_deadline_rule_steps_down_after_late_frames_and_up_with_headroom():
    layout, observation, users = _two_users_at_level_3()
    users[0, :, layout.feature("throughput_1")] = 1.0
    users[0, 0, layout.feature("late_rate")] = 0.5
    users[0, 1, layout.feature("max_latency")] = 0.3
    assert DeadlineRule(layout, late_threshold=0.1, headroom=0.7)(observation).tolist() == [[2, 4]]


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_the_stall_guard_sends_a_user_near_failure_to_the_lowest_level(name):
    layout, observation, users = _two_users_at_level_3()
    first = layout.feature(f"throughput_{THROUGHPUT_HISTORY_LEN}")
    users[0, :, first : first + THROUGHPUT_HISTORY_LEN] = 2.0  # 400 Mbps: room for any level
    users[0, :, layout.feature("max_latency")] = 0.3
    users[0, 0, layout.feature("frozen_share")] = 0.6
    # Exactly at the guard does not fire: only a share past it does.
    users[0, 1, layout.feature("frozen_share")] = 0.5
    kwargs = {"level": 4} if name == "constant level" else {}
    unguarded = BASELINES[name](layout, **kwargs)(observation)[0]
    guarded = BASELINES[name](layout, stall_guard=0.5, **kwargs)(observation)[0]
    assert unguarded[0] > 0 and unguarded[1] > 0, "the case needs a controller that would not pick level 0 anyway"
    assert guarded.tolist() == [0, unguarded[1]]
    # The default guard (1) never fires while a session is alive, even at a share of 1.
    users[0, :, layout.feature("frozen_share")] = 1.0
    assert BASELINES[name](layout, **kwargs)(observation)[0].tolist() == unguarded.tolist()
    assert BASELINES[name](layout, stall_guard=0.5, **kwargs).params()["stall_guard"] == 0.5
    with pytest.raises(ValueError, match=r"`stall_guard` must be in \(0, 1.0\], got 0"):
        BASELINES[name](layout, stall_guard=0, **kwargs)


def test_tuning_tries_the_stall_guard_on_the_grids_leaders_and_keeps_the_best(monkeypatch):
    from examples.vr_edge import tune_baselines
    from examples.vr_edge.tune_baselines import GRIDS, GUARD_CANDIDATES, STALL_GUARD_GRID, guard_leaders, tune

    played_with = []

    def recording_play_episodes(policy, seeds, env_kwargs):
        played_with.append(dict(env_kwargs))
        return play_episodes(policy, seeds, env_kwargs)

    monkeypatch.setattr(tune_baselines, "play_episodes", recording_play_episodes)
    result = tune(episodes=1, first_seed=0, names=["constant level"], num_users=2, trace_jitter=0.3)
    scores = result["scores"]["constant level"]
    grid_size = len(GRIDS["constant level"]["level"])
    grid_scores, guard_scores = scores[:grid_size], scores[grid_size:]
    leaders = sorted(grid_scores, key=lambda entry: -entry["mean_return"])[:GUARD_CANDIDATES]
    assert [entry["params"] for entry in guard_scores] == [
        {**leader["params"], "stall_guard": guard} for leader in leaders for guard in STALL_GUARD_GRID[:-1]
    ]
    best = max(scores, key=lambda entry: entry["mean_return"])
    assert result["tuned"]["constant level"] == best["params"]
    # Every point was played on the jittered train traces it was asked for.
    assert len(played_with) == len(scores)
    assert all(kwargs["traces"] == "train" and kwargs["trace_jitter"] == 0.3 for kwargs in played_with)
    # Points that tie exactly count once among the leaders.
    tied = [{"params": {"x": index}, "mean_return": 5.0 if index < 4 else 10.0 + index} for index in range(9)]
    assert [entry["params"]["x"] for entry in guard_leaders(tied)] == [8, 7, 6, 5, 4, 0][:GUARD_CANDIDATES]


def test_the_observation_reports_each_sessions_frozen_share_of_the_failure_budget():
    env = SyntheticVREdgeEnv(num_users=4, max_cumulative_stall_s=2.0)
    observation, _ = env.reset(seed=1)
    frozen = env.observation_layout.feature("frozen_share")
    users = env.observation_layout.per_user
    assert np.all(users(observation)[:, frozen] == 0.0)
    shares = []
    for _ in range(200):
        observation, _, terminated, truncated, _ = env.step(np.full(4, 5))
        np.testing.assert_allclose(
            users(observation)[:, frozen], np.minimum(env._cumulative_stall_s / 2.0, 5.0) * env._present, rtol=1e-6
        )
        shares.append(users(observation)[:, frozen].max())
        if terminated or truncated:
            break
    # The top level overloads the cell: frozen time builds up until a session fails, on the step
    # its share passes 1.
    assert terminated and shares[-1] > 1.0 and 0.5 < max(shares[:-1]) <= 1.0


def test_throughput_rule_extrapolates_a_rising_trend_only_when_asked():
    layout = ObservationLayout(1)
    observation = np.zeros((1, layout.size))
    users = layout.per_user(observation)
    users[0, 0, layout.feature("active")] = 1.0
    users[0, 0, layout.feature("frame_rate")] = 0.8
    users[0, 0, layout.feature("resolution")] = 0.66
    users[0, 0, layout.feature("complexity")] = 0.5
    first = layout.feature(f"throughput_{THROUGHPUT_HISTORY_LEN}")
    users[0, 0, first : first + THROUGHPUT_HISTORY_LEN] = np.geomspace(0.05, 0.4, THROUGHPUT_HISTORY_LEN)
    flat = ThroughputRule(layout, safety=0.5, window=8)(observation)[0, 0]
    rising = ThroughputRule(layout, safety=0.5, window=8, trend=1.0)(observation)[0, 0]
    assert rising > flat


def test_qoe_records_hold_every_metric_in_range():
    records = play_episodes(ConstantLevel(ObservationLayout(8), level=1), [0, 1], {"episode_length": 30})
    for record in records:
        assert set(record) == {"return", "length", *QOE_METRICS}
        assert record["length"] == 30
        assert 0.0 <= record["quality"] <= 1.0 and 0.0 < record["fairness"] <= 1.0
        assert record["latency_p50_ms"] <= record["latency_p95_ms"] <= record["latency_p99_ms"]
    assert records[0] != records[1]
