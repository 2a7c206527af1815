"""Lost workers replaced (``max_restarts``) on the async backend, in both modes.

A worker that dies (SIGKILL, ``os.abort()``, ``os._exit``) or whose env hangs past
``step_timeout`` is replaced; the batch it was lost in masks its envs' rows from the loss
on (``valid`` false, zero), keeps every other row, and the next batch is whole. The oracle
is plain Gymnasium: every valid row replays from the recorded seeds and actions.
"""

from __future__ import annotations

import os
import signal
from functools import partial

import gymnasium as gym
import numpy as np
import pytest

from parallel_rollouts import ParallelRolloutCollector, RunnerState, StepTimeoutError, WorkerDiedError
from tests.envs import CrashingCartPole

pytestmark = pytest.mark.timeout(120)

NUM_ENVS, HORIZON, CRASH_STEP = 4, 8, 11  # the crash falls in row 2 of the second collect
MODES = {"per-step": {}, "rollout-workers": {"policy_placement": "workers"}, "pipelined": {"pipelined": True}}
#: The two ways a worker serves requests (pipelined stepping is per-step stepping in two halves).
SERVING_MODES = ["per-step", "rollout-workers"]


def crashing_fns(how: str, marker: str | None, victim: int = 3) -> list:
    fns = [partial(gym.make, "CartPole-v1") for _ in range(NUM_ENVS)]
    fns[victim] = partial(CrashingCartPole, CRASH_STEP, how, marker)
    return fns


def collector_for(fns, mode: str, **kwargs) -> ParallelRolloutCollector:
    timeout = {"step_timeout": 1.0} if kwargs.pop("hang", False) else {}
    return ParallelRolloutCollector(
        fns, None, "async", horizon=HORIZON, seed=5, num_workers=2, **MODES[mode], **timeout, **kwargs
    )


def assert_valid_rows_replay(batches) -> None:
    """Every valid row of every column replays on plain CartPole from the recorded seeds and actions;
    no env ever starts two episodes from one seed, before or after a loss.

    An env's first row starts a fresh episode, not the one running at the end of the batch
    before, only where its worker was replaced: before this rollout (the env is listed in this
    batch) or after the last row of the one before (listed there). Its first row's episode
    seed tells which, since a replacement never reuses a seed.
    """
    for env_index in range(batches[0].num_envs):
        env = gym.make("CartPole-v1")
        next_observation = None
        used_seeds: set[int] = set()
        running_seed = None
        listed_before = False
        for collect, batch in enumerate(batches):
            listed = env_index in batch.lost_env_indices
            if next_observation is not None and int(batch.step_episode_seeds[0, env_index]) != running_seed:
                assert listed or listed_before, f"env {env_index} starts afresh in collect {collect} without a loss listed"
                next_observation = None
            listed_before = listed
            for t in range(batch.horizon):
                where = f"collect {collect}, row {t}, env {env_index}"
                if not batch.valid[t, env_index]:
                    assert batch.rewards[t, env_index] == 0 and not batch.dones[t, env_index], where
                    next_observation = None
                    continue
                seed = running_seed = int(batch.step_episode_seeds[t, env_index])
                if next_observation is None:
                    assert seed not in used_seeds, f"seed {seed} used for a second episode at {where}"
                    used_seeds.add(seed)
                    next_observation, _ = env.reset(seed=seed)
                np.testing.assert_array_equal(batch.observations[t, env_index], next_observation, err_msg=where)
                observation, reward, terminated, truncated, _ = env.step(int(batch.actions[t, env_index]))
                assert batch.rewards[t, env_index] == reward, where
                assert batch.terminations[t, env_index] == terminated and batch.truncations[t, env_index] == truncated, where
                if terminated or truncated:
                    np.testing.assert_array_equal(batch.final_observations[t, env_index], observation, err_msg=where)
                    next_observation = None
                else:
                    next_observation = observation
            if next_observation is not None:
                np.testing.assert_array_equal(batch.bootstrap_observations[env_index], next_observation)
        env.close()


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("how", ["kill", "abort", "exit", "hang"])
def test_a_lost_worker_is_replaced_its_rows_masked_and_the_next_batch_is_whole(mode, how, tmp_path, no_leaks):
    collector = collector_for(crashing_fns(how, str(tmp_path / "crashed")), mode, max_restarts=1, hang=how == "hang")
    try:
        batches = [collector.collect() for _ in range(3)]
    finally:
        collector.close()
    first, lost, after = batches
    assert first.valid.all() and first.lost_env_indices.size == 0
    # Worker 1 hosts envs 2 and 3; env 3 crashed at its 11th step, row 2 of the second collect.
    np.testing.assert_array_equal(lost.lost_env_indices, [2, 3])
    # Per step, the row of the loss is known; a rollout worker's recorded rows show where it
    # got to, and the last recorded one may have been cut in its resets: one row earlier.
    lost_from = 1 if mode == "rollout-workers" else 2
    assert lost.valid[:, :2].all()
    assert lost.valid[:lost_from, 2:].all() and not lost.valid[lost_from:, 2:].any()
    assert not lost.dones[lost_from:, 2:].any() and (lost.observations[lost_from + 1 :, 2:] == 0).all()
    # The cut episode is not booked as complete.
    assert not np.isin(lost.episode_env_indices, [2, 3]).any()
    assert after.valid.all() and after.lost_env_indices.size == 0
    assert_valid_rows_replay(batches)


def cartpole_pair(marker: str | None = None):
    """A vector env of two CartPoles; with ``marker``, its second one crashes once (as above)."""
    second = partial(CrashingCartPole, CRASH_STEP, "exit", marker) if marker else partial(gym.make, "CartPole-v1")
    return gym.vector.SyncVectorEnv([partial(gym.make, "CartPole-v1"), second])


@pytest.mark.parametrize("mode", SERVING_MODES)
def test_a_lost_worker_hosting_a_vector_env_is_replaced_from_its_own_factory(mode, tmp_path, no_leaks):
    """Two factories of two sub-envs each, one per worker: the replacement of worker 1 calls
    factory 1 again (not factories 2 and 3, which its columns would name) and makes its two envs."""
    def three_batches(fns):
        collector = ParallelRolloutCollector(fns, None, "async", horizon=HORIZON, seed=5, num_workers=2, max_restarts=1, **MODES[mode])
        try:
            return [collector.collect() for _ in range(3)]
        finally:
            collector.close()

    first, lost, after = three_batches([cartpole_pair, partial(cartpole_pair, str(tmp_path / "crashed"))])
    assert first.lost_env_indices.size == 0 and after.lost_env_indices.size == 0
    np.testing.assert_array_equal(lost.lost_env_indices, [2, 3])
    assert not lost.valid[-1, 2:].any()  # lost from the crash on
    assert (after.rewards[:, 2:] > 0).any()  # the replacement's sub-envs step
    # The other worker's envs are untouched: as in a run where nothing crashes.
    for batch, reference in zip((first, lost, after), three_batches([cartpole_pair, cartpole_pair])):
        for field in ("observations", "actions", "rewards", "valid"):
            np.testing.assert_array_equal(getattr(batch, field)[:, :2], getattr(reference, field)[:, :2], err_msg=field)


@pytest.mark.parametrize("mode", SERVING_MODES)
@pytest.mark.parametrize(
    "how, error, message",
    [
        ("abort", WorkerDiedError, r"was killed by signal SIGABRT"),
        ("exit", WorkerDiedError, r"exited with code 3"),
        # Per step the bound is one step's; a rollout worker replies once a rollout: horizon steps.
        ("hang", StepTimeoutError, r"did not finish (within step_timeout=1.0 s per step|a rollout of horizon=\d+ within "
                                   r"horizon \* step_timeout = \d+ s)"),
    ],
)
def test_without_max_restarts_a_lost_worker_breaks_the_collector_as_before(mode, how, error, message, tmp_path, no_leaks):
    collector = collector_for(crashing_fns(how, str(tmp_path / "crashed")), mode, hang=how == "hang")
    collector.collect()
    with pytest.raises(error, match=rf"worker 1 \(pid \d+, envs 2..3\) {message}") as info:
        collector.collect()
    if how == "hang":
        per_step = "within step_timeout=1.0 s per step" in str(info.value)
        assert per_step == (mode == "per-step"), str(info.value)
    assert info.value.env_indices == (2, 3)
    assert collector.state is RunnerState.BROKEN
    collector.close()


@pytest.mark.parametrize("mode", SERVING_MODES)
def test_a_worker_that_keeps_dying_exhausts_the_restarts_with_an_error_listing_each_loss(mode, no_leaks):
    # No marker: every incarnation aborts at its 11th step (the second collect, then the fourth).
    collector = collector_for(crashing_fns("abort", None), mode, max_restarts=1)
    try:
        collector.collect()
        assert collector.collect().lost_env_indices.tolist() == [2, 3]
        collector.collect()
        with pytest.raises(WorkerDiedError, match=r"lost 2 times, more than max_restarts=1 allows") as info:
            collector.collect()
        text = str(info.value)
        phase = "step" if mode == "per-step" else "rollout"
        assert text.count("was killed by signal SIGABRT") >= 2 and f"in `{phase}`" in text, text
        assert info.value.env_indices == (2, 3, 2, 3)
        # The crash report of the dead worker: the Python stack of the env that aborted.
        assert "Fatal Python error: Aborted" in info.value.remote_traceback
        assert "in crash" in info.value.remote_traceback and "in step" in info.value.remote_traceback
        assert collector.state is RunnerState.BROKEN
    finally:
        collector.close()


def test_a_worker_killed_from_outside_mid_collect_is_replaced_and_rows_before_are_kept(no_leaks):
    calls = []

    def policy(observations):
        calls.append(1)
        if len(calls) == 4:  # row 3 of the first collect: kill worker 0 from outside
            worker = collector._backend.stepper.pool.workers[0]
            os.kill(worker.process.pid, signal.SIGKILL)
            worker.process.join(5)
        return np.zeros(observations.shape[0], dtype=np.int64)

    fns = [partial(gym.make, "CartPole-v1")] * NUM_ENVS
    collector = ParallelRolloutCollector(fns, policy, "async", horizon=HORIZON, seed=1, num_workers=2, max_restarts=3)
    try:
        batches = [collector.collect(), collector.collect()]
    finally:
        collector.close()
    assert batches[0].lost_env_indices.tolist() == [0, 1]
    assert batches[0].valid[:3, :].all() and not batches[0].valid[3:, :2].any() and batches[0].valid[:, 2:].all()
    assert batches[1].valid.all()
    assert_valid_rows_replay(batches)


def test_a_run_with_restarts_is_reproducible_from_its_seed(tmp_path, no_leaks):
    def run(marker):
        collector = collector_for(crashing_fns("kill", str(marker)), "per-step", max_restarts=1)
        with collector:
            return [collector.collect() for _ in range(3)]

    first, second = run(tmp_path / "a"), run(tmp_path / "b")
    for one, other in zip(first, second):
        np.testing.assert_array_equal(one.valid, other.valid)
        np.testing.assert_array_equal(one.observations, other.observations)
        np.testing.assert_array_equal(one.step_episode_seeds, other.step_episode_seeds)


def test_a_soak_of_random_kills_ends_with_every_batch_in_contract_and_nothing_leaked(no_leaks):
    rng = np.random.default_rng(0)
    kill_at = {}  # collect number -> (row, worker)
    for collect in rng.choice(np.arange(1, 12), size=5, replace=False).tolist():
        kill_at[collect] = (int(rng.integers(0, HORIZON)), int(rng.integers(0, 3)))
    state = {"collect": 0, "row": 0}

    def policy(observations):
        plan = kill_at.get(state["collect"])
        if plan is not None and plan[0] == state["row"]:
            worker = collector._backend.stepper.pool.workers[plan[1]]
            os.kill(worker.process.pid, signal.SIGKILL)
            worker.process.join(5)
        state["row"] += 1
        return (observations[:, 2] > 0).astype(np.int64)

    fns = [partial(gym.make, "CartPole-v1")] * 6
    collector = ParallelRolloutCollector(fns, policy, "async", horizon=HORIZON, seed=3, num_workers=3, max_restarts=len(kill_at))
    batches = []
    try:
        for collect in range(12):
            state["collect"], state["row"] = collect, 0
            batch = collector.collect()
            if collect in kill_at:
                row, worker = kill_at[collect]
                lost = [2 * worker, 2 * worker + 1]
                assert batch.lost_env_indices.tolist() == lost
                assert not batch.valid[row:, lost].any() and batch.valid[:row, lost].all()
            else:
                assert batch.valid.all() and batch.lost_env_indices.size == 0
            assert (batch.rewards[~batch.valid] == 0).all() and not batch.dones[~batch.valid].any()
            assert (batch.env_step_seconds >= 0).all() and (batch.env_wait_seconds >= 0).all()
            batches.append(batch)
    finally:
        collector.close()
    assert_valid_rows_replay(batches)


def test_max_restarts_is_checked_and_applies_to_async_and_ray_only():
    from parallel_rollouts import ConfigurationError

    fns = [partial(gym.make, "CartPole-v1")]
    with pytest.raises(ConfigurationError, match=r"`max_restarts` applies to backend 'async' or 'ray' only"):
        ParallelRolloutCollector(fns, None, "sync", max_restarts=1)
    with pytest.raises(ConfigurationError, match=r"`max_restarts` must be an int >= 0 or None; got -1"):
        ParallelRolloutCollector(fns, None, "async", max_restarts=-1)
