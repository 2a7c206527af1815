"""The rate predictor's forecast as policy input: the wrapped observation, and `train.py --rate-forecast`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import pytest

torch = pytest.importorskip("torch")

from examples.vr_edge import evaluate, train  # noqa: E402
from examples.vr_edge.agent import CollectorPolicy, load_agent  # noqa: E402
from examples.vr_edge.controller import DecodedObservation  # noqa: E402
from examples.vr_edge.episodes import play_episodes  # noqa: E402
from examples.vr_edge.forecast import load_predictor  # noqa: E402
from examples.vr_edge.observation_history import make_env  # noqa: E402
from examples.vr_edge.rate_forecast_features import FORECAST_FEATURES, RateForecastFeatures  # noqa: E402
from examples.vr_edge.synthetic_env import StreamModel, SyntheticVREdgeEnv  # noqa: E402

PREDICTOR_PATH = Path(train.__file__).with_name("rate_predictor_delay1.json")
PREDICTOR_STATE = json.loads(PREDICTOR_PATH.read_text())
VARIANT = {"report_delay_steps": 1, "report_noise": 0.15}


def test_each_user_block_ends_with_the_predictors_forecast_of_the_plain_observation():
    env_kwargs = {"num_users": 3, "episode_length": 20, **VARIANT}
    wrapped, plain = make_env(1, PREDICTOR_STATE, **env_kwargs), SyntheticVREdgeEnv(**env_kwargs)
    layout, width = plain.observation_layout, plain.observation_layout.per_user_features
    predictor = load_predictor(PREDICTOR_PATH)
    observation, _ = wrapped.reset(seed=4)
    expected, _ = plain.reset(seed=4)
    rng = np.random.default_rng(0)
    changes = []
    for step in range(8):
        assert observation.shape == wrapped.observation_space.shape == (layout.size + 3 * len(FORECAST_FEATURES),)
        assert wrapped.observation_space.contains(observation)
        users = observation[: 3 * (width + 2)].reshape(3, width + 2)
        np.testing.assert_array_equal(users[:, :width], layout.per_user(expected))
        np.testing.assert_array_equal(observation[3 * (width + 2) :], expected[3 * width :])
        change, log_std = predictor.rate_change(DecodedObservation(layout, expected[None], StreamModel()))
        np.testing.assert_allclose(users[:, width:], np.stack([change[0], log_std[0]], axis=1), rtol=1e-6)
        changes.append(change[0])
        action = rng.integers(0, layout.num_levels, size=3)
        observation, reward, *_ = wrapped.step(action)
        expected, expected_reward, *_ = plain.step(action)
        assert reward == expected_reward
    # The forecast is not a constant: once users are measured it moves with the channel.
    assert np.ptp(np.stack(changes)) > 0


def test_the_forecast_agrees_with_what_the_predictive_lookahead_reads():
    env = SyntheticVREdgeEnv(num_users=4, **VARIANT)
    observations = [env.reset(seed=1)[0]]
    for _ in range(5):
        observations.append(env.step(np.full(4, 2))[0])
    decoded = DecodedObservation(env.observation_layout, np.stack(observations), StreamModel())
    predictor = load_predictor(PREDICTOR_PATH)
    change, log_std = predictor.rate_change(decoded)
    forecast = predictor.predict(decoded)
    np.testing.assert_allclose(forecast.rate_log_std, np.exp(log_std))
    # A user not measured yet is forecast no change, with the wide default spread.
    unmeasured = ~(decoded.active & decoded.measured)
    assert unmeasured.any() and (~unmeasured).any()
    assert np.all(change[unmeasured] == 0.0) and np.allclose(np.exp(log_std[unmeasured]), 0.3)


def test_with_history_every_copy_carries_its_forecast_and_feature_indices_stay_the_envs():
    env = make_env(2, PREDICTOR_STATE, num_users=4)
    with_forecast = env.env_layout
    assert isinstance(env.env, RateForecastFeatures)
    assert env.observation_layout.per_user_features == 2 * with_forecast.per_user_features
    assert with_forecast.per_user_features == SyntheticVREdgeEnv(num_users=4).observation_layout.per_user_features + 2
    assert env.observation_layout.feature("last_level") == SyntheticVREdgeEnv(num_users=4).observation_layout.feature(
        "last_level"
    )


def test_a_predictor_state_that_is_not_one_is_rejected():
    with pytest.raises(ValueError, match=r"`predictor_state` must be a rate predictor's JSON state .* got str"):
        RateForecastFeatures(SyntheticVREdgeEnv(num_users=2), str(PREDICTOR_PATH))


def _tiny_argv(output_dir, *extra: str) -> list[str]:
    # 2 updates of 2 envs x 16 steps on the delayed-reports variant.
    return [
        "--backend", "sync", "--num-envs", "2", "--horizon", "16", "--total-timesteps", "64",
        "--num-users", "2", "--episode-length", "6", "--update-epochs", "2", "--num-minibatches", "2",
        "--seed", "7", "--output-dir", str(output_dir), "--no-progress", "--eval-every", "1", "--eval-episodes", "2",
        "--report-delay-steps", "1", "--report-noise", "0.15", *extra,
    ]


def _curve(summary):
    return [{key: value for key, value in record.items() if not key.endswith("seconds") and key != "transitions_per_second"}
            for record in summary["metrics"]]


def test_rate_forecast_widens_the_input_is_recorded_and_a_run_repeats_bit_for_bit(tmp_path):
    forecast_flags = ("--history-steps", "2", "--rate-forecast", str(PREDICTOR_PATH))
    without = train.main(_tiny_argv(tmp_path / "plain", "--history-steps", "2"))
    first = train.main(_tiny_argv(tmp_path / "first", *forecast_flags))
    second = train.main(_tiny_argv(tmp_path / "second", *forecast_flags))

    plain_agent, plain_checkpoint = load_agent(without["policy_path"])
    agent, checkpoint = load_agent(first["policy_path"])
    # Two users, two forecast features each, in both copies of the history.
    assert agent.observation_size - plain_agent.observation_size == 2 * 2 * len(FORECAST_FEATURES)
    assert "rate_forecast" not in plain_checkpoint and plain_checkpoint["args"]["rate_forecast"] == ""
    assert checkpoint["rate_forecast"] == PREDICTOR_STATE
    assert checkpoint["args"]["rate_forecast"] == str(PREDICTOR_PATH)

    assert _curve(first) == _curve(second)
    first_weights = torch.load(first["policy_path"], weights_only=True)["state_dict"]
    second_weights = torch.load(second["policy_path"], weights_only=True)["state_dict"]
    assert all(torch.equal(first_weights[name], second_weights[name]) for name in first_weights)
    # Not vacuous: the forecast changes what the run learns.
    assert _curve(first) != _curve(without)

    # `evaluate` plays the policy with the forecast its checkpoint names.
    result = evaluate.main(["--policy", first["policy_path"], "--episodes", "2", "--baselines", "constant level"])
    test_env = {**checkpoint["env_kwargs"], "traces": "test", "trace_jitter": 0.0}
    records = play_episodes(
        CollectorPolicy(agent, deterministic=True), [3_000_000, 3_000_001], test_env, 2, checkpoint["rate_forecast"]
    )
    assert result["per_episode_returns"]["PPO (seed 7)"] == [record["return"] for record in records]


def test_a_rate_forecast_file_that_does_not_exist_is_rejected(tmp_path, capsys):
    missing = tmp_path / "missing.json"
    with pytest.raises(SystemExit):
        train.parse_args(["--rate-forecast", str(missing)])
    assert f"--rate-forecast names no file: {str(missing)!r}" in capsys.readouterr().err
