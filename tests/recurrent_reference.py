"""The hand-written reference for recurrent rollouts: one env at a time, state reset at each reset."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from parallel_rollouts import PolicyOutput


def state_leaves(state, path=""):
    """``(path, NumPy array)`` for each leaf of a state (dicts, tuples, lists; arrays or tensors)."""
    if isinstance(state, dict):
        for key, value in state.items():
            yield from state_leaves(value, f"{path}[{key!r}]")
    elif isinstance(state, (tuple, list)):
        for index, value in enumerate(state):
            yield from state_leaves(value, f"{path}[{index}]")
    else:
        yield path, state if isinstance(state, np.ndarray) else state.detach().numpy()


def assert_state_row(batch_state, env: int, expected, where: str) -> None:
    """Row ``env`` of each leaf of ``batch_state`` (``[..., N, ...]`` leaves indexed by ``env``
    already applied by the caller when it is a row) equals the one-env state ``expected``."""
    got = dict(state_leaves(batch_state))
    for path, leaf in state_leaves(expected):
        np.testing.assert_array_equal(got[path][env], leaf[0], err_msg=f"{where}: state{path}")


def _row(state, t: int):
    """The leaves of row ``t`` of a ``[T, N, ...]`` state field, in its nesting."""
    if isinstance(state, dict):
        return {key: _row(value, t) for key, value in state.items()}
    if isinstance(state, (tuple, list)):
        return type(state)(_row(value, t) for value in state)
    return state[t]


def assert_matches_reference(batches, policy, make_env, states_kept_when_lost: bool = True) -> int:
    """Replay every env alone on a fresh env made by ``make_env``, from the recorded episode
    seeds, with ``policy`` called on that env alone and its state reset to
    ``policy.initial_state(1)`` exactly at each reset; every action, value, observation, reward,
    flag and every recorded state must equal the batches'. An env starts afresh where its first
    row's episode seed is not the one it was running (its worker was replaced). Returns the
    number of episode starts seen after row 0 (so a test can require autoresets mid-rollout).

    ``states_kept_when_lost=False``: a worker lost part-way took the ``final_states`` and
    ``states`` of its envs' valid rows with it (rollout workers), so they are zero there.
    """
    starts_seen = 0
    for env_index in range(batches[0].num_envs):
        env = make_env()
        observation = state = running_seed = None
        for collect, batch in enumerate(batches):
            if observation is not None and int(batch.step_episode_seeds[0, env_index]) != running_seed:
                assert env_index in batch.lost_env_indices or env_index in batches[collect - 1].lost_env_indices
                observation = None
            states_recorded = states_kept_when_lost or batch.valid[-1, env_index]
            for t in range(batch.horizon):
                where = f"collect {collect}, row {t}, env {env_index}"
                if not batch.valid[t, env_index]:
                    observation = None
                    continue
                running_seed = int(batch.step_episode_seeds[t, env_index])
                start = observation is None
                if start:
                    observation, _ = env.reset(seed=running_seed)
                    state = policy.initial_state(1)
                    starts_seen += t > 0
                np.testing.assert_array_equal(batch.observations[t, env_index], observation, err_msg=where)
                assert batch.episode_starts[t, env_index] == start, f"{where}: episode_starts"
                if t == 0:
                    assert_state_row(batch.initial_state, env_index, state, f"{where}: initial_state")
                if batch.states is not None and states_recorded:
                    assert_state_row(_row(batch.states, t), env_index, state, f"{where}: states")
                output, next_state = policy(observation[None], state, np.array([start]))
                actions = output.actions if isinstance(output, PolicyOutput) else output
                action = int(np.asarray(actions)[0])
                assert int(batch.actions[t, env_index]) == action, where
                if isinstance(output, PolicyOutput):
                    assert batch.values[t, env_index] == np.float32(np.asarray(output.values)[0]), f"{where}: value"
                observation, reward, terminated, truncated, _ = env.step(action)
                assert batch.rewards[t, env_index] == reward, where
                assert (batch.terminations[t, env_index], batch.truncations[t, env_index]) == (terminated, truncated), where
                state = next_state
                if terminated or truncated:
                    if states_recorded:
                        assert_state_row(_row(batch.final_states, t), env_index, next_state, f"{where}: final_states")
                    observation = None
                else:
                    for path, leaf in state_leaves(batch.final_states):
                        assert not leaf[t, env_index].any(), f"{where}: final_states{path} not zero without an end"
            if batch.valid[-1, env_index]:
                expected = policy.initial_state(1) if observation is None else state
                assert_state_row(batch.bootstrap_states, env_index, expected, f"collect {collect}, env {env_index}: bootstrap_states")
        env.close()
    return starts_seen


def cartpole_with_short_episodes() -> gym.Env:
    """CartPole truncated at 13 steps: terminations and truncations both land mid-rollout."""
    return gym.make("CartPole-v1", max_episode_steps=13)


def short_crashing_cartpole(at_step: int, marker: str) -> gym.Env:
    """:func:`cartpole_with_short_episodes` whose process is killed at its ``at_step``-th step, once."""
    from tests.envs import CrashingCartPole

    return gym.wrappers.TimeLimit(CrashingCartPole(at_step, "kill", marker), max_episode_steps=13)
