"""The env's variants (late and noisy client reports, a keyframe per level switch): each changes
what it stands for and nothing else, the defaults replay the recorded results, and seeding stays
exact with every option on."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from examples.vr_edge.baselines import tuned_baselines
from examples.vr_edge.clairvoyant import play_clairvoyant, present_conditions, true_conditions
from examples.vr_edge.controller import DecodedObservation
from examples.vr_edge.env_variants import CAUSAL_CONTROLLERS, CLAIRVOYANT, add_changes_from_today, measure_variant
from examples.vr_edge.episodes import play_episodes
from examples.vr_edge.joint_model import JointRewardModel
from examples.vr_edge.synthetic_env import OBSERVED_RATIO_CLIP, THROUGHPUT_HISTORY_LEN, StreamModel, SyntheticVREdgeEnv
from tests.examples.test_vr_edge_env import assert_pickled_mid_episode_continues_identically

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "vr-edge-results.json"
CLIENT_FEATURES = (
    *(f"throughput_{lag}" for lag in range(THROUGHPUT_HISTORY_LEN, 0, -1)),
    "mean_latency", "max_latency", "late_rate", "drop_rate", "frozen_share",
)
SERVER_FEATURES = ("active", "frame_rate", "resolution", "complexity", "last_level", "render_time", "queue_delay")
EVERY_OPTION = {"report_delay_steps": 2, "report_noise": 0.2, "keyframe_extra_frames": 3.0}


def _play(env: SyntheticVREdgeEnv, actions: np.ndarray, seed: int):
    """Observations `[steps + 1, size]`, rewards and per-step presence until the episode ends."""
    observations, rewards, present = [env.reset(seed=seed)[0]], [], []
    for action in actions:
        observation, reward, terminated, truncated, info = env.step(action)
        observations.append(observation)
        rewards.append(reward)
        present.append(info["users_present"])
        if terminated or truncated:
            break
    return np.stack(observations), np.array(rewards), np.array(present)


def _columns(env: SyntheticVREdgeEnv, observations: np.ndarray, names) -> np.ndarray:
    layout = env.observation_layout
    return layout.per_user(observations)[..., [layout.feature(name) for name in names]]


def test_the_defaults_replay_the_recorded_comparison_exactly():
    recorded = json.loads(RESULTS.read_text())
    seeds = [recorded["first_seed"] + offset for offset in range(3)]
    controllers = tuned_baselines(SyntheticVREdgeEnv(**recorded["env_kwargs"]).observation_layout)
    for name in ("constant level", "deadline rule"):
        returns = [record["return"] for record in play_episodes(controllers[name], seeds, recorded["env_kwargs"])]
        assert returns == recorded["per_episode_returns"][name][:3], name


@pytest.mark.parametrize("delay", [1, 3])
def test_a_client_report_arrives_delay_steps_after_it_was_measured(delay):
    actions = np.random.default_rng(0).integers(0, 3, size=(150, 8))
    prompt = SyntheticVREdgeEnv(traces="test")
    late = SyntheticVREdgeEnv(traces="test", report_delay_steps=delay)
    prompt_obs, prompt_rewards, present = _play(prompt, actions, seed=21)
    late_obs, late_rewards, _ = _play(late, actions, seed=21)
    # Only what the server observes changes, never what happens.
    np.testing.assert_array_equal(late_rewards, prompt_rewards)
    np.testing.assert_array_equal(_columns(late, late_obs, SERVER_FEATURES), _columns(prompt, prompt_obs, SERVER_FEATURES))
    late_client, prompt_client = _columns(late, late_obs, CLIENT_FEATURES), _columns(prompt, prompt_obs, CLIENT_FEATURES)
    observed = _columns(late, late_obs, ["active"])[..., 0] > 0.5
    compared = 0
    for step in range(delay + 1, len(late_obs)):
        # Users present from the step measured until its report is observed (a slot that empties
        # and fills again holds another user, whose reports start over).
        stayed = present[step - delay - 1 : step].all(axis=0) & observed[step]
        np.testing.assert_array_equal(late_client[step, stayed], prompt_client[step - delay, stayed])
        compared += int(stayed.sum())
    assert compared > 500
    # Until the first report arrives the server has no throughput sample of anyone.
    latest = _columns(late, late_obs, ["throughput_1"])[..., 0]
    assert np.all(latest[: delay + 1] == 0.0)
    assert np.all(latest[delay + 1][present[0]] > 0.0)


def test_report_noise_is_a_mean_one_factor_on_the_throughput_samples_only():
    actions = np.zeros((200, 8), dtype=np.int64)
    clean = SyntheticVREdgeEnv(traces="test")
    noisy = SyntheticVREdgeEnv(traces="test", report_noise=0.2)
    clean_obs, clean_rewards, _ = _play(clean, actions, seed=3)
    noisy_obs, noisy_rewards, _ = _play(noisy, actions, seed=3)
    # The noise has its own generator: the seed's traces, channels and frames are unchanged.
    np.testing.assert_array_equal(noisy_rewards, clean_rewards)
    others = [*SERVER_FEATURES, "mean_latency", "max_latency", "late_rate", "drop_rate", "frozen_share"]
    np.testing.assert_array_equal(_columns(noisy, noisy_obs, others), _columns(clean, clean_obs, others))
    clean_rate = _columns(clean, clean_obs, ["throughput_1"])[..., 0].astype(np.float64)
    noisy_rate = _columns(noisy, noisy_obs, ["throughput_1"])[..., 0].astype(np.float64)
    sampled = (clean_rate > 0) & (clean_rate < 0.8 * OBSERVED_RATIO_CLIP) & (noisy_rate < OBSERVED_RATIO_CLIP)
    ratio = noisy_rate[sampled] / clean_rate[sampled]
    assert ratio.size > 1000
    assert np.log(ratio).std() == pytest.approx(0.2, rel=0.1)
    assert ratio.mean() == pytest.approx(1.0, abs=0.03)


def _held_then_switched(keyframe_extra_frames: float, user: int, switch_step: int):
    env = SyntheticVREdgeEnv(traces="test", keyframe_extra_frames=keyframe_extra_frames)
    observation, _ = env.reset(seed=8)
    steps = []
    for step in range(switch_step + 1):
        levels = np.ones(8, dtype=np.int64)
        if step == switch_step:
            levels[user] = 2
        steps.append(env.step(levels))
    return env, steps


def test_a_keyframe_costs_only_when_the_level_changes():
    probe = SyntheticVREdgeEnv(traces="test")
    probe.reset(seed=8)
    user = int(np.flatnonzero(probe._active)[0])
    switch_step = 6
    runs = {extra: _held_then_switched(extra, user, switch_step) for extra in (0.0, 2.0, 4.0)}
    layout = probe.observation_layout
    mean_latency = layout.feature("mean_latency")
    # The first step (no previous level) and steps that hold every level cost nothing extra.
    for step in range(switch_step):
        outcomes = [runs[extra][1][step] for extra in runs]
        for outcome in outcomes[1:]:
            np.testing.assert_array_equal(outcome[0], outcomes[0][0])
            assert outcome[1] == outcomes[0][1]
    # The switch: the keyframe's bits go out first, so the user's frames wait longer, more with
    # a larger keyframe, and the step's reward falls.
    switched = {extra: runs[extra][1][switch_step] for extra in runs}
    assert all(outcome[4]["switches"] == 1.0 for outcome in switched.values())
    latency = {extra: layout.per_user(outcome[0])[user, mean_latency] for extra, outcome in switched.items()}
    assert latency[0.0] < latency[2.0] < latency[4.0]
    assert switched[4.0][1] < switched[0.0][1]


def test_seeding_stays_exact_with_every_option_on():
    actions = np.random.default_rng(1).integers(0, 4, size=(80, 8))
    first = _play(SyntheticVREdgeEnv(traces="test", **EVERY_OPTION), actions, seed=5)
    second = _play(SyntheticVREdgeEnv(traces="test", **EVERY_OPTION), actions, seed=5)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    other = _play(SyntheticVREdgeEnv(traces="test", **EVERY_OPTION), actions, seed=6)
    assert not np.array_equal(first[0][:5], other[0][:5])


def test_an_env_with_every_option_pickled_mid_episode_continues_identically():
    env = SyntheticVREdgeEnv(traces="test", **EVERY_OPTION)
    env.reset(seed=4)
    assert_pickled_mid_episode_continues_identically(env, np.random.default_rng(2).integers(0, 3, size=(30, 8)))


def test_check_env_passes_with_every_option_on():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(SyntheticVREdgeEnv(seed=0, **EVERY_OPTION).unwrapped, skip_render_check=True)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"report_delay_steps": -1}, r"`report_delay_steps` must be an integer >= 0, got -1"),
        ({"report_delay_steps": 1.5}, r"`report_delay_steps` must be an integer >= 0, got 1.5"),
        ({"report_noise": -0.1}, r"`report_noise` must be a finite number >= 0, got -0.1"),
        ({"keyframe_extra_frames": float("nan")}, r"`keyframe_extra_frames` must be a finite number >= 0, got nan"),
    ],
)
def test_invalid_variant_options_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SyntheticVREdgeEnv(**kwargs)


def test_every_controller_reads_the_variants_observations():
    env_kwargs = {"traces": "test", "episode_length": 15, **EVERY_OPTION}
    layout = SyntheticVREdgeEnv(**env_kwargs).observation_layout
    for name, controller in tuned_baselines(layout).items():
        records = play_episodes(controller, [0, 1], env_kwargs)
        assert all(record["length"] >= 1 and np.isfinite(record["return"]) for record in records), name


def test_the_reference_told_the_present_reads_the_step_just_played():
    env = SyntheticVREdgeEnv(traces="test", report_delay_steps=1)
    env.reset(seed=2)
    env.step(np.ones(8, dtype=np.int64))
    conditions = present_conditions(env)
    spread = env._frame_factor_std[:, 0]
    mean_factor = np.exp(env._frame_factor_shift[:, 0] + 0.5 * spread**2)
    np.testing.assert_allclose(conditions.rate_mbps[0, 0], env._true_capacities[0] / mean_factor)
    assert conditions.gpu_capacity[0, 0] == env._true_capacities[1]
    np.testing.assert_array_equal(conditions.backlog_mbit[0], env._backlog_mbit)
    with pytest.raises(ValueError, match=r"told only the present looks one step ahead; got `horizon`=2"):
        play_clairvoyant([0], {"episode_length": 3}, horizon=2, knows_future=False)


def test_measuring_variants_reports_the_gaps_of_the_same_episodes_and_their_change():
    short = {"traces": "test", "episode_length": 12}
    today = measure_variant(short, [0, 1, 2])
    keyframe = measure_variant({**short, "keyframe_extra_frames": 4.0}, [0, 1, 2])
    gaps = []
    for measured in (today, keyframe):
        returns = {name: np.array(values) for name, values in measured["per_episode_returns"].items()}
        best = measured["best_causal"]
        assert all(returns[best].mean() >= returns[name].mean() for name in CAUSAL_CONTROLLERS)
        gaps.append((returns[CLAIRVOYANT] - returns[best]).mean())
        assert measured["gap_clairvoyant_minus_best_causal"]["mean"] == pytest.approx(gaps[-1])
    result = {"variants": {"today (all off)": today, "keyframe": keyframe}}
    add_changes_from_today(result)
    assert result["variants"]["keyframe"]["change_from_today"]["gap"]["mean"] == pytest.approx(gaps[1] - gaps[0])
    assert result["variants"]["today (all off)"]["change_from_today"]["gap"]["mean"] == 0.0


def test_the_reward_model_charges_a_keyframe_only_to_candidates_that_switch():
    env = SyntheticVREdgeEnv(traces="test", keyframe_extra_frames=4.0)
    env.reset(seed=2)
    for _ in range(3):
        observation = env.step(np.ones(8, dtype=np.int64))[0]
    decoded = DecodedObservation(env.observation_layout, observation[None], StreamModel())
    conditions = true_conditions(env, 1)
    eligible = decoded.active & decoded.measured
    hold = np.where(eligible, decoded.last_level, 0)
    raised = np.where(eligible, decoded.last_level + 1, 0)
    candidates = np.stack([hold, raised], axis=1)
    blind = JointRewardModel().objective(decoded, conditions, candidates)
    charged = JointRewardModel(keyframe_extra_frames=4.0).objective(decoded, conditions, candidates)
    assert charged[0, 0] == blind[0, 0]
    assert charged[0, 1] < blind[0, 1]
