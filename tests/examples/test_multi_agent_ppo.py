"""The shared-parameter PPO example on mpe2's simple_spread: a short run trains on every agent's
rows and evaluates the trained and the random policy on the same episodes; the update leaves
rows whose agent was not live out of the loss."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from examples.multi_agent_ppo import train
from parallel_rollouts import ParallelRolloutCollector
from tests.agent_envs import make_relay

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(autouse=True)
def _one_torch_thread(one_torch_thread):
    """Every test here runs PyTorch on one thread (the fixture in tests/conftest.py)."""


def test_a_short_run_trains_on_every_agent_and_evaluates_against_random(tmp_path, capsys):
    output = tmp_path / "result.json"
    args = train.Args(total_timesteps=3 * 4 * 50, num_envs=4, num_steps=50, backend="sync", eval_episodes=1,
                      log_every=1, output=str(output))
    result = train.train(args)
    # What the run will do, before the env is imported and built; then the first update at once.
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        "shared-parameter PPO on simple_spread: 4 envs x 3 agents, backend sync, 600 env steps (3 updates of 4x50), "
        "then 4 evaluation episodes per policy, device cpu, seed 0"
    )
    assert lines[1].startswith("update 1/3: mean agent return ")
    assert result["env_steps"] == 600
    assert np.isfinite(result["eval_return_trained"]) and np.isfinite(result["eval_return_random"])
    assert result["eval_return_trained"] != result["eval_return_random"]
    assert json.loads(output.read_text())["env_steps"] == 600


def test_help_shows_each_flag_s_meaning_and_default_and_a_quick_run(capsys):
    with pytest.raises(SystemExit):
        train.parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--learning-rate LEARNING_RATE Adam's step size. (default: 0.0007)" in text
    assert "--torch-threads TORCH_THREADS Threads for PyTorch's operators (0: PyTorch's default, one per core; 1 " \
           "keeps the update fast when other work shares the cores). (default: 0)" in text
    assert "quick run (12 updates, short evaluation): python -m examples.multi_agent_ppo.train --total-timesteps 9600 " \
           "--eval-episodes 5 --torch-threads 1" in text


def test_the_update_learns_only_from_rows_whose_agent_was_live():
    agent = train.Agent(3, 3)
    policy = train.ActingPolicy(agent, seed=0)
    with ParallelRolloutCollector([make_relay] * 2, lambda obs: policy(obs.astype(np.float32)), "sync", horizon=30, seed=1) as collector:
        batch = collector.collect()
    assert not batch.valid.all()
    seen = []
    original = agent.forward

    def recording_forward(observations):
        seen.append(observations.shape[0])
        return original(observations)

    agent.forward = recording_forward
    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-3)
    args = train.Args(num_minibatches=1, update_epochs=1)
    train.ppo_update(agent, optimizer, batch, args, torch.Generator().manual_seed(0))
    # One minibatch of exactly the valid rows (after the value passes over final and bootstrap rows).
    assert seen[-1] == int(batch.valid.sum())
