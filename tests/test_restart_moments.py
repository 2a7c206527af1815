"""A worker lost at every moment of the worker protocol, on every restartable process mode.

The moments: a worker found dead at the start of a collect (killed between two), lost at a
step, every worker lost at once, lost after the last step before the finish request, lost
while it answers the finish (or a rollout request), its replacement dying while it starts up,
and a worker dead when ``close()`` is called. Each is injected by killing the worker with
SIGKILL at that point of the main process's requests (``WorkerPool.send``), and judged by the
same oracle: every valid row replays on plain Gymnasium from the recorded seeds and actions,
no seed is reused after a loss, every field of a lost row is zero, the lost envs are listed,
the next batch is whole, and nothing is left behind.
"""

from __future__ import annotations

import os
import signal
from functools import partial

import gymnasium as gym
import numpy as np
import pytest

from parallel_rollouts import ParallelRolloutCollector, RunnerState, WorkerDiedError
from parallel_rollouts.processes import protocol
from parallel_rollouts.processes.pool import WorkerPool
from tests.envs import CrashingCartPole, DiesWhenRemade
from tests.test_restarts import assert_valid_rows_replay

pytestmark = pytest.mark.timeout(120)

NUM_ENVS, HORIZON, NUM_WORKERS = 4, 8, 2
PER_STEP_MODES = {"per-step": {}, "pipelined": {"pipelined": True}}
MODES = {**PER_STEP_MODES, "rollout-workers": {"policy_placement": "workers"}}


def pool_of(collector) -> WorkerPool:
    backend = collector._backend
    return backend.pool if hasattr(backend, "pool") else backend.stepper.pool


def kill(worker) -> None:
    os.kill(worker.process.pid, signal.SIGKILL)
    worker.process.join(10)


class KillAt:
    """Kill workers when the main process sends its ``count``-th request of ``command``
    (counted from when :meth:`arm` is called), just before it (``after=False``) or just after.

    ``argument`` narrows a STEP to one row. The victims die when the request goes to one of
    them: a pipelined collect sends a row to each half in turn, and a victim killed at the
    other half's request may not have finished its previous row yet."""

    def __init__(self, monkeypatch, command: bytes, victims: str = "one", argument: int | None = None, after: bool = False):
        self.command, self.victims, self.argument, self.after = command, victims, argument, after
        self.armed = self.fired = False
        original = WorkerPool.send

        def send(pool, command, argument, workers=None, payload=b""):
            hit = self.armed and not self.fired and command == self.command
            hit = hit and (self.argument is None or argument == self.argument)
            hit = hit and (workers is None or any(worker in self.victims_of(pool) for worker in workers))
            if hit and not self.after:
                self._kill(pool)
            original(pool, command, argument, workers, payload)
            if hit and self.after:
                self._kill(pool)

        monkeypatch.setattr(WorkerPool, "send", send)

    def arm(self) -> None:
        self.armed = True

    def victims_of(self, pool) -> list:
        return pool.workers if self.victims == "all" else pool.workers[1:]

    def _kill(self, pool) -> None:
        self.fired = True
        for worker in self.victims_of(pool):
            kill(worker)


def assert_lost_rows_are_zero(batch) -> None:
    """Every field of every lost row is zero (the observation of the row of the loss, the
    bootstrap row of an env lost part-way and the episode seeds included)."""
    lost_rows = ~batch.valid
    for name in ("observations", "actions", "rewards", "terminations", "truncations", "final_observations",
                 "final_observation_mask", "step_episode_seeds"):
        values = getattr(batch, name)
        assert not values[lost_rows].any(), f"`{name}` is not zero on a lost row"
    for env in batch.lost_env_indices.tolist():
        if not batch.valid[-1, env]:
            assert not batch.bootstrap_observations[env].any(), f"env {env} lost part-way keeps a bootstrap row"


def three_batches(collector, trigger) -> list:
    """A whole batch, one in which ``trigger`` (armed after the first) strikes, and the one after."""
    first = collector.collect()
    trigger()
    batches = [first, collector.collect(), collector.collect()]
    assert collector._backend.state is RunnerState.READY
    return batches


def judge(batches, lost_envs: list[int]) -> None:
    first, lost, after = batches
    assert first.valid.all() and first.lost_env_indices.size == 0
    np.testing.assert_array_equal(lost.lost_env_indices, lost_envs)
    survivors = [env for env in range(NUM_ENVS) if env not in lost_envs]
    assert lost.valid[:, survivors].all(), "a loss cost envs of a worker that was not lost"
    assert_lost_rows_are_zero(lost)
    assert after.valid.all() and after.lost_env_indices.size == 0, "the batch after a loss is not whole"
    assert_valid_rows_replay(batches)


def cartpoles() -> list:
    return [partial(gym.make, "CartPole-v1") for _ in range(NUM_ENVS)]


def collector_for(mode: str, fns=None, max_restarts: int = 2) -> ParallelRolloutCollector:
    return ParallelRolloutCollector(
        fns or cartpoles(), None, "async", horizon=HORIZON, seed=5, num_workers=NUM_WORKERS,
        max_restarts=max_restarts, **MODES[mode],
    )


@pytest.mark.parametrize("mode", list(MODES))
def test_a_worker_killed_between_two_collects_is_replaced_before_any_row_of_the_next(mode, no_leaks):
    """The batch after the kill is whole: the replacement's envs start fresh episodes at row 0."""
    with collector_for(mode) as collector:
        pool = pool_of(collector)
        batches = three_batches(collector, lambda: kill(pool.workers[1]))
    judge(batches, [2, 3])
    assert batches[1].valid.all(), "a worker found dead at the start of a collect cost rows of that collect"


PER_STEP_MOMENTS = {
    # (command, victims, argument, after): where in the per-step protocol the worker dies.
    "at a step": (protocol.STEP, "one", 3, False),
    "every worker at a step": (protocol.STEP, "all", 3, False),
    "after the last step, before the finish request": (protocol.FINISH, "one", None, False),
    "while answering the finish request": (protocol.FINISH, "one", None, True),
    "every worker before the finish request": (protocol.FINISH, "all", None, False),
}


@pytest.mark.parametrize("mode", list(PER_STEP_MODES))
@pytest.mark.parametrize("moment", list(PER_STEP_MOMENTS))
def test_a_worker_lost_at_each_moment_of_a_per_step_collect_is_replaced(mode, moment, monkeypatch, no_leaks):
    command, victims, argument, after = PER_STEP_MOMENTS[moment]
    trigger = KillAt(monkeypatch, command, victims, argument, after)
    with collector_for(mode, max_restarts=NUM_WORKERS) as collector:
        batches = three_batches(collector, trigger.arm)
    assert trigger.fired
    lost_envs = list(range(NUM_ENVS)) if victims == "all" else [2, 3]
    if after and not batches[1].lost_env_indices.size:
        # The worker answered the finish before the kill landed: the next collect's start finds
        # it dead and replaces it before any row (BEGIN), so that batch is whole and lists it.
        assert batches[2].valid.all()
        np.testing.assert_array_equal(batches[2].lost_env_indices, lost_envs)
        assert_valid_rows_replay(batches)
        return
    judge(batches, lost_envs)
    lost = batches[1]
    if command == protocol.STEP:
        # Each lost env's rows are valid up to its loss and none after (a prefix).
        rows_kept = lost.valid[:, lost_envs].sum(axis=0)
        assert all(lost.valid[:kept, env].all() for env, kept in zip(lost_envs, rows_kept.tolist()))
        if mode == "pipelined":
            # The half the row-3 step went to stops at row 3; the other half's row-2 step may still be
            # in flight (it overlaps the policy's row for the first half), so it stops at 2 or 3.
            assert set(rows_kept.tolist()) <= {2, 3} and (rows_kept == 3).sum() >= NUM_ENVS // NUM_WORKERS
        else:
            assert (rows_kept == 3).all()
    else:
        # Every row was written before the loss: the rows stand, the books of their
        # episodes went with the worker.
        assert lost.valid.all()
        assert not np.isin(lost.episode_env_indices, lost_envs).any()


@pytest.mark.parametrize("victims", ["one", "all"])
def test_rollout_workers_lost_during_a_rollout_are_replaced(victims, tmp_path, no_leaks):
    """Each victim's env kills its own process at its 11th step: row 2 of the second collect."""
    fns = cartpoles()
    for env in [1, 3] if victims == "all" else [3]:
        fns[env] = partial(CrashingCartPole, 11, "kill", str(tmp_path / f"crashed-{env}"))
    with collector_for("rollout-workers", fns, max_restarts=NUM_WORKERS) as collector:
        batches = three_batches(collector, lambda: None)
    judge(batches, list(range(NUM_ENVS)) if victims == "all" else [2, 3])
    # A rollout worker's recorded rows show where it got to; the last may have been cut in its resets.
    assert not batches[1].valid[2:].any() if victims == "all" else not batches[1].valid[2:, 2:].any()


@pytest.mark.parametrize("mode", list(MODES))
def test_a_replacement_that_dies_while_starting_up_is_replaced_again(mode, tmp_path, no_leaks):
    armed, spent = str(tmp_path / "armed"), str(tmp_path / "spent")
    fns = cartpoles()
    fns[3] = DiesWhenRemade(armed, spent)
    with collector_for(mode, fns, max_restarts=2) as collector:
        pool = pool_of(collector)

        def kill_and_arm():
            open(armed, "w").close()
            kill(pool.workers[1])

        batches = three_batches(collector, kill_and_arm)
    assert os.path.exists(spent), "the first replacement did not die as the test meant it to"
    judge(batches, [2, 3])


@pytest.mark.parametrize("mode", list(MODES))
def test_a_replacement_dying_with_no_restarts_left_breaks_the_collector_naming_both_deaths(mode, tmp_path, no_leaks):
    armed, spent = str(tmp_path / "armed"), str(tmp_path / "spent")
    fns = cartpoles()
    fns[3] = DiesWhenRemade(armed, spent)
    collector = collector_for(mode, fns, max_restarts=1)
    try:
        collector.collect()
        open(armed, "w").close()
        kill(pool_of(collector).workers[1])
        with pytest.raises(WorkerDiedError, match=r"(?s)more than max_restarts=1.*1\. worker 1.*2\. worker 1"):
            collector.collect()
        assert collector._backend.state is RunnerState.BROKEN
    finally:
        collector.close()


@pytest.mark.parametrize("mode", list(MODES))
def test_close_with_a_dead_worker_releases_everything(mode, no_leaks):
    collector = collector_for(mode)
    collector.collect()
    kill(pool_of(collector).workers[1])
    collector.close()
    assert collector._backend.state is RunnerState.CLOSED
