"""sb3-contrib's RecurrentPPO (an LSTM policy) trains on ParallelVecEnv, on CartPole with the velocities hidden.

A short run (4 envs, 4 rollouts of 32 steps) on each backend: the rollouts it learned from have
SB3's shapes, the episode starts its buffer recorded are the adapter's dones one step later,
the weights moved and equal those of the same run on DummyVecEnv replaying the adapter's episode
seeds, and `predict` carries the LSTM state and resets it at an episode start.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import DummyVecEnv

from examples.recurrent_ppo.env import KEPT_INDICES, make_env
from parallel_rollouts.sb3 import ParallelVecEnv
from tests.sb3_envs import replaying

NUM_ENVS = 4
N_STEPS = 32
ROLLOUTS = 4
LSTM_HIDDEN_SIZE = 16


class RecordRollouts(BaseCallback):
    """Keeps, per rollout, the dones the vec env returned at each step and a copy of the filled buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.dones: list[list[np.ndarray]] = []
        self.buffers: list[dict[str, np.ndarray]] = []

    def _on_rollout_start(self) -> None:
        self.dones.append([])

    def _on_step(self) -> bool:
        self.dones[-1].append(np.array(self.locals["dones"]))
        return True

    def _on_rollout_end(self) -> None:
        buffer = self.model.rollout_buffer
        self.buffers.append(
            {
                "observations": buffer.observations.copy(),
                "episode_starts": buffer.episode_starts.copy(),
                "hidden_states_pi": buffer.hidden_states_pi.copy(),
            }
        )


def train(venv) -> tuple[RecurrentPPO, RecordRollouts]:
    model = RecurrentPPO(
        "MlpLstmPolicy",
        venv,
        n_steps=N_STEPS,
        batch_size=64,
        n_epochs=2,
        seed=0,
        device="cpu",
        policy_kwargs={"lstm_hidden_size": LSTM_HIDDEN_SIZE, "net_arch": [16]},
    )
    record = RecordRollouts()
    model.learn(total_timesteps=NUM_ENVS * N_STEPS * ROLLOUTS, callback=record)
    return model, record


def weights(model: RecurrentPPO) -> dict[str, torch.Tensor]:
    return {name: value.clone() for name, value in model.policy.state_dict().items()}


@pytest.mark.parametrize("backend", ["sync", "async"])
def test_recurrent_ppo_learns_from_the_adapters_rollouts_as_from_dummy_vec_env(backend):
    torch.set_num_threads(1)
    with ParallelVecEnv([make_env] * NUM_ENVS, backend) as ours:
        model, record = train(ours)
        control = DummyVecEnv([replaying(make_env, index, ours) for index in range(NUM_ENVS)])
        control_model, control_record = train(control)
        control.close()

    # Every rollout it learned from: the velocity-hidden observations of every env at every step.
    assert len(record.buffers) == ROLLOUTS
    for buffer in record.buffers:
        assert buffer["observations"].shape == (N_STEPS, NUM_ENVS, len(KEPT_INDICES))
        assert buffer["episode_starts"].shape == (N_STEPS, NUM_ENVS)
        assert buffer["hidden_states_pi"].shape == (N_STEPS, 1, NUM_ENVS, LSTM_HIDDEN_SIZE)
    # An episode starts on the step after the adapter reported it done: the first step of the
    # run for every env, then wherever `dones` was true one step earlier, across rollouts too.
    dones = np.concatenate([np.stack(rollout) for rollout in record.dones])
    episode_starts = np.concatenate([buffer["episode_starts"] for buffer in record.buffers])
    assert dones.shape == episode_starts.shape == (N_STEPS * ROLLOUTS, NUM_ENVS)
    assert episode_starts[0].all()
    np.testing.assert_array_equal(episode_starts[1:], dones[:-1].astype(np.float32))
    assert dones.sum() > 10  # random-ish CartPole episodes end often: the resets were exercised
    # Inside an episode the buffer holds the LSTM state carried from the step before, never zeros.
    hidden = np.concatenate([buffer["hidden_states_pi"][:, 0] for buffer in record.buffers])
    assert np.abs(hidden[1:][episode_starts[1:] == 0]).max(axis=-1).min() > 0

    # The same training on DummyVecEnv replaying the adapter's seeds: the same data, the same weights.
    for buffer, control_buffer in zip(record.buffers, control_record.buffers):
        for name in buffer:
            np.testing.assert_array_equal(buffer[name], control_buffer[name], err_msg=name)
    trained, control_trained = weights(model), weights(control_model)
    for name, value in trained.items():
        assert torch.equal(value, control_trained[name]), name
    untrained = RecurrentPPO(
        "MlpLstmPolicy", DummyVecEnv([make_env]), seed=0, device="cpu",
        policy_kwargs={"lstm_hidden_size": LSTM_HIDDEN_SIZE, "net_arch": [16]},
    ).policy.state_dict()
    assert any(not torch.equal(untrained[name], value) for name, value in trained.items())


def test_a_trained_recurrent_ppo_predicts_with_its_state_on_the_adapter():
    torch.set_num_threads(1)
    with ParallelVecEnv([make_env] * NUM_ENVS, "sync", seed=3) as venv:
        model, _ = train(venv)
        observations = venv.reset()
        episode_starts = np.ones(NUM_ENVS, dtype=bool)
        state = None
        for _ in range(20):
            actions, state = model.predict(observations, state=state, episode_start=episode_starts, deterministic=True)
            assert actions.shape == (NUM_ENVS,)
            observations, _, dones, _ = venv.step(actions)
            episode_starts = dones
        hidden, cell = state
        assert hidden.shape == cell.shape == (1, NUM_ENVS, LSTM_HIDDEN_SIZE)
        assert np.isfinite(hidden).all() and np.abs(hidden).max() > 0

        # The state matters (the velocities are hidden), and an episode start resets it: from a
        # carried state, predicting with episode_start=True equals predicting from no state.
        fresh, _ = model.predict(observations, state=None, episode_start=np.ones(NUM_ENVS, bool), deterministic=True)
        reset, _ = model.predict(observations, state=state, episode_start=np.ones(NUM_ENVS, bool), deterministic=True)
        np.testing.assert_array_equal(fresh, reset)
        _, fresh_state = model.predict(observations, state=None, episode_start=np.ones(NUM_ENVS, bool))
        _, carried_state = model.predict(observations, state=state, episode_start=np.zeros(NUM_ENVS, bool))
        assert not np.allclose(fresh_state[0], carried_state[0])
