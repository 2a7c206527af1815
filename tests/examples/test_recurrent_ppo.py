"""The recurrent PPO example: the states it recomputes are the ones the policy saw, and a short run trains.

The recomputation is the point of the example: during the update, `GRUAgent.unroll` rebuilds the
state of every row from the batch's `initial_state` and `episode_starts`. A wrapping policy records
the states the collector actually handed the policy, row by row over two collects with autoresets
mid-rollout, and they must be equal to the recomputed ones bit for bit, as must the state at each
final observation and at the bootstrap row that the collector stored.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from examples.recurrent_ppo import compare, train
from examples.recurrent_ppo.agent import GRUAgent, GRUCollectorPolicy, make_agent
from examples.recurrent_ppo.env import NUM_ACTIONS, OBSERVATION_SCALE

NUM_ENVS = 4
HORIZON = 48


class RecordingPolicy(GRUCollectorPolicy):
    """A `GRUCollectorPolicy` that keeps a copy of every state and episode-start row it was called with."""

    def __init__(self, agent: GRUAgent) -> None:
        super().__init__(agent)
        self.states: list[torch.Tensor] = []
        self.episode_starts: list[np.ndarray] = []

    def __call__(self, observations, state, episode_starts):
        self.states.append(torch.as_tensor(state).clone())
        self.episode_starts.append(np.array(episode_starts))
        return super().__call__(observations, state, episode_starts)


@pytest.fixture(autouse=True)
def one_thread():
    # train.train sets both for its run; the rest of the suite gets its own settings back.
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(deterministic)


def assert_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Equal up to float32 rounding (a few units in the last place), nothing more."""
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", ["sync", "async"])
def test_states_recomputed_from_initial_state_and_episode_starts_are_the_states_the_policy_saw(backend):
    torch.manual_seed(0)
    agent = make_agent("gru", OBSERVATION_SCALE, NUM_ACTIONS, hidden_size=8)
    policy = RecordingPolicy(agent)
    args = train.Args(backend=backend, num_envs=NUM_ENVS, horizon=HORIZON)
    with train.make_rollout_collector(args, policy, NUM_ENVS, HORIZON, seed=7) as collector:
        batches = [collector.collect(), collector.collect()]

    seen_states = torch.stack(policy.states).reshape(2, HORIZON, NUM_ENVS, 2, 8)
    seen_starts = np.stack(policy.episode_starts).reshape(2, HORIZON, NUM_ENVS)
    for index, batch in enumerate(batches):
        # Random-ish CartPole episodes last tens of steps: states were reset mid-rollout.
        assert batch.episode_starts[1:].sum() >= NUM_ENVS
        np.testing.assert_array_equal(batch.episode_starts, seen_starts[index])
        with torch.no_grad():
            rollout = agent.unroll(
                torch.tensor(batch.observations), torch.as_tensor(batch.initial_state), torch.tensor(batch.episode_starts)
            )
        # The example's unroll encodes every row in one matrix product, where the policy encoded
        # one row of envs at a time: products of different shapes may round the last bit apart
        # on some CPUs (tests/test_recurrent.py replays row by row and matches bit for bit).
        # A state not reset, or carried from the wrong row, differs by far more.
        assert_close(rollout.input_states, seen_states[index])
        # The reset really happened: at every episode start the state the policy saw is zero.
        assert not seen_states[index][torch.tensor(batch.episode_starts)].any()
        # The collector's state at each final observation and at the bootstrap row are the ones
        # the example recomputes to bootstrap truncated episodes and the rollout's end.
        mask = torch.tensor(batch.final_observation_mask)
        assert_close(rollout.next_states[mask], torch.as_tensor(batch.final_states)[mask])
        ended = torch.tensor(batch.dones[-1])[:, None, None]
        recomputed_bootstrap = torch.where(ended, agent.initial_state(NUM_ENVS), rollout.next_states[-1])
        assert_close(recomputed_bootstrap, torch.as_tensor(batch.bootstrap_states))
        # ...and the values the policy returned during collection follow from those states.
        assert_close(rollout.values, torch.tensor(batch.values))
    # The state carried over between the two collects.
    assert torch.equal(torch.as_tensor(batches[1].initial_state), torch.as_tensor(batches[0].bootstrap_states))


def tiny_args(policy: str, seed: int = 3) -> train.Args:
    return train.Args(
        policy=policy,
        seed=seed,
        num_envs=4,
        horizon=32,
        total_timesteps=4 * 32 * 3,
        hidden_size=16,
        update_epochs=2,
        eval_every=1,
        eval_episodes=2,
    )


@pytest.mark.parametrize("policy", ["gru", "mlp"])
def test_a_short_training_run_updates_with_finite_losses_and_is_reproducible(policy):
    results = train.train(tiny_args(policy))
    again = train.train(tiny_args(policy))

    assert [metrics["update"] for metrics in results["updates"]] == [1, 2, 3]
    for metrics in results["updates"]:
        for name in ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction"):
            assert math.isfinite(metrics[name]), (name, metrics)
        assert metrics["approx_kl"] != 0.0  # the epochs moved the policy
        # The update's recomputed values are the ones the policy returned while collecting.
        assert metrics["value_recompute_error"] == 0.0
    assert len(results["evaluations"]) == 3
    assert all(1 <= evaluation["return_mean"] <= 500 for evaluation in results["evaluations"])
    assert results["score"] == np.mean([evaluation["return_mean"] for evaluation in results["evaluations"]])
    # The same seed gives the same run, bit for bit (timings aside).
    for metrics, repeated in zip(results["updates"], again["updates"]):
        assert metrics == repeated
    assert results["evaluations"] == again["evaluations"]


def test_main_says_what_it_will_do_before_the_first_batch_and_help_shows_a_quick_run(capsys):
    train.main(["--num-envs", "4", "--horizon", "32", "--total-timesteps", "128", "--hidden-size", "8",
                "--update-epochs", "1", "--eval-every", "1", "--eval-episodes", "2"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("GRU PPO on CartPole-v1 with the velocities hidden: 4 envs, backend sync, 128 timesteps "
                        "(1 update of 4 x 32), evaluating every update, device cpu, seed 1")
    assert lines[1].startswith("update    1  step     128  eval return")
    with pytest.raises(SystemExit):
        train.parse_args(["--help"])
    assert "quick run (20 updates, 2 evaluations): python -m examples.recurrent_ppo.train --total-timesteps 10240" \
        in " ".join(capsys.readouterr().out.split())


def test_minibatches_must_split_the_envs_into_whole_groups():
    with pytest.raises(ValueError, match="`num_minibatches` must divide `num_envs`"):
        train.Args(num_envs=6, num_minibatches=4)


def test_compare_writes_results_and_a_plot(tmp_path):
    results_path, plot_path = tmp_path / "results.json", tmp_path / "returns.png"
    status = compare.main(
        [
            "--seeds", "5",
            "--jobs", "2",
            "--results", str(results_path),
            "--plot", str(plot_path),
            "--required-ratio", "0",
            "--",
            "--total-timesteps", "1024", "--num-envs", "4", "--horizon", "32", "--update-epochs", "1",
            "--eval-every", "4", "--eval-episodes", "2",
        ]
    )  # fmt: skip

    assert status == 0
    results = json.loads(results_path.read_text())
    (entry,) = results["summary"]["per_seed"]
    assert entry["seed"] == 5 and entry["holds"]
    assert entry["ratio"] == entry["gru_score"] / entry["mlp_score"]
    for policy in ("gru", "mlp"):
        run = results["runs"][policy]["5"]
        assert run["args"]["policy"] == policy and run["args"]["total_timesteps"] == 1024
        assert [evaluation["update"] for evaluation in run["evaluations"]] == [4, 8]
        assert run["max_value_recompute_error"] == 0.0
        assert "updates" not in run  # the per-update metrics stay out of the committed results
    assert plot_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
