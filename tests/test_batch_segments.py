"""Fresh batches that are memory the workers wrote, and recycled memory that never changes a held batch.

Async workers (rollout workers, and per-step workers with the policy in the main process,
pipelined or not) write each fresh batch into a shared segment of its own, handed to the
caller without a copy; a segment is written again only once the caller holds nothing
of its batch. The same recycling serves private batches, whose large final-observation
arrays are views of a mapping rather than arrays owning their memory.
"""

from __future__ import annotations

import errno
import gc
import os
from functools import partial

import numpy as np
import pytest

from parallel_rollouts import ParallelRolloutCollector
from tests.batch_compare import assert_batches_identical
from tests.envs import CountingEnv, cartpole
from tests.leaks import our_segments

pytestmark = pytest.mark.timeout(120)

COUNTING = [partial(CountingEnv, env_id=i, episode_length=3) for i in range(4)]
SETTINGS = dict(horizon=7, seed=5, info_keys=("step_in_episode",))


def _reference(collects: int) -> list:
    with ParallelRolloutCollector(COUNTING, None, "serial", **SETTINGS) as collector:
        return [collector.collect() for _ in range(collects)]


#: The async modes: rollout workers, per-step workers, per-step workers pipelined.
MODES = {"rollout-workers": {"policy_placement": "workers"}, "per-step": {}, "pipelined": {"pipelined": True}}


@pytest.fixture(params=sorted(MODES))
def mode(request) -> dict:
    return MODES[request.param]


def _workers(mode: dict) -> ParallelRolloutCollector:
    return ParallelRolloutCollector(COUNTING, None, "async", num_workers=2, **SETTINGS, **mode)


def test_held_batches_and_held_views_survive_later_collects(mode, no_leaks):
    reference = _reference(8)
    kept: dict[int, object] = {}
    with _workers(mode) as collector:
        for index in range(8):
            batch = collector.collect()
            if index in (1, 4):
                kept[index] = batch  # the whole batch
            elif index == 2:
                kept[index] = batch.final_observations[3:]  # only a view of one array
            elif index == 5:
                kept[index] = batch.observations  # only one array, as it is
            del batch
        for index in (1, 4):
            assert_batches_identical(kept[index], reference[index])
        np.testing.assert_array_equal(kept[2], reference[2].final_observations[3:])
        assert kept[2].any()  # episodes of 3 steps end in those rows
        np.testing.assert_array_equal(kept[5], reference[5].observations)


def test_dropped_batches_recycle_their_segments(mode, no_leaks):
    reference = _reference(12)
    before = our_segments()
    with _workers(mode) as collector:
        names = set()
        for index in range(6):
            batch = collector.collect()
            assert_batches_identical(batch, reference[index])
            names |= our_segments() - before
            del batch
        # The working segment the workers attached at start, and one batch segment used again.
        assert len(names) == 2
        batch = None
        for index in range(6, 12):
            # A training loop's pattern: the previous batch is held while the next is collected.
            batch = collector.collect()
            assert_batches_identical(batch, reference[index])
            names |= our_segments() - before
        assert len(names) == 3
    assert our_segments() == before


def test_a_batch_outlives_its_collector_and_its_segment_name(mode, no_leaks):
    reference = _reference(2)
    before = our_segments()
    with _workers(mode) as collector:
        collector.collect()
        batch = collector.collect()
    assert our_segments() == before  # every name is gone ...
    gc.collect()
    assert_batches_identical(batch, reference[1])  # ... and the memory stays the caller's


def _no_room(descriptor, offset, length):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_segment_shared_memory_has_no_room_for_falls_back_to_copying_out(mode, monkeypatch, no_leaks):
    reference = _reference(4)
    before = our_segments()
    with _workers(mode) as collector:
        first = collector.collect()
        # From here on /dev/shm is full: the next segments are refused when reserved (not
        # found by a write that cannot be backed), and each batch goes through the working one.
        monkeypatch.setattr(os, "posix_fallocate", _no_room, raising=False)
        later = [collector.collect() for _ in range(3)]
        assert len(our_segments() - before) == 2  # the working segment and the first batch's
    for batch, expected in zip([first, *later], reference):
        assert_batches_identical(batch, expected)


def test_no_room_for_the_working_segment_is_a_clear_error_at_construction(monkeypatch, no_leaks):
    monkeypatch.setattr(os, "posix_fallocate", _no_room, raising=False)
    with pytest.raises(OSError, match=r"/dev/shm.*no room.*MiB.*shm-size"):
        _workers(MODES["per-step"])


@pytest.mark.filterwarnings("ignore::parallel_rollouts.StalePolicyWarning")
@pytest.mark.parametrize("backend", ["sync", "async"])
def test_views_of_large_final_observations_survive_recycling(backend, no_leaks):
    """84x84x4 frames: the final observations come from a mapping, so a view's base is not the array."""
    from benchmarks.envs import FrameImageEnv
    from benchmarks.workloads import image_policy

    fns = [partial(FrameImageEnv, episode_length=5) for _ in range(16)]
    options = {"policy_placement": "workers", "num_workers": 2} if backend == "async" else {}
    with ParallelRolloutCollector(fns, image_policy, "serial", horizon=64, seed=1) as collector:
        reference = collector.collect()
    with ParallelRolloutCollector(fns, image_policy, backend, horizon=64, seed=1, **options) as collector:
        batch = collector.collect()
        view = batch.final_observations[4, 2:5]
        del batch
        gc.collect()
        for _ in range(3):
            collector.collect()
        np.testing.assert_array_equal(view, reference.final_observations[4, 2:5])
        assert view.any()


class KeepingPolicy:
    """Keeps every observation row it is given: copies of the rows of the batch the caller gets."""

    def __init__(self) -> None:
        self.rows: list[np.ndarray] = []

    def __call__(self, observations):
        self.rows.append(observations)
        return (observations[:, 0] > 0).astype(np.int64)


@pytest.mark.parametrize("pipelined", [False, True])
def test_policy_rows_in_the_main_process_are_copies_that_hold_the_batch_s_rows(pipelined, no_leaks):
    keeping = KeepingPolicy()
    with ParallelRolloutCollector([cartpole] * 4, keeping, "async", horizon=9, seed=2, num_workers=2, pipelined=pipelined) as collector:
        batches = [collector.collect() for _ in range(3)]
        for _ in range(3):
            collector.collect()  # dropped at once: their segments are recycled, the held ones' not
    calls_per_row = 2 if pipelined else 1  # pipelined: one call on each half of the envs
    for index, batch in enumerate(batches):
        for t in range(9):
            first = (index * 9 + t) * calls_per_row
            parts = keeping.rows[first : first + calls_per_row]
            np.testing.assert_array_equal(np.concatenate(parts), batch.observations[t])
            # Copies: no write through them reaches the batch, and keeping them pins no segment.
            assert not any(np.shares_memory(part, batch.observations) for part in parts)


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
def test_kept_batches_hold_no_descriptors_and_no_segment_names(mode, no_leaks):
    """A program may keep every batch (a dataset): each must not cost a descriptor or a name."""
    before = our_segments()
    with _workers(mode) as collector:
        kept = [collector.collect()]
        descriptors = _open_descriptors()
        kept += [collector.collect() for _ in range(30)]
        assert _open_descriptors() == descriptors
        # The working segment and the two the pool still recycles keep their names; the rest
        # are the caller's memory only.
        assert len(our_segments() - before) <= 3
    reference = _reference(31)
    for batch, expected in zip(kept, reference):
        assert_batches_identical(batch, expected)


def _rollout_workers(**options) -> ParallelRolloutCollector:
    return ParallelRolloutCollector(COUNTING, None, "async", num_workers=2, policy_placement="workers", **SETTINGS, **options)


def test_a_held_view_is_never_overwritten_while_dropped_batches_recycle_one_segment(no_leaks):
    """The default's promise with recycling in steady state: 30 collects, one batch segment more."""
    reference = _reference(32)
    before = our_segments()
    with _rollout_workers() as collector:
        collector.collect()  # dropped at once: its segment is the one recycled below
        observations = collector.collect().observations[:, 0]  # a view is all that is kept
        kept_final = collector.collect().final_observations[2:, 1:3]
        names = our_segments() - before
        for index in range(3, 32):
            batch = collector.collect()
            assert_batches_identical(batch, reference[index])
            names |= our_segments() - before
            del batch
        # The working segment, the two pinned by the views, and one recycled for every other batch.
        assert len(names) == 4
        np.testing.assert_array_equal(observations, reference[1].observations[:, 0])
        np.testing.assert_array_equal(kept_final, reference[2].final_observations[2:, 1:3])
        assert kept_final.any()
    assert our_segments() == before


def test_a_collector_dropped_without_close_frees_its_workers_and_segments(no_leaks):
    """Nothing leaks when the collector is only let go of (the no_leaks fixture counts processes,
    segments and descriptors); a batch still held stays readable."""
    reference = _reference(3)
    before = our_segments()
    collector = _rollout_workers()
    collector.collect()
    held = collector.collect()
    collector.collect()
    del collector
    gc.collect()
    assert our_segments() == before
    assert_batches_identical(held, reference[1])


def test_a_worker_lost_between_collects_is_replaced_and_recycling_goes_on(no_leaks):
    """A killed rollout worker's replacement maps the recycled segments afresh: every later batch
    is whole, a batch held across the loss is unchanged, and no segment is left behind."""
    import copy
    import signal

    before = our_segments()
    with _rollout_workers(max_restarts=2) as collector:
        held = collector.collect()
        expected = copy.deepcopy(held)
        for index in range(8):
            if index in (2, 5):
                worker = collector._backend.pool.workers[index % 2]
                lost = np.arange(worker.start, worker.stop)
                os.kill(worker.process.pid, signal.SIGKILL)
                worker.process.join(5)
            batch = collector.collect()
            if index in (2, 5):
                # Replaced before the rollout: its envs start fresh episodes, listed as lost.
                np.testing.assert_array_equal(batch.lost_env_indices, lost)
            else:
                assert batch.lost_env_indices.size == 0
            assert batch.valid.all()
            # Counting envs: each observation names its env and its step in the episode, so a
            # worker writing another's columns, or a stale segment's rows, shows here.
            env_ids = np.broadcast_to(np.arange(4, dtype=np.float32), batch.valid.shape)
            np.testing.assert_array_equal(batch.observations[..., 0], env_ids)
            assert (batch.observations[..., 1] < 3).all()
            del batch
        assert_batches_identical(held, expected)
        assert len(our_segments() - before) <= 3  # working, held, one recycled
    assert our_segments() == before
