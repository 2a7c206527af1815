"""The overlapped PPO example: with the lag on, the trainer learns from batches a policy one update
behind acted on, as recorded; the comparison runs both loops interleaved and reports the split."""

from __future__ import annotations

import json

import numpy as np
import pytest

from examples.overlap_ppo import compare, train

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(autouse=True)
def _one_torch_thread(one_torch_thread):
    """Every test here runs PyTorch on one thread (the fixture in tests/conftest.py)."""


def test_a_short_run_with_the_lag_records_one_update_of_lag_and_learns_from_real_episodes(capsys):
    args = train.Args(total_timesteps=4 * 64 * 4, num_envs=4, num_steps=64, backend="sync", log_every=0, max_policy_lag=1)
    result = train.train(args)
    # The first line says what the run will do, before the env and the collector are built.
    assert capsys.readouterr().out.splitlines()[0] == (
        "PPO on CartPole-v1: 4 envs, backend sync, policy_placement=main, max_policy_lag=1, 1,024 timesteps "
        "(4 updates of 4x64), device cpu, seed 0"
    )
    assert result["steps"] == 1024 and result["episodes"] > 0
    assert result["max_observed_lag"] == 1
    assert np.isfinite(result["final_return"]) and result["update_seconds"] > 0 and result["update_cpu_seconds"] > 0


def test_help_shows_each_flag_s_meaning_and_default_and_a_quick_run(capsys):
    with pytest.raises(SystemExit):
        train.parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--max-policy-lag MAX_POLICY_LAG 0: collect, then update; 1: collect the next batch while updating on " \
           "this one. (default: 1)" in text
    assert "quick run (20 updates): python -m examples.overlap_ppo.train --total-timesteps 20480" in text


def test_the_trainer_s_frames_network_takes_uint8_frame_stacks():
    agent = train.Agent((84, 84, 4), 4)
    policy = train.ActingPolicy(agent, seed=0)
    output = policy(np.zeros((3, 84, 84, 4), dtype=np.uint8))
    assert output.actions.shape == (3,) and output.values.shape == (3,) and output.log_probs.shape == (3,)


def test_the_comparison_runs_both_lags_interleaved_and_reports_the_split(tmp_path):
    path = tmp_path / "overlap.json"
    report = compare.main(["--quick", "--workloads", "CartPole-v1", "--backend", "sync", "--output", str(path)])
    (entry,) = report["workloads"]
    assert len(entry["speedup"]["per_round"]) == 2 and entry["speedup"]["min"] > 0
    assert [run["args"]["seed"] for run in entry["runs"]["lag 0"]] == [0, 1]
    assert [run["args"]["max_policy_lag"] for run in entry["runs"]["lag 1"]] == [1, 1]
    assert 0 < entry["turn_taking_split"]["collection_share_median"] < 1
    assert 1 <= entry["turn_taking_split"]["bound_median"] <= 2
    assert json.loads(path.read_text())["workloads"][0]["workload"] == "CartPole-v1"
