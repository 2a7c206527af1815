"""PPO on the VR edge env: advantage estimation, the training script on each backend, evaluation."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

import pytest

torch = pytest.importorskip("torch")

from examples.vr_edge import episodes, evaluate, reporting, train  # noqa: E402
from examples.vr_edge.advantages import compute_gae  # noqa: E402
from examples.vr_edge.agent import ActorCritic, CollectorPolicy, load_agent  # noqa: E402
from examples.vr_edge.baselines import BASELINES  # noqa: E402
from examples.vr_edge.observation_history import make_env  # noqa: E402
from examples.vr_edge.synthetic_env import THROUGHPUT_HISTORY_LEN, SyntheticVREdgeEnv  # noqa: E402
from examples.vr_edge.traces import TRAINING_TRACE_JITTER  # noqa: E402
from parallel_rollouts import ParallelRolloutCollector  # noqa: E402

# Add "async" here once that backend exists; every backend test below follows this list.
BACKENDS_UNDER_TEST = ("serial", "sync", "async")

METRIC_KEYS = {
    "update",
    "global_step",
    "episode_return_mean",
    "episodes_completed",
    *(f"{key}_mean" for key in train.INFO_KEYS),
    "policy_loss",
    "value_loss",
    "entropy",
    "approx_kl",
    "clip_fraction",
    "collect_seconds",
    "update_seconds",
    "transitions_per_second",
    "eval_return_mean",
    "eval_return_ci95",
}
# Everything but the wall-clock timings must follow from the seed alone.
DETERMINISTIC_KEYS = METRIC_KEYS - {"collect_seconds", "update_seconds", "transitions_per_second"}


# --- compute_gae -------------------------------------------------------------------------------


def test_gae_matches_hand_worked_truncation_termination_and_bootstrap():
    # gamma = 0.9, lambda = 0.8, so gamma * lambda = 0.72.
    # env 0 is truncated at t=1 (bootstrapped from final value 3.0, recursion cut);
    # env 1 terminates at t=2 (next value 0, recursion cut); both bootstrap after t=3.
    rewards = np.array([[1.0, 0.0], [2.0, 1.0], [0.0, 1.0], [1.0, 2.0]])
    values = np.array([[0.5, 1.0], [1.0, 0.5], [2.0, 1.5], [1.0, 0.0]])
    terminations = np.array([[False, False], [False, False], [False, True], [False, False]])
    truncations = np.array([[False, False], [True, False], [False, False], [False, False]])
    # 99 marks entries that must be ignored: not an episode end, or a termination.
    final_values = np.array([[99.0, 99.0], [3.0, 99.0], [99.0, 99.0], [99.0, 99.0]])
    bootstrap_values = np.array([2.0, 4.0])

    advantages, returns = compute_gae(
        rewards, values, terminations, truncations, final_values, bootstrap_values, gamma=0.9, gae_lambda=0.8
    )

    # env 0, backwards:
    #   t=3: delta = 1 + 0.9*2.0 - 1.0 = 1.8                      A = 1.8
    #   t=2: delta = 0 + 0.9*1.0 - 2.0 = -1.1                     A = -1.1 + 0.72*1.8 = 0.196
    #   t=1: truncated, delta = 2 + 0.9*3.0 - 1.0 = 3.7           A = 3.7 (nothing added from t=2)
    #   t=0: delta = 1 + 0.9*1.0 - 0.5 = 1.4                      A = 1.4 + 0.72*3.7 = 4.064
    # env 1, backwards:
    #   t=3: delta = 2 + 0.9*4.0 - 0.0 = 5.6                      A = 5.6
    #   t=2: terminated, delta = 1 + 0 - 1.5 = -0.5               A = -0.5 (nothing added from t=3)
    #   t=1: delta = 1 + 0.9*1.5 - 0.5 = 1.85                     A = 1.85 + 0.72*(-0.5) = 1.49
    #   t=0: delta = 0 + 0.9*0.5 - 1.0 = -0.55                    A = -0.55 + 0.72*1.49 = 0.5228
    expected_advantages = np.array([[4.064, 0.5228], [3.7, 1.49], [0.196, -0.5], [1.8, 5.6]])
    np.testing.assert_allclose(advantages, expected_advantages, rtol=0, atol=1e-12)
    np.testing.assert_allclose(returns, expected_advantages + values, rtol=0, atol=1e-12)
    assert advantages.dtype == returns.dtype == np.float64


def test_gae_truncation_is_not_treated_as_termination():
    rewards = np.zeros((2, 1))
    values = np.zeros((2, 1))
    final_values = np.array([[5.0], [0.0]])
    ended_at_0 = np.array([[True], [False]])
    no_ends = np.zeros((2, 1), dtype=bool)
    truncated, _ = compute_gae(rewards, values, no_ends, ended_at_0, final_values, np.zeros(1), 0.5, 1.0)
    terminated, _ = compute_gae(rewards, values, ended_at_0, no_ends, final_values, np.zeros(1), 0.5, 1.0)
    assert truncated[0, 0] == pytest.approx(2.5)  # 0.5 * value of the final observation
    assert terminated[0, 0] == 0.0


def test_gae_with_gamma_and_lambda_one_and_no_ends_is_reward_to_go_plus_bootstrap():
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=(6, 3))
    values = rng.normal(size=(6, 3))
    bootstrap_values = rng.normal(size=3)
    no_ends = np.zeros((6, 3), dtype=bool)
    _, returns = compute_gae(
        rewards, values, no_ends, no_ends, np.zeros((6, 3)), bootstrap_values, gamma=1.0, gae_lambda=1.0
    )
    reward_to_go = np.cumsum(rewards[::-1], axis=0)[::-1]
    np.testing.assert_allclose(returns, reward_to_go + bootstrap_values, atol=1e-12)


def test_gae_rejects_mismatched_shapes_and_factors():
    rewards = np.zeros((4, 2))
    flags = np.zeros((4, 2), dtype=bool)
    with pytest.raises(ValueError, match=r"`bootstrap_values` must have shape \(2,\)"):
        compute_gae(rewards, rewards, flags, flags, rewards, np.zeros(3), 0.9, 0.9)
    with pytest.raises(ValueError, match=r"`final_values` must have shape \(4, 2\)"):
        compute_gae(rewards, rewards, flags, flags, np.zeros((4,)), np.zeros(2), 0.9, 0.9)
    with pytest.raises(ValueError, match=r"`gae_lambda` must lie in \[0, 1\]; got 1.5"):
        compute_gae(rewards, rewards, flags, flags, rewards, np.zeros(2), 0.9, 1.5)


# --- the agent ---------------------------------------------------------------------------------


def test_collector_policy_returns_valid_actions_values_and_log_probs():
    env = SyntheticVREdgeEnv(num_users=3, episode_length=5)
    agent = ActorCritic.for_env(env)
    with ParallelRolloutCollector([lambda: SyntheticVREdgeEnv(num_users=3, episode_length=5)] * 2,
                                  CollectorPolicy(agent), backend="sync", horizon=7, seed=3) as collector:
        batch = collector.collect()
    assert batch.actions.shape == (7, 2, 3)
    assert batch.actions.min() >= 0 and batch.actions.max() < 6
    observations = torch.as_tensor(batch.observations).reshape(14, -1)
    log_probs, entropy, values = agent.evaluate(observations, torch.as_tensor(batch.actions).reshape(14, 3))
    # The stored log-probs and values are those of the network that acted.
    np.testing.assert_allclose(batch.log_probs.reshape(14), log_probs.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(batch.values.reshape(14), values.detach().numpy(), rtol=1e-5, atol=1e-5)
    assert torch.all(entropy > 0)


def test_deterministic_policy_takes_the_most_probable_level():
    agent = ActorCritic(num_users=2, per_user_features=3, shared_features=1, num_levels=4)
    observations = torch.rand(5, 7)
    first = CollectorPolicy(agent, deterministic=True)(observations.numpy()).actions
    second = CollectorPolicy(agent, deterministic=True)(observations.numpy()).actions
    assert torch.equal(first, second)
    with pytest.raises(ValueError, match=r"expected observations of shape \[batch, 7\]"):
        agent.value(torch.rand(5, 8))


def test_levels_chosen_for_empty_slots_carry_no_log_probability_or_entropy():
    env = SyntheticVREdgeEnv(num_users=8)
    observation, _ = env.reset(seed=0)
    present = env.observation_layout.per_user(observation)[:, 0] == 1
    assert not present.all()
    agent = ActorCritic.for_env(env)
    observations = torch.as_tensor(observation[None])
    actions = torch.zeros(1, 8, dtype=torch.int64)
    other_actions = actions.clone()
    other_actions[0, torch.as_tensor(~present)] = 5
    first_log_probs, entropy, _ = agent.evaluate(observations, actions)
    other_log_probs, _, _ = agent.evaluate(observations, other_actions)
    assert torch.equal(first_log_probs, other_log_probs)
    # Each present user contributes at most log(6) nats of entropy, empty slots none.
    assert entropy.item() <= present.sum() * math.log(6) + 1e-5


def test_the_actor_reads_the_throughput_history_in_log_space():
    env = SyntheticVREdgeEnv(num_users=8)
    layout = env.observation_layout
    agent = ActorCritic.for_env(env)
    start, stop = agent.log_features
    assert (start, stop) == (layout.feature(f"throughput_{THROUGHPUT_HISTORY_LEN}"), layout.feature("throughput_1") + 1)
    observation, _ = env.reset(seed=0)
    for action in np.random.default_rng(0).integers(0, 6, size=(5, 8)):
        observation = env.step(action)[0]
    # With the head's weights on the raw blocks zeroed, the history still moves the levels.
    with torch.no_grad():
        agent.actor[0].weight[:, : 3 * layout.per_user_features] = 0.0
    scaled = observation.copy()
    layout.per_user(scaled)[:, start:stop] *= 0.5
    first = agent._distribution(torch.as_tensor(observation[None]))[0].logits
    second = agent._distribution(torch.as_tensor(scaled[None]))[0].logits
    assert not torch.allclose(first, second)


# --- the training script -----------------------------------------------------------------------


def _tiny_run_argv(backend: str, output_dir, seed: int = 7) -> list[str]:
    # 2 updates of 2 envs x 16 steps; 6-step episodes so both truncations and episode
    # returns show up in every rollout.
    return [
        "--backend", backend, "--num-envs", "2", "--horizon", "16", "--total-timesteps", "64",
        "--num-users", "2", "--episode-length", "6", "--update-epochs", "2", "--num-minibatches", "2",
        "--seed", str(seed), "--output-dir", str(output_dir), "--no-progress", "--plot",
        "--eval-every", "1", "--eval-episodes", "3",
    ]


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    """One tiny training run per backend, shared by the tests that inspect its outputs."""
    runs = {}
    for backend in BACKENDS_UNDER_TEST:
        output_dir = tmp_path_factory.mktemp(f"train_{backend}")
        runs[backend] = train.main(_tiny_run_argv(backend, output_dir))
    return runs


@pytest.mark.parametrize("backend", BACKENDS_UNDER_TEST)
def test_training_writes_finite_metrics_policy_and_plot(tiny_runs, backend):
    summary = tiny_runs[backend]
    assert summary["num_updates"] == 2
    assert summary["global_step"] == 64
    assert math.isfinite(summary["final_episode_return_mean"])

    lines = open(summary["metrics_path"]).read().splitlines()
    assert len(lines) == 2
    for update, line in enumerate(lines, start=1):
        record = json.loads(line)
        assert set(record) == METRIC_KEYS
        assert record["update"] == update and record["global_step"] == 32 * update
        assert record["episodes_completed"] >= 4  # 32 steps of 6-step episodes
        assert all(math.isfinite(value) for value in record.values())
    assert [json.loads(line) for line in lines] == summary["metrics"]
    # Every update was evaluated on the held-out seeds; the last one is the final evaluation.
    assert [entry["global_step"] for entry in summary["evaluations"]] == [32, 64]
    assert summary["final_evaluation"]["mean"] == summary["metrics"][-1]["eval_return_mean"]
    assert set(summary["baselines"]) == set(BASELINES)

    agent, checkpoint = load_agent(summary["policy_path"])
    assert checkpoint["env_kwargs"] == {"num_users": 2, "episode_length": 6, "simulation_substeps": 1}
    assert checkpoint["args"]["backend"] == backend
    # Training jitters the train traces; the jitter is a training argument, not part of the env
    # that evaluations rebuild.
    assert checkpoint["args"]["trace_jitter"] == TRAINING_TRACE_JITTER > 0
    env = SyntheticVREdgeEnv(**checkpoint["env_kwargs"])
    observation, _ = env.reset(seed=0)
    actions = CollectorPolicy(agent, deterministic=True)(observation[None]).actions
    assert env.action_space.contains(actions[0].numpy())

    with open(summary["plot_path"], "rb") as plot_file:
        assert plot_file.read(8) == b"\x89PNG\r\n\x1a\n"


def test_same_seed_gives_identical_learning_curves_on_every_backend(tiny_runs, tmp_path):
    reference_backend, *other_backends = BACKENDS_UNDER_TEST

    def deterministic_fields(summary):
        return [{key: record[key] for key in DETERMINISTIC_KEYS} for record in summary["metrics"]]

    reference = deterministic_fields(tiny_runs[reference_backend])
    for backend in other_backends:
        assert deterministic_fields(tiny_runs[backend]) == reference, backend
    # The comparison is not vacuous: another seed trains differently.
    other_seed = train.main(_tiny_run_argv(reference_backend, tmp_path, seed=8))
    assert deterministic_fields(other_seed) != reference


def _deterministic_fields(summary):
    return [{key: record[key] for key in DETERMINISTIC_KEYS} for record in summary["metrics"]]


def _weights(policy_path):
    return torch.load(policy_path, map_location="cpu", weights_only=True)["state_dict"]


def _assert_same_weights(first_path, second_path):
    first, second = _weights(first_path), _weights(second_path)
    assert list(first) == list(second)
    for name in first:
        assert torch.equal(first[name], second[name]), name


def test_the_same_command_in_a_fresh_process_gives_the_same_curve_and_weights_bit_for_bit(tiny_runs, tmp_path):
    # A second process starts with its own thread pool, generators and allocator state; only the
    # seed may decide the run.
    argv = _tiny_run_argv("sync", tmp_path)
    argv.remove("--plot")
    repository = Path(__file__).resolve().parents[2]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repository), os.environ.get("PYTHONPATH", "")])}
    completed = subprocess.run(
        [sys.executable, "-m", "examples.vr_edge.train", *argv], cwd=repository, env=environment,
        capture_output=True, text=True, timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    # Something at once, before torch loads; then what the run will do, before its first batch.
    lines = completed.stdout.splitlines()
    assert lines[0] == "examples.vr_edge.train: loading torch and the env...", lines[:3]
    assert lines[1].startswith("PPO on SyntheticVREdgeEnv (2 users): 2 envs, backend sync,"), lines[:3]
    assert lines[2].startswith("update 1/2  step 32"), lines[:3]
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    again = [{key: record[key] for key in DETERMINISTIC_KEYS} for record in records]
    assert again == _deterministic_fields(tiny_runs["sync"])
    _assert_same_weights(tmp_path / "policy.pt", tiny_runs["sync"]["policy_path"])


def _train_in_fresh_process(argv: list[str], output_dir: Path, **variables: str) -> list[dict]:
    repository = Path(__file__).resolve().parents[2]
    environment = {
        **os.environ, **variables,
        "PYTHONPATH": os.pathsep.join([str(repository), os.environ.get("PYTHONPATH", "")]),
    }
    completed = subprocess.run(
        [sys.executable, "-m", "examples.vr_edge.train", *argv, "--output-dir", str(output_dir)],
        cwd=repository, env=environment, capture_output=True, text=True, timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    records = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]
    return [{key: record[key] for key in DETERMINISTIC_KEYS} for record in records]


def test_full_size_training_is_bit_reproducible_whatever_the_threads_hash_seed_and_mkl_path_pin(tmp_path):
    # The default network and observation (8 users) on full rollouts of 8 envs: the matrix shapes
    # of a real run. Thread counts that torch (pinned to one), MKL, OpenMP and OpenBLAS could take
    # from the environment and Python's hash seed must not matter; the pinned MKL code path must
    # be what the checkpoint records.
    argv = ["--seed", "3", "--total-timesteps", "2048", "--eval-every", "2", "--eval-episodes", "2",
            "--no-progress", "--mkl-code-path", "compatible"]
    first = _train_in_fresh_process(argv, tmp_path / "first")
    second = _train_in_fresh_process(
        argv, tmp_path / "second", OMP_NUM_THREADS="2", MKL_NUM_THREADS="2", OPENBLAS_NUM_THREADS="2",
        PYTHONHASHSEED="12345",
    )
    assert len(first) == 2 and first == second
    assert first[-1]["eval_return_mean"] is not None and math.isfinite(first[-1]["eval_return_mean"])
    _assert_same_weights(tmp_path / "first" / "policy.pt", tmp_path / "second" / "policy.pt")
    _, checkpoint = load_agent(tmp_path / "first" / "policy.pt")
    assert checkpoint["args"]["mkl_code_path"] == "compatible"
    # The pin acts: MKL's kernels chosen by CPU model round the same products otherwise.
    argv[argv.index("compatible")] = "default"
    assert _train_in_fresh_process(argv, tmp_path / "default") != first


def test_the_mkl_code_path_cannot_be_pinned_once_mkl_has_run(tmp_path):
    # This test process has run matrix products already: the pin must be refused, not ignored.
    from examples.vr_edge.agent import pin_mkl_code_path

    torch.ones(64, 64) @ torch.ones(64, 64)
    pin_mkl_code_path("default")  # nothing to pin
    with pytest.raises(RuntimeError, match="start the process with MKL_CBWR=COMPATIBLE|has no MKL"):
        pin_mkl_code_path("compatible")
    with pytest.raises(ValueError, match="`code_path` must be one of"):
        pin_mkl_code_path("avx2")


def test_training_on_rollout_workers_is_reproducible_from_its_seed(tmp_path):
    # Each worker samples actions from generators the library seeds from the run's seed.
    runs = []
    for index, seed in enumerate((7, 7, 8)):
        argv = _tiny_run_argv("async", tmp_path / f"run{index}", seed=seed)
        argv.remove("--plot")
        runs.append(train.main([*argv, "--policy-placement", "workers", "--num-workers", "2"]))
    assert _deterministic_fields(runs[0]) == _deterministic_fields(runs[1])
    _assert_same_weights(runs[0]["policy_path"], runs[1]["policy_path"])
    assert _deterministic_fields(runs[2]) != _deterministic_fields(runs[0])


def test_arguments_come_from_the_args_dataclass():
    args = train.parse_args(["--num-envs", "3", "--learning-rate", "0.01", "--plot", "--backend", "serial"])
    assert (args.num_envs, args.learning_rate, args.plot, args.backend) == (3, 0.01, True, "serial")
    assert train.parse_args([]) == train.Args()


def test_plot_without_matplotlib_is_refused_before_training(monkeypatch, capsys):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *rest: None if name == "matplotlib" else real_find_spec(name, *rest)
    )
    with pytest.raises(SystemExit):
        train.parse_args(["--plot"])
    assert 'pip install ".[examples]"' in capsys.readouterr().err
    assert train.parse_args([]).plot is False  # without --plot, matplotlib is not needed


def test_arguments_that_cannot_train_are_rejected(capsys):
    with pytest.raises(SystemExit):
        train.parse_args(["--num-envs", "3", "--horizon", "5", "--num-minibatches", "4"])
    assert "--num-minibatches (4) must divide num_envs * horizon (3 * 5 = 15)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train.parse_args(["--trace-jitter", "-0.1"])
    assert "--trace-jitter must be >= 0; got -0.1." in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train.parse_args(["--policy-placement", "workers"])
    assert "--policy-placement workers runs the policy in worker processes: it needs --backend async" in capsys.readouterr().err


# --- the summary and the command line ---------------------------------------------------------


def _record_env_kwargs(monkeypatch, *modules) -> list[dict]:
    """The env keyword arguments of every env the given modules build (with `make_env`), in order."""
    built = []

    def recording_make_env(history_steps=1, rate_forecast=None, **kwargs):
        built.append(kwargs)
        return make_env(history_steps, rate_forecast, **kwargs)

    for module in modules:
        monkeypatch.setattr(module, "make_env", recording_make_env)
    return built


def test_training_envs_play_jittered_train_traces_and_evaluations_the_test_traces(tmp_path, monkeypatch):
    built = _record_env_kwargs(monkeypatch, train)
    argv = _tiny_run_argv("serial", tmp_path)
    train.main([*argv, "--trace-jitter", "0.4"])
    assert {kwargs["traces"] for kwargs in built} == {"train"}
    assert {kwargs["trace_jitter"] for kwargs in built} == {0.4}


_VARIANT_FLAGS = ["--report-delay-steps", "2", "--report-noise", "0.1", "--keyframe-extra-frames", "1.5"]
_VARIANT = {"report_delay_steps": 2, "report_noise": 0.1, "keyframe_extra_frames": 1.5}


def test_env_variant_options_reach_training_evaluation_and_the_checkpoint(tmp_path, monkeypatch):
    # Training builds its envs in train.py, the held-out evaluation in episodes.py.
    built = _record_env_kwargs(monkeypatch, train, episodes)
    summary = train.main([*_tiny_run_argv("serial", tmp_path), *_VARIANT_FLAGS])
    assert {kwargs["traces"] for kwargs in built} == {"train", "test"}
    for kwargs in built:
        assert {name: kwargs.get(name) for name in _VARIANT} == _VARIANT, kwargs
    _, checkpoint = load_agent(summary["policy_path"])
    assert checkpoint["env_kwargs"] == {"num_users": 2, "episode_length": 6, "simulation_substeps": 1, **_VARIANT}
    # `evaluate` rebuilds the env the policy was trained on from its checkpoint.
    monkeypatch.undo()
    result = evaluate.main(["--policy", summary["policy_path"], "--episodes", "2", "--baselines", "constant level"])
    assert {name: result["env_kwargs"][name] for name in _VARIANT} == _VARIANT


def test_history_steps_reach_training_evaluation_and_the_checkpoint(tmp_path, monkeypatch):
    played = []
    original_play = episodes.play_episodes

    def recording_play(policy, seeds, env_kwargs=None, history_steps=1, rate_forecast=None):
        played.append((type(policy).__name__, history_steps))
        return original_play(policy, seeds, env_kwargs, history_steps, rate_forecast)

    monkeypatch.setattr(reporting, "play_episodes", recording_play)
    monkeypatch.setattr(evaluate, "play_episodes", recording_play)
    summary = train.main([*_tiny_run_argv("serial", tmp_path), "--history-steps", "3", "--report-delay-steps", "1"])
    agent, checkpoint = load_agent(summary["policy_path"])
    plain_size = SyntheticVREdgeEnv(num_users=2).observation_layout.size
    assert agent.observation_size == 3 * plain_size
    assert checkpoint["history_steps"] == 3 and checkpoint["args"]["history_steps"] == 3
    # The periodic evaluation reads three observations; the baselines at the end read one.
    assert ("CollectorPolicy", 3) in played and ("ConstantLevel", 1) in played
    assert ("ConstantLevel", 3) not in played
    played.clear()
    result = evaluate.main(["--policy", summary["policy_path"], "--episodes", "2", "--baselines", "constant level"])
    assert sorted(played) == [("CollectorPolicy", 3), ("ConstantLevel", 1)]
    # The returns are those of the policy reading three observations of the checkpoint's env.
    test_env = {**checkpoint["env_kwargs"], "traces": "test", "trace_jitter": 0.0}
    records = original_play(CollectorPolicy(agent, deterministic=True), [3_000_000, 3_000_001], test_env, 3)
    assert result["per_episode_returns"]["PPO (seed 7)"] == [record["return"] for record in records]


def test_a_run_reading_one_observation_records_no_history_in_its_checkpoint(tiny_runs):
    _, checkpoint = load_agent(tiny_runs["serial"]["policy_path"])
    assert "history_steps" not in checkpoint and checkpoint["args"]["history_steps"] == 1


def test_history_steps_below_one_are_rejected(capsys):
    with pytest.raises(SystemExit):
        train.parse_args(["--history-steps", "0"])
    assert "--history-steps must be >= 1; got 0." in capsys.readouterr().err


def test_a_run_on_todays_env_records_no_variant_options():
    # Earlier checkpoints and evaluations describe today's env without these keys; new ones must too.
    assert train.variant_env_kwargs(train.parse_args([])) == {}
    assert train.variant_env_kwargs(train.parse_args(["--report-noise", "0.15"])) == {"report_noise": 0.15}


def test_negative_env_variant_options_are_rejected(capsys):
    with pytest.raises(SystemExit):
        train.parse_args(["--report-delay-steps", "-1"])
    assert "--report-delay-steps must be >= 0; got -1." in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train.parse_args(["--keyframe-extra-frames", "-0.5"])
    assert "--keyframe-extra-frames must be >= 0; got -0.5." in capsys.readouterr().err


def test_training_prints_a_summary_with_the_final_evaluation_and_every_path(tmp_path, capsys):
    summary = train.main(_tiny_run_argv("serial", tmp_path))
    out = capsys.readouterr().out
    # The first line says what the run will do, before its first batch; the first update is shown at once.
    lines = out.splitlines()
    assert lines[0] == (
        f"PPO on SyntheticVREdgeEnv (2 users): 2 envs, backend serial, policy in this process, 64 timesteps "
        f"(2 updates of 2 x 16), device cpu, seed 7; writing to {tmp_path}"
    )
    assert lines[1].startswith("update 1/2  step 32")
    assert "playing the tuned baselines on the 3 held-out seeds..." in lines
    assert f"PPO {summary['final_evaluation']['mean']:.1f}" in out
    for path in (summary["metrics_path"], summary["policy_path"], summary["plot_path"]):
        assert path in out
    assert "constant level" in out and "Trained 64 steps (2 updates, 2 envs, backend serial)" in out


def test_train_help_shows_a_quick_run(capsys):
    with pytest.raises(SystemExit):
        train.parse_args(["--help"])
    assert "quick run (4 updates, then the evaluation and the baselines): python -m examples.vr_edge.train " \
           "--total-timesteps 4096" in " ".join(capsys.readouterr().out.split())


def test_evaluate_help_lists_the_policy_as_required(capsys):
    with pytest.raises(SystemExit):
        evaluate.main(["--help"])
    help_text = capsys.readouterr().out
    assert "required arguments:\n  --policy" in help_text


# --- evaluation --------------------------------------------------------------------------------


def test_evaluate_reports_every_policy_with_paired_differences_reproducibly(tiny_runs, tmp_path, capsys):
    policy_paths = [tiny_runs["sync"]["policy_path"], tiny_runs["serial"]["policy_path"]]
    json_path, markdown_path = tmp_path / "eval.json", tmp_path / "eval.md"
    argv = ["--policy", *policy_paths, "--episodes", "3", "--json", str(json_path), "--markdown", str(markdown_path)]
    result = evaluate.main(argv)

    # Both runs trained with seed 7; the second is told apart by its position.
    assert list(result["returns"]) == [*BASELINES, "PPO (seed 7)", "PPO (seed 7, #2)"]
    assert result["env_kwargs"]["traces"] == "test" and result["env_kwargs"]["trace_jitter"] == 0.0
    for score in result["returns"].values():
        assert score["ci95_low"] <= score["mean"] <= score["ci95_high"]
    differences = result["paired_differences"]["PPO (seed 7)"]
    per_episode = result["per_episode_returns"]
    for baseline, score in differences.items():
        expected = np.mean(np.array(per_episode["PPO (seed 7)"]) - np.array(per_episode[baseline]))
        assert score["mean"] == pytest.approx(expected)
    # The regime breakdown: each seed's regime is the one its reset draws, the best baseline
    # is the one with the highest mean, and each regime's means come from its own episodes.
    env = SyntheticVREdgeEnv(**result["env_kwargs"])
    seeds = range(evaluate.DEFAULT_FIRST_SEED, evaluate.DEFAULT_FIRST_SEED + 3)
    assert result["regimes"] == [env.reset(seed=seed)[1]["regime"] for seed in seeds]
    baseline_means = {name: result["returns"][name]["mean"] for name in BASELINES}
    assert result["best_baseline"] == max(baseline_means, key=baseline_means.get)
    assert sum(result["regime_episodes"].values()) == 3
    regimes = np.array(result["regimes"])
    ppo, best = np.array(per_episode["PPO (seed 7)"]), np.array(per_episode[result["best_baseline"]])
    for regime, mean in result["returns_by_regime"]["PPO (seed 7)"].items():
        assert mean == pytest.approx(np.mean(ppo[regimes == regime]))
        expected = np.mean(ppo[regimes == regime] - best[regimes == regime])
        assert result["paired_differences_by_regime"]["PPO (seed 7)"][regime]["mean"] == pytest.approx(expected)
    assert json.loads(json_path.read_text()) == json.loads(json.dumps(result, allow_nan=False))
    captured = capsys.readouterr()
    tables = captured.out
    assert "| PPO (seed 7) |" in tables and "| joint greedy |" in tables
    # Progress on stderr: what is to play, then a line per policy with its mean return.
    progress = captured.err.splitlines()
    played = len(BASELINES) + 2
    assert progress[0] == f"evaluate: {played} to play on 3 episodes each"
    assert len(progress) == played + 1
    mean = result["returns"]["PPO (seed 7, #2)"]["mean"]
    assert progress[-1].startswith(f"evaluate: {played}/{played} PPO (seed 7, #2): 3 episodes, mean return {mean:.1f} (")
    assert "evaluate:" not in tables
    assert markdown_path.read_text().strip() in tables
    assert evaluate.main(argv)["per_episode_returns"] == per_episode


def test_an_interval_over_one_episode_has_no_bounds_and_prints_as_such():
    single = evaluate._interval(np.array([2.5]))
    assert single == {"mean": 2.5, "ci95_low": None, "ci95_high": None}
    assert evaluate._difference_cell(single) == "+2.5 [n/a]"
    pair = evaluate._interval(np.array([1.0, 3.0]))
    assert pair["ci95_low"] < 2.0 < pair["ci95_high"]
    assert evaluate._difference_cell(pair) == f"+2.0 [{pair['ci95_low']:+.1f}, {pair['ci95_high']:+.1f}]"


def test_controllers_played_in_separate_runs_and_the_clairvoyant_reference_come_together(tiny_runs, tmp_path):
    policy = tiny_runs["sync"]["policy_path"]
    common = ["--policy", policy, "--episodes", "3"]
    parts = []
    for index, names in enumerate((["constant level", "deadline rule"], ["joint expected reward"])):
        path = tmp_path / f"part{index}.json"
        evaluate.main([*common, "--baselines", *names, "--clairvoyant-horizon", "1", "--json", str(path)])
        parts.append(path)
    # `--baselines` alone: play none here, only the policy; the rest is lent.
    together = evaluate.main([*common, "--baselines", "--baselines-from", *map(str, parts), "--clairvoyant-horizon", "1"])
    alone = evaluate.main([*common, "--baselines", "constant level", "deadline rule", "joint expected reward",
                           "--clairvoyant-horizon", "1"])
    assert together["per_episode_returns"] == alone["per_episode_returns"]
    reference = "clairvoyant (1 step ahead)"
    assert together["references"] == [reference] and reference in together["returns"]
    assert reference != together["best_baseline"] and reference in together["differences_to_best"]
    assert list(together["returns"]) == ["constant level", "deadline rule", "joint expected reward", "PPO (seed 7)", reference]
    # Episodes of other seeds cannot stand in.
    with pytest.raises(ValueError, match="differs in 'first_seed'"):
        evaluate.main([*common, "--first-seed", "5", "--baselines-from", str(parts[0])])


def test_the_recorded_delayed_variant_run_follows_from_its_per_episode_returns():
    docs = Path(__file__).resolve().parents[2] / "docs"
    recorded = json.loads((docs / "vr-edge-ppo-delayed-reports.json").read_text())
    variants = json.loads((docs / "vr-edge-env-variants.json").read_text())["variants"]
    for section, variant in (("delayed variant", "late noisy reports"), ("today's env", "today (all off)")):
        returns = recorded["per_episode_returns"][section]
        # The controllers played the env-variants measurement's episodes, return for return.
        for name in ("predictive lookahead", "joint lookahead", "deadline rule", "clairvoyant (1 step ahead)"):
            assert returns[name] == variants[variant]["per_episode_returns"][name], (section, name)
        ppo = np.array(returns["PPO (seed 1)"])
        for name, difference in recorded[section]["ppo_minus"].items():
            assert difference == evaluate._interval(ppo - np.array(returns[name])), (section, name)
    assert recorded["training"]["delayed variant"]["env_kwargs"] == {
        "num_users": 8, "episode_length": 200, "simulation_substeps": 1, "report_delay_steps": 1, "report_noise": 0.15,
    }
