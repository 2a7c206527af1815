"""The joint controllers: what they infer from the observation, their search, the learned
predictor, the clairvoyant reference and equal-budget tuning."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from examples.vr_edge import tune_baselines
from examples.vr_edge.baselines import BASELINES, tuned_baselines
from examples.vr_edge.clairvoyant import play_clairvoyant, true_conditions
from examples.vr_edge.controller import DecodedObservation
from examples.vr_edge.forecast import DEFAULT_PREDICTOR_PATH, collect_transitions, lead_pairs
from examples.vr_edge.joint_control import JointExpectedReward, JointLookahead, choose_jointly
from examples.vr_edge.joint_model import JointRewardModel, estimate_conditions, normal_tail
from examples.vr_edge.synthetic_env import StreamModel, SyntheticVREdgeEnv


def _decoded(env: SyntheticVREdgeEnv, observation: np.ndarray) -> DecodedObservation:
    return DecodedObservation(env.observation_layout, observation[None], StreamModel())


def _played(env: SyntheticVREdgeEnv, seed: int, steps: int, level: int = 1):
    observation, _ = env.reset(seed=seed)
    for _ in range(steps):
        observation = env.step(np.full(env.num_users, level, dtype=np.int64))[0]
    return observation


def test_normal_tail_matches_the_exact_function():
    z = np.linspace(-6.0, 6.0, 241)
    exact = np.array([0.5 * math.erfc(value / math.sqrt(2.0)) for value in z])
    np.testing.assert_allclose(normal_tail(z), exact, atol=2e-7)


def test_the_shared_state_read_from_the_observation_matches_the_hidden_one():
    env = SyntheticVREdgeEnv(traces="test")
    observation = _played(env, seed=11, steps=6)
    phy_mbps, gpu_capacity = env._true_capacities
    rate, capacity, backlog = estimate_conditions(_decoded(env, observation), window=1)
    present = env._active & (env.observation_layout.per_user(observation)[:, env.observation_layout.feature("throughput_1")] > 0)
    assert present.sum() >= 3
    # The GPU's free capacity is exact while no frame was skipped; a user's rate with the air to
    # itself is off only by its frames' sampled size and fading noise (the mean factor divided out).
    assert capacity[0] == pytest.approx(gpu_capacity, rel=1e-5)
    mean_factor = np.exp(env._frame_factor_shift[:, 0] + 0.5 * env._frame_factor_std[:, 0] ** 2)
    ratio = rate[0][present] / (phy_mbps / mean_factor)[present]
    assert np.all(np.abs(np.log(ratio)) < 0.35), ratio
    np.testing.assert_allclose(backlog[0][present], env._backlog_mbit[present], rtol=1e-4, atol=1e-9)


def test_the_search_finds_the_best_joint_choice_of_two_users():
    env = SyntheticVREdgeEnv(num_users=2, traces="test")
    model = JointRewardModel()
    for seed in range(6):
        env.reset(seed=seed)
        env._set_present(np.ones(2, dtype=bool))
        observation = env.step(np.array([2, 3]))[0]
        decoded = _decoded(env, observation)
        controller = JointExpectedReward(env.observation_layout, frame_time_std=0.6, rate_margin=0.8)
        conditions = controller.conditions(decoded)
        every = np.array(list(itertools.product(range(6), repeat=2)))[None]
        values = model.objective(decoded, conditions, every)[0]
        found = choose_jointly(model, decoded, conditions, 6)
        found_value = model.objective(decoded, conditions, found[:, None, :])[0, 0]
        assert found_value == pytest.approx(values.max(), abs=1e-9), (seed, found, every[0, values.argmax()])


def test_a_more_cautious_margin_never_streams_higher_and_empty_slots_get_level_zero():
    env = SyntheticVREdgeEnv(traces="test")
    observations = np.stack([_played(env, seed=seed, steps=4) for seed in range(4)])
    bold = JointExpectedReward(env.observation_layout, rate_margin=1.0)(observations)
    careful = JointExpectedReward(env.observation_layout, rate_margin=0.3)(observations)
    assert bold.dtype == np.int64 and bold.shape == (4, 8)
    assert careful.sum() < bold.sum()
    active = env.observation_layout.per_user(observations)[..., 0] > 0.5
    assert np.all(bold[~active] == 0) and np.all(careful[~active] == 0)


def test_the_lookahead_follows_a_falling_trend_only_when_asked():
    env = SyntheticVREdgeEnv(num_users=2)
    layout = env.observation_layout
    observation = np.zeros((1, layout.size))
    users = layout.per_user(observation)
    users[0, :, 0] = 1.0
    users[0, :, layout.feature("frame_rate")] = 0.8
    users[0, :, layout.feature("resolution")] = 0.66
    users[0, :, layout.feature("complexity")] = 0.5
    users[0, :, layout.feature("last_level")] = 0.6
    first = layout.feature("throughput_8")
    users[0, :, first : first + 8] = np.geomspace(2.0, 0.25, 8)  # halving every ~2.3 steps
    users[0, :, layout.feature("render_time")] = 0.3
    kwargs = {"horizon": 3, "window": 3, "frame_time_std": 0.6, "rate_margin": 1.0, "forecast_std": 0.05}
    flat = JointLookahead(layout, trend=0.0, **kwargs)(observation)
    following = JointLookahead(layout, trend=1.0, **kwargs)(observation)
    assert following.sum() < flat.sum()


def test_controllers_reject_parameters_outside_their_ranges():
    layout = SyntheticVREdgeEnv(num_users=2).observation_layout
    with pytest.raises(ValueError, match=r"`rate_margin` must be a number in \[0.1, 2.0\], got 3"):
        JointExpectedReward(layout, rate_margin=3)
    with pytest.raises(ValueError, match=r"`horizon` must be an integer in \[1, 10\], got 0"):
        JointLookahead(layout, horizon=0)
    with pytest.raises(FileNotFoundError, match="fit one with `python -m examples.vr_edge.forecast`"):
        BASELINES["predictive lookahead"](layout, predictor_path="/nonexistent/predictor.json")


def test_the_clairvoyant_reads_the_true_next_step_and_plays_whole_episodes():
    env = SyntheticVREdgeEnv(num_users=3, episode_length=5, traces="test")
    env.reset(seed=4)
    truth = true_conditions(env, horizon=2)
    copy_of_env = SyntheticVREdgeEnv(num_users=3, episode_length=5, traces="test")
    copy_of_env.reset(seed=4)
    copy_of_env.step(np.zeros(3, dtype=np.int64))
    phy_mbps, gpu_capacity = copy_of_env._true_capacities
    mean_factor = np.exp(env._frame_factor_shift[:, 0] + 0.5 * env._frame_factor_std[:, 0] ** 2)
    np.testing.assert_allclose(truth.rate_mbps[0, 0], phy_mbps / mean_factor)
    assert truth.gpu_capacity[0, 0] == gpu_capacity and truth.rate_mbps.shape == (2, 1, 3)
    records = play_clairvoyant([1, 2], {"num_users": 3, "episode_length": 5, "traces": "test"})
    assert [record["length"] for record in records] == [5.0, 5.0]
    assert records == play_clairvoyant([1, 2], {"num_users": 3, "episode_length": 5, "traces": "test"})


def test_the_predictor_gives_finite_forecasts_for_a_batch():
    from examples.vr_edge.forecast import load_predictor

    env = SyntheticVREdgeEnv(traces="test")
    observations = np.stack([_played(env, seed=seed, steps=3) for seed in range(3)])
    forecast = load_predictor().predict(DecodedObservation(env.observation_layout, observations, StreamModel()))
    assert forecast.rate_mbps.shape == forecast.rate_log_std.shape == (3, 8)
    assert np.all(np.isfinite(forecast.rate_mbps)) and np.all(forecast.rate_mbps > 0)
    assert np.all(forecast.rate_log_std > 0) and np.all(np.isfinite(forecast.gpu_capacity))


def test_fitting_the_predictor_on_collected_data_is_seeded(tmp_path):
    from examples.vr_edge.forecast import collect_transitions, fit_predictor

    data = collect_transitions(num_envs=2, steps=12, seed=3, num_users=3)
    assert len(data["user_inputs"]) == len(data["user_targets"]) > 10
    first = fit_predictor(data, seed=1, hidden=4, epochs=2)
    second = fit_predictor(collect_transitions(num_envs=2, steps=12, seed=3, num_users=3), seed=1, hidden=4, epochs=2)
    assert first == second


def test_every_controller_gets_the_same_budget_of_distinct_points(monkeypatch):
    played = {}

    def counting_play_episodes(policy, seeds, env_kwargs):
        played.setdefault(type(policy).__name__, []).append(policy.params())
        return [{"return": float(len(played[type(policy).__name__]))} for _ in seeds]

    monkeypatch.setattr(tune_baselines, "play_episodes", counting_play_episodes)
    names = ["constant level", "deadline rule", "joint lookahead"]
    result = tune_baselines.tune_with_budget(episodes=2, first_seed=0, names=names, budget=5, num_users=2)
    assert {len(scores) for scores in result["scores"].values()} == {5}
    for name in names:
        points = [entry["params"] for entry in result["scores"][name]]
        assert len({tuple(sorted(point.items())) for point in points}) == 5
        space = tune_baselines.search_space(name)
        assert all(point[key] in space[key] for point in points for key in space)
        # The last point scored highest here, so it wins.
        assert result["tuned"][name] == points[-1]
    # A space smaller than the budget is played whole.
    small = {"a": [1, 2], "b": [3]}
    assert tune_baselines.sample_points(small, 5, np.random.default_rng(0)) == [{"a": 1, "b": 3}, {"a": 2, "b": 3}]


def test_tuning_on_a_variant_plays_it_and_records_the_fixed_settings(monkeypatch, tmp_path):
    played = []
    # A predictor of its own, as a variant's would be (the default one is left out of `params`).
    predictor = tmp_path / "rate_predictor_variant.json"
    predictor.write_text(DEFAULT_PREDICTOR_PATH.read_text())

    def recording_play_episodes(policy, seeds, env_kwargs):
        played.append((type(policy).__name__, policy.params(), env_kwargs))
        return [{"return": 1.0} for _ in seeds]

    monkeypatch.setattr(tune_baselines, "play_episodes", recording_play_episodes)
    variant = {"report_delay_steps": 1, "report_noise": 0.15}
    fixed = {"predictive lookahead": {"predictor_path": str(predictor)}}
    result = tune_baselines.tune_with_budget(
        episodes=2, first_seed=0, names=["deadline rule", "predictive lookahead"], budget=3, num_users=2,
        env_options=variant, fixed_params=fixed,
    )
    assert len(played) == 6 and all({**env_kwargs, **variant} == env_kwargs for _, _, env_kwargs in played)
    assert [params["predictor_path"] for name, params, _ in played if name == "PredictiveLookahead"] == [str(predictor)] * 3
    assert all("predictor_path" not in params for name, params, _ in played if name == "DeadlineRule")
    assert result["tuned"]["predictive lookahead"]["predictor_path"] == str(predictor)
    assert result["env_options"] == variant


def test_tuning_a_variant_refuses_to_overwrite_todays_tuned_parameters(capsys):
    with pytest.raises(SystemExit):
        tune_baselines.main(["--report-delay-steps", "1", "--episodes", "1"])
    assert "would overwrite tuned_baselines.json, today's env's parameters" in capsys.readouterr().err


def test_a_tuned_file_may_hold_some_controllers_but_no_unknown_one(tmp_path):
    layout = SyntheticVREdgeEnv(num_users=2).observation_layout
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps({"joint lookahead": {"horizon": 2}, "deadline rule": {"headroom": 0.55}}))
    controllers = tuned_baselines(layout, path)
    assert list(controllers) == ["deadline rule", "joint lookahead"]
    assert controllers["deadline rule"].params()["headroom"] == 0.55
    path.write_text(json.dumps({"oracle": {}}))
    with pytest.raises(ValueError, match=r"tunes controllers that do not exist: \['oracle'\]"):
        tuned_baselines(layout, path)


def test_lead_pairs_span_one_episode_and_users_measured_at_both_ends():
    # One env, 5 steps, an episode ending at step 1; one user, unmeasured at step 4.
    ends = np.array([[False], [True], [False], [False], [False]])
    eligible = np.array([True, True, True, True, False])[:, None, None]
    one = lead_pairs(ends, eligible, 1)[:, 0, 0]
    two = lead_pairs(ends, eligible, 2)[:, 0, 0]
    # 1 step: 0->1 within the episode; 1->2 crosses the end; 2->3 fine; 3->4 unmeasured at 4.
    assert one.tolist() == [True, False, True, False]
    # 2 steps: 0->2 and 1->3 cross the end at step 1; 2->4 is unmeasured at 4.
    assert two.tolist() == [False, False, False]
    assert lead_pairs(np.zeros((5, 1), bool), np.ones((5, 1, 1), bool), 2)[:, 0, 0].tolist() == [True] * 3


def test_collecting_with_a_bad_lead_is_rejected():
    with pytest.raises(ValueError, match=r"`lead_steps` must be an int in \[1, steps=12\); got 0"):
        collect_transitions(num_envs=1, steps=12, num_users=2, lead_steps=0)
