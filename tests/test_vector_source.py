"""Gymnasium vector envs as a rollout source, in every autoreset mode, against a per-env reference."""

from __future__ import annotations

from functools import partial

import gymnasium as gym
import numpy as np
import pytest

from parallel_rollouts import ParallelRolloutCollector
from parallel_rollouts.errors import ConfigurationError, ObservationError, SpaceError, WorkerDiedError, WorkerError
from parallel_rollouts.config.seeding import episode_seed
from tests.batch_compare import assert_batches_identical
from tests.envs import counting
from tests.leaks import descendants_of, run_script, still_running
from tests.vector_envs import (
    MODES,
    SINGLE_ENVS,
    async_vector_fn,
    cartpole_vector,
    failing_vector,
    int_seed_only,
    misdeclared,
    nan_at_episode_end,
    nan_observation,
    reset_fails,
    sync_vector,
    sync_vector_fn,
)

HORIZON = 40


def _flat(observation) -> np.ndarray:
    if isinstance(observation, dict):
        return np.concatenate([np.ravel(np.asarray(observation[key], dtype=np.float64)) for key in sorted(observation)])
    return np.ravel(np.asarray(observation, dtype=np.float64))


def _batch_flat(observations, index) -> np.ndarray:
    if isinstance(observations, dict):
        return np.concatenate(
            [np.asarray(observations[key][index], dtype=np.float64).reshape(-1) for key in sorted(observations)]
        )
    return np.asarray(observations[index], dtype=np.float64).reshape(-1)


def _replay_one_env(make_env, root_seed: int, env_index: int, actions: np.ndarray, mode: str) -> dict:
    """Step one single env as a vector env in ``mode`` steps its sub-env, with the recorded actions."""
    env = make_env()
    episode = 0
    observation, _ = env.reset(seed=episode_seed(root_seed, env_index, episode))
    rows: dict[str, list] = {key: [] for key in ("obs", "reward", "term", "trunc", "final", "valid")}
    pending_reset = False
    for action in actions:
        rows["obs"].append(_flat(observation))
        if pending_reset:
            observation, _ = env.reset()
            reward, terminated, truncated, valid, final = 0.0, False, False, False, None
            pending_reset = False
        else:
            observation, reward, terminated, truncated, _ = env.step(action)
            valid, final = True, None
            if terminated or truncated:
                final = _flat(observation)
                if mode == "same_step":
                    observation, _ = env.reset()
                elif mode == "disabled":
                    episode += 1
                    observation, _ = env.reset(seed=episode_seed(root_seed, env_index, episode))
                else:
                    pending_reset = True
        rows["reward"].append(reward)
        rows["term"].append(terminated)
        rows["trunc"].append(truncated)
        rows["final"].append(final)
        rows["valid"].append(valid)
    rows["obs"].append(_flat(observation))
    env.close()
    return rows


@pytest.mark.parametrize("env_name", ["cartpole", "dict"])
@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
def test_every_autoreset_mode_matches_single_envs_stepped_with_the_same_seeds_and_actions(env_name, mode, core):
    num_envs = 3
    with ParallelRolloutCollector(
        sync_vector(env_name, num_envs, mode), None, backend="sync", horizon=HORIZON, seed=11, core=core
    ) as collector:
        first, second = collector.collect(), collector.collect()
    assert first.dones.sum() >= 4, "the rollout must cross several episode ends"
    for env in range(num_envs):
        actions = np.concatenate([first.actions[:, env], second.actions[:, env]])
        expected = _replay_one_env(SINGLE_ENVS[env_name], 11, env, actions, mode)
        for part, batch in enumerate((first, second)):
            rows = slice(part * HORIZON, (part + 1) * HORIZON)
            observations = np.stack([_batch_flat(batch.observations, (t, env)) for t in range(HORIZON)])
            np.testing.assert_array_equal(observations, np.stack(expected["obs"][rows]))
            np.testing.assert_array_equal(batch.rewards[:, env], expected["reward"][rows])
            np.testing.assert_array_equal(batch.terminations[:, env], expected["term"][rows])
            np.testing.assert_array_equal(batch.truncations[:, env], expected["trunc"][rows])
            np.testing.assert_array_equal(batch.valid[:, env], expected["valid"][rows])
            for t, final in enumerate(expected["final"][rows]):
                assert batch.final_observation_mask[t, env] == (final is not None)
                if final is not None:
                    np.testing.assert_array_equal(_batch_flat(batch.final_observations, (t, env)), final)
        np.testing.assert_array_equal(
            _batch_flat(second.bootstrap_observations, env), expected["obs"][2 * HORIZON]
        )
    if mode != "next_step":
        assert first.valid.all() and second.valid.all()


@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
def test_episode_books_count_valid_steps_and_record_the_seeds_the_collector_chose(mode):
    with ParallelRolloutCollector(sync_vector("cartpole", 2, mode), None, backend="sync", horizon=60, seed=4) as collector:
        batch = collector.collect()
    for env in range(2):
        ends = np.flatnonzero(batch.dones[:, env])
        start = 0
        entries = batch.episode_env_indices == env
        np.testing.assert_array_equal(batch.episode_end_steps[entries], ends)
        for number, (end, length, ret, seed) in enumerate(
            zip(ends, batch.episode_lengths[entries], batch.episode_returns[entries], batch.episode_seeds[entries])
        ):
            rows = slice(start, end + 1)
            assert length == batch.valid[rows, env].sum()
            assert ret == batch.rewards[rows, env][batch.valid[rows, env]].sum()
            if number == 0 or mode == "disabled":
                assert seed == episode_seed(4, env, number)
            else:
                assert seed == -1, "an autoreset the vector env made itself has no known seed"
            np.testing.assert_array_equal(batch.step_episode_seeds[rows, env][batch.valid[rows, env]], seed)
            start = end + 1


def test_next_step_reset_rows_hold_the_terminal_observation_and_cross_collect_boundaries():
    with ParallelRolloutCollector(sync_vector("cartpole", 4, "next_step"), None, backend="sync", horizon=7, seed=2) as collector:
        batches = [collector.collect() for _ in range(12)]
    crossed = 0
    for previous, batch in zip(batches, batches[1:]):
        for env in range(4):
            assert batch.valid[0, env] == (not previous.dones[-1, env])
            crossed += not batch.valid[0, env]
    assert crossed, "some episode must end on a rollout's last step"
    for batch in batches:
        t, env = np.nonzero(~batch.valid[1:])
        np.testing.assert_array_equal(batch.observations[t + 1, env], batch.final_observations[t, env])
        assert not batch.rewards[~batch.valid].any()
        assert not batch.dones[~batch.valid].any()


@pytest.mark.parametrize("backend", ["serial", "sync", "async"])
def test_disabled_autoreset_gives_the_batch_of_the_same_envs_as_factories(backend, core):
    factories = [sync_vector_fn("cartpole", 3, "disabled")] * 2
    options = {"num_workers": 2} if backend == "async" else {}
    with ParallelRolloutCollector(factories, None, backend=backend, horizon=30, seed=8, core=core, **options) as collector:
        from_vector = [collector.collect() for _ in range(2)]
    with ParallelRolloutCollector([SINGLE_ENVS["cartpole"]] * 6, None, backend="sync", horizon=30, seed=8) as collector:
        from_factories = [collector.collect() for _ in range(2)]
    for a, b in zip(from_vector, from_factories):
        assert_batches_identical(a, b)


@pytest.mark.parametrize("reuse_buffers", [False, True])
def test_every_backend_gives_the_same_batch_from_numpy_vectorized_cartpole(reuse_buffers):
    factories = [partial(cartpole_vector, 8)] * 2
    batches = {}
    for backend in ("serial", "sync", "async"):
        options = {"num_workers": 2} if backend == "async" else {}
        with ParallelRolloutCollector(
            factories, None, backend=backend, horizon=50, seed=5, reuse_buffers=reuse_buffers, **options
        ) as collector:
            assert collector.num_envs == 16
            batches[backend] = [collector.collect() for _ in range(2)]
            if reuse_buffers:  # the first batch was overwritten by the second
                batches[backend] = batches[backend][-1:]
    for backend in ("sync", "async"):
        for a, b in zip(batches["serial"], batches[backend]):
            assert_batches_identical(a, b)
    batch = batches["sync"][-1]
    assert (batch.episode_seeds == -1).all() and (batch.step_episode_seeds == -1).all()
    assert not batch.valid.all(), "CartPoleVectorEnv autoresets on the next step"


@pytest.mark.parametrize("mode", ["disabled", "same_step"])
def test_async_vector_env_factories_give_the_same_batch_on_the_async_backend_as_on_sync(mode):
    factories = [async_vector_fn("cartpole", 2, mode)] * 2
    batches = {}
    for backend in ("sync", "async"):
        options = {"num_workers": 2} if backend == "async" else {}
        with ParallelRolloutCollector(factories, None, backend=backend, horizon=30, seed=3, **options) as collector:
            batches[backend] = [collector.collect() for _ in range(2)]
    for a, b in zip(batches["sync"], batches["async"]):
        assert_batches_identical(a, b)


def test_closing_an_async_collector_ends_the_async_vector_env_processes_of_its_workers(no_leaks):
    collector = ParallelRolloutCollector([async_vector_fn("cartpole", 2, "disabled")] * 2, None, backend="async", horizon=8, seed=0, num_workers=2)
    collector.collect()
    workers = [worker.process.pid for worker in collector._backend.stepper.pool.workers]
    assert all(len(descendants_of(pid)) == 2 for pid in workers), "each sub-env runs in a child of its worker"
    collector.close()


def test_the_async_vector_env_processes_of_a_killed_worker_go_away(no_leaks):
    collector = ParallelRolloutCollector([async_vector_fn("cartpole", 2, "disabled")] * 2, None, backend="async", horizon=8, seed=0, num_workers=2)
    collector.collect()
    killed = collector._backend.stepper.pool.workers[1].process
    orphans = descendants_of(killed.pid)
    assert len(orphans) == 2, "each AsyncVectorEnv sub-env runs in a child of its worker"
    killed.kill()
    with pytest.raises(WorkerDiedError, match=r"worker 1 \(pid \d+, envs 2..3\) was killed by signal SIGKILL"):
        collector.collect()
    # Orphaned by the kill, they are no longer this process's descendants: no_leaks cannot see them.
    assert still_running(orphans) == []
    collector.close()


@pytest.mark.parametrize("ending", ["killed", "exits_without_close"])
def test_async_vector_env_processes_go_away_with_the_main_process(ending):
    program = run_script(
        f"""
        import os, signal, sys
        from parallel_rollouts import ParallelRolloutCollector
        from tests.leaks import descendants_of
        from tests.vector_envs import async_vector_fn
        if __name__ == "__main__":
            collector = ParallelRolloutCollector([async_vector_fn("cartpole", 2, "next_step")] * 2, None, backend="async",
                                                 horizon=8, seed=0, num_workers=2)
            collector.collect()
            tracker = [p.pid for p in __import__("psutil").Process().children() if "resource_tracker" in " ".join(p.cmdline())]
            print(*sorted(descendants_of(os.getpid()) - set(tracker)), flush=True)
            if {ending!r} == "killed":
                os.kill(os.getpid(), signal.SIGKILL)
        """,
        timeout=120,
    )
    assert program.returncode == (-9 if ending == "killed" else 0), program.stderr
    processes = [int(pid) for pid in program.stdout.split()]
    assert len(processes) == 6, "two workers, each with two AsyncVectorEnv sub-env processes"
    assert still_running(processes) == []


def test_a_vector_env_seeded_with_one_int_is_reproducible_from_the_root_seed():
    def run(seed):
        with ParallelRolloutCollector(cartpole_vector(6), None, backend="sync", horizon=30, seed=seed) as collector:
            return collector.collect()

    assert_batches_identical(run(3), run(3))
    assert not np.array_equal(run(3).observations, run(4).observations)


def test_a_policy_failure_drops_the_rollout_and_the_next_continues_where_the_envs_are():
    calls = {"n": 0}

    def flaky(observations):
        calls["n"] += 1
        if calls["n"] == 5:
            raise RuntimeError("policy failed")
        return np.zeros(observations.shape[0], dtype=np.int64)

    with ParallelRolloutCollector(sync_vector("cartpole", 2, "next_step"), flaky, backend="sync", horizon=8, seed=1) as collector:
        with pytest.raises(RuntimeError, match="policy failed"):
            collector.collect()
        batch = collector.collect()
    assert batch.horizon == 8


# -- bad inputs ------------------------------------------------------------------------------


def test_a_vector_env_whose_spaces_do_not_batch_its_single_spaces_is_rejected():
    with pytest.raises(SpaceError, match=r"observation_space .* does not batch its single_observation_space .* 3 times"):
        ParallelRolloutCollector(misdeclared(num_envs=3, declared_rows=2), None, backend="sync")


def test_a_vector_env_returning_another_number_of_envs_than_num_envs_is_named():
    with pytest.raises(ObservationError, match=r"num_envs=3 .* must have shape \(3, 4\)"):
        ParallelRolloutCollector(misdeclared(num_envs=3, declared_rows=3, returned_rows=2), None, backend="sync")


def test_a_closed_vector_env_is_rejected():
    vector_env = sync_vector("cartpole", 2, "same_step")
    vector_env.close()
    with pytest.raises(SpaceError, match="is closed; pass an open vector env"):
        ParallelRolloutCollector(vector_env, None, backend="sync")


def test_vector_envs_with_different_spaces_are_rejected():
    factories = [sync_vector_fn("cartpole", 2, "same_step"), sync_vector_fn("dict", 2, "same_step")]
    with pytest.raises(SpaceError, match="env 2 declares the observation space"):
        ParallelRolloutCollector(factories, None, backend="sync")


def test_single_envs_and_vector_envs_cannot_be_mixed():
    with pytest.raises(SpaceError, match=r"env_fns\[1\] returned a single env but env_fns\[0\] returned a vector env"):
        ParallelRolloutCollector([sync_vector_fn("cartpole", 2, "same_step"), SINGLE_ENVS["cartpole"]], None, backend="sync")


def test_a_vector_env_instance_needs_an_in_process_backend():
    with pytest.raises(ConfigurationError, match="takes factories, not a vector env instance"):
        ParallelRolloutCollector(cartpole_vector(2), None, backend="async")


def test_an_unknown_autoreset_mode_is_named():
    vector_env = cartpole_vector(2)
    vector_env.metadata = {**vector_env.metadata, "autoreset_mode": "Sometimes"}
    with pytest.raises(SpaceError, match="autoreset_mode.*'Sometimes'"):
        ParallelRolloutCollector(vector_env, None, backend="sync")


def test_a_same_step_vector_env_without_final_obs_is_named():
    class NoFinalObs(gym.vector.VectorWrapper):
        def step(self, actions):
            observations, rewards, terminations, truncations, infos = self.env.step(actions)
            infos = {key: value for key, value in infos.items() if "final" not in key}
            return observations, rewards, terminations, truncations, infos

    with ParallelRolloutCollector(NoFinalObs(sync_vector("cartpole", 2, "same_step")), None, backend="sync", horizon=60) as c:
        with pytest.raises(ObservationError, match="declares autoreset_mode SAME_STEP but its step info has no 'final_obs'"):
            c.collect()


@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
def test_info_keys_are_read_from_vector_infos_and_from_final_info_at_same_step_ends(mode):
    vector_env = gym.vector.SyncVectorEnv([partial(counting, 0, 3)] * 2, autoreset_mode=MODES[mode])
    with ParallelRolloutCollector(vector_env, None, backend="sync", horizon=9, info_keys=("step_in_episode",)) as collector:
        batch = collector.collect()
    column = batch.infos["step_in_episode"][:, 0]
    if mode == "next_step":
        np.testing.assert_array_equal(column, [1, 2, 3, np.nan, 1, 2, 3, np.nan, 1])
    else:
        np.testing.assert_array_equal(column, [1, 2, 3] * 3)


def test_an_info_key_missing_on_a_counted_step_is_named():
    with ParallelRolloutCollector(
        sync_vector("cartpole", 2, "same_step"), None, backend="sync", horizon=20, info_keys=("missing",)
    ) as collector:
        with pytest.raises(WorkerError, match="info has no key 'missing'"):
            collector.collect()


def test_a_vector_env_declaring_its_single_spaces_as_batched_ones_is_accepted():
    # EnvPool's Gymnasium envs declare observation_space == single_observation_space.
    vector_env = cartpole_vector(3)
    vector_env.observation_space = vector_env.single_observation_space
    with ParallelRolloutCollector(vector_env, None, backend="sync", horizon=5, seed=0) as collector:
        assert collector.collect().observations.shape == (5, 3, 4)


def test_a_vector_env_that_raises_names_its_envs_with_the_traceback():
    factories = [partial(cartpole_vector, 2), partial(failing_vector, 3)]
    with ParallelRolloutCollector(factories, None, backend="sync", horizon=5, seed=0) as collector:
        with pytest.raises(WorkerError, match=r"hosting envs 2..4 raised ValueError in `step`: the batch simulator diverged") as caught:
            collector.collect()
    assert caught.value.env_indices == (2, 3, 4)
    assert caught.value.remote_traceback.count("failing_step") == 2  # one traceback: the call and the frame


def test_a_vector_env_refusing_seed_lists_in_any_way_is_seeded_once_and_records_unknown_seeds():
    with ParallelRolloutCollector(int_seed_only(3), None, backend="sync", horizon=40, seed=6) as collector:
        batch = collector.collect()
    with ParallelRolloutCollector(cartpole_vector(3), None, backend="sync", horizon=40, seed=6) as collector:
        reference = collector.collect()
    np.testing.assert_array_equal(batch.observations, reference.observations)
    assert (batch.step_episode_seeds == -1).all()


def test_a_vector_env_whose_first_reset_fails_names_its_envs():
    with pytest.raises(WorkerError, match=r"hosting envs 0..2 raised OSError in `reset`: the simulator did not start"):
        ParallelRolloutCollector(reset_fails(3), None, backend="sync")


@pytest.mark.parametrize(
    "mode, where",
    [
        ("same_step", r"a terminal observation at step t=1 \(final_observations row t=1\)"),
        ("disabled", r"a terminal observation at step t=1 \(final_observations row t=1\)"),
        # NEXT_STEP's terminal row is the step's own observation row, checked as that row.
        ("next_step", r"an observation at step t=1 \(observations row t=2\)"),
    ],
)
def test_a_nan_terminal_observation_is_caught_in_every_autoreset_mode(mode, where):
    with ParallelRolloutCollector(nan_at_episode_end(2, mode), None, backend="sync", horizon=4, seed=0) as collector:
        with pytest.raises(ObservationError, match=r"env 0 returned " + where):
            collector.collect()


def test_observations_from_a_vector_env_are_checked_row_by_row_and_name_the_sub_env():
    with ParallelRolloutCollector(nan_observation(3), None, backend="sync", horizon=5, seed=0) as collector:
        with pytest.raises(ObservationError, match=r"env 1 returned an observation at step t=0 \(observations row t=1\) outside"):
            collector.collect()
