"""Rollout workers: each async worker process runs whole rollouts with its own copy of the policy.

One exchange per ``collect()`` instead of one per step: the main process sends each worker
one rollout request carrying what changed in the policy since the last one
(:mod:`~parallel_rollouts.policy.shipping`, the same as for Ray actors), and waits. Each worker runs the same
:class:`~parallel_rollouts.policy.slice_rollout.SliceRollout` a Ray actor runs, writing its
columns of shared storage: a segment that becomes the caller's batch as it is
(:mod:`~parallel_rollouts.processes.batch_segments`), or with ``reuse_buffers=True`` the
one working segment, handed out again on every collect.

It pays when the per-step handshake is a large share of a step (cheap envs) and the
policy is cheap enough to run on every worker's CPU. A policy that needs the GPU, or
one much costlier per call than a step of a worker's envs, belongs in the main process.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np

from ..data.batch_memory import BatchMemory
from ..data.recurrent_record import RecurrentRecord
from ..data.state_tree import StateTree, leaf_to_numpy
from ..errors import ActionError, PolicyTransferError
from ..processes import protocol
from ..processes.batch_segments import BatchSegments
from ..processes.pool import WorkerPool
from ..config.spec import RolloutSpec
from ..config.worker_options import WorkerOptions
from ..data.storage import CompletedEpisodes
from .base import RemoteRolloutRunner, RolloutResult
from ..policy.shipping import PolicyShipper
from ..policy.slice_merge import merged_output_fields

__all__ = ["RolloutWorkersRunner"]

#: What ``step_episode_seeds`` holds before a worker records a row (seeds are never negative).
NOT_RECORDED = -2


def _first_unsure_row(storage, start: int, stop: int) -> int:
    """The first row of envs ``start:stop`` a lost rollout worker may not have written in full.

    A worker records each row's episode seeds as the step ends, then resets the envs whose
    episode ended (writing the next row's observation). With ``k`` rows recorded, rows before
    ``k - 1`` and the observation of row ``k - 1`` are complete; row ``k - 1``'s own step may
    have been cut in its resets. ``-1``: not even the first observation is sure.
    """
    recorded = storage.step_episode_seeds[:, start:stop] != NOT_RECORDED
    rows = int(recorded.all(axis=1).argmin()) if not recorded.all() else storage.horizon
    return rows - 1


class RolloutWorkersRunner(RemoteRolloutRunner):
    """``backend="async", policy_placement="workers"``."""

    def __init__(self, pool: WorkerPool, memory: BatchMemory, shipper: PolicyShipper | None, policy: Any = None) -> None:
        self.pool = pool
        self.layout = pool.layout
        self._memory = memory
        self._shipper = shipper
        self._policy = policy
        # A recurrent policy's state lives in the workers; what this process keeps of it is
        # what rebuilds the record of a worker lost part-way: the last batch's bootstrap states
        # and starts (None: not known, as after a dropped rollout) and the envs starting afresh
        # at the next row 0.
        self._previous_record: tuple[list[np.ndarray], np.ndarray] | None = None
        self._fresh = np.ones(pool.layout.num_envs, dtype=np.bool_)

    @classmethod
    def build(
        cls,
        spec: RolloutSpec,
        policy: Any,
        *,
        reuse_buffers: bool,
        options: WorkerOptions,
    ) -> RolloutWorkersRunner:
        shipper = snapshot = None
        if policy is not None:
            shipper = PolicyShipper(
                policy, "policy_placement='workers' sends the policy to every worker process", cpu_only=True
            )
            # Checked here, before any worker starts, so that an unpicklable policy fails fast.
            snapshot = pickle.dumps(shipper.snapshot(), protocol=pickle.HIGHEST_PROTOCOL)
        pool = WorkerPool.start(spec, options=options, policy=protocol.ShippedPolicy(snapshot))
        # Fresh batches are written straight into segments of their own: nothing is copied out.
        segments = None if reuse_buffers else BatchSegments(pool.layout.allocate_storage)
        # The workers' policies read their segments through mappings of their own; no policy reads
        # rows here, so the batch memory allocates no read-only mirror.
        memory = BatchMemory(
            pool.layout.allocate_storage, reuse_buffers, pool.shared.storage, segments, pool.layout.batches_recycled,
            policy_inputs="copies",
        )
        return cls(pool, memory, shipper, policy)

    def _stop_in_flight(self) -> None:
        # Each worker still running its rollout is asked to drop it at its next row; closing the
        # pool then reads that reply and closes the envs (within the pool's close bound, past
        # which a worker is terminated: WorkerPool.close).
        self.pool.cancel_rollouts()  # only workers still running a rollout are asked
        self._in_flight = None

    def _send_rollout(self) -> tuple:
        """Ship the policy's changes and ask every worker for a rollout; what receiving it needs."""
        memory, pool = self._memory, self.pool
        # Serialised before anything runs: a policy that became unpicklable is refused here.
        update = b""
        if self._shipper is not None:
            snapshot = self._shipper.snapshot()
            update = b"" if snapshot.empty else pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL)
        # A worker found dead now (killed between rollouts) is replaced before any row is
        # written: its envs start fresh episodes in a whole batch, which lists them.
        found_dead = pool.found_dead()
        self._guarded(pool.raise_losses, found_dead)
        for worker, _ in found_dead:
            self._guarded(pool.replace, worker, self._replacement_policy())
        replaced_first = [index for worker, _ in found_dead for index in range(worker.start, worker.stop)]
        fresh, self._fresh = self._fresh, np.zeros(pool.layout.num_envs, dtype=np.bool_)
        fresh[replaced_first] = True
        previous_record, self._previous_record = self._previous_record, None
        storage = memory.begin()
        # Rows a worker records mark where it got to, should it be lost part-way (a seed is never negative).
        storage.step_episode_seeds.fill(NOT_RECORDED)
        pool.take_wait_seconds()
        segment = memory.segment_name().encode()
        self._guarded(pool.send, protocol.ROLLOUT, len(segment), None, segment + update)
        return storage, fresh, previous_record, replaced_first

    def _receive_rollout(self, storage, fresh, previous_record, replaced_first) -> RolloutResult:
        """The workers' replies to :meth:`_send_rollout`'s request, merged into the rollout's result."""
        memory, pool = self._memory, self.pool
        replies, losses = self._guarded(pool.receive_all, None, pool.layout.horizon)
        # An env failed in some worker while the others ran on, or a worker was lost and
        # cannot be replaced: broken. A replacement that cannot start: broken too.
        self._guarded(pool.raise_failures, [reply for reply in replies if reply is not None])
        self._guarded(pool.raise_losses, losses)
        lost_from_rows = None
        for worker, _ in losses:
            self._guarded(pool.replace, worker, self._replacement_policy())
            self._fresh[worker.start : worker.stop] = True
            if lost_from_rows is None:
                lost_from_rows = np.full(pool.layout.num_envs, pool.layout.horizon, dtype=np.int64)
            lost_from_rows[worker.start : worker.stop] = _first_unsure_row(storage, worker.start, worker.stop)
        replies = [reply for reply in replies if reply is not None]
        lost_workers = {worker.index for worker, _ in losses}
        survivors = [worker for worker in pool.workers if worker.index not in lost_workers]
        policy_failures = [pickle.loads(reply[1:]) for reply in replies if reply[:1] == protocol.POLICY_FAILED]
        if policy_failures:
            # Each worker dropped its rollout at its own row; every env continues from where
            # it stands (workers whose policy did not fail ran to the end of the horizon).
            memory.abandon(pool.layout.horizon)
            if any(isinstance(error, PolicyTransferError) for error, _ in policy_failures):
                # Some copies moved on and some did not: next time, send everything to all.
                self._shipper.forget()
            raise policy_failures[0][0]
        results = [pickle.loads(reply[1:]) for reply in replies]
        try:
            has_values, has_log_probs = merged_output_fields(
                [(result.has_values, result.has_log_probs) for result in results],
                [(worker.start, worker.stop) for worker in survivors],
            )
        except ActionError:
            memory.abandon(pool.layout.horizon)
            raise
        episodes = CompletedEpisodes.merge([result.episodes for result in results] or [CompletedEpisodes.empty_buffers(0)])
        lost = [] if lost_from_rows is None else np.flatnonzero(lost_from_rows < pool.layout.horizon).tolist()
        lost = np.array(sorted(set(lost) | set(replaced_first)), dtype=np.int64)
        # Each worker carries its envs' recurrent state between collects; its replacement starts
        # them from the initial state at the next row 0.
        recurrent = RecurrentRecord.merge(
            [(worker.start, worker.stop, result.recurrent) for worker, result in zip(survivors, results)],
            pool.layout.num_envs,
        )
        for worker, _ in losses:
            if recurrent is not None:
                self._rebuild_lost_record(recurrent, storage, worker, int(lost_from_rows[worker.start]), fresh, previous_record)
        if recurrent is not None:
            # Copies: the caller owns the batch, and may write into it.
            self._previous_record = ([leaf.copy() for leaf in recurrent.bootstrap_states], recurrent.bootstrap_starts.copy())
        return RolloutResult(
            memory.finish(lost_from_rows), episodes, has_values, has_log_probs, lost,
            lost_from_rows=lost_from_rows, env_wait_seconds=pool.take_wait_seconds(), recurrent=recurrent,
        )

    def _rebuild_lost_record(self, record, storage, worker, rows: int, fresh, previous) -> None:
        """The state record of a worker lost after ``rows`` complete rows went with it: rebuild
        what a learner needs of its valid rows, ``initial_state`` and ``episode_starts``, from
        what this process knows (the last batch's record, the rows in storage). Its
        ``final_states`` and ``states`` stay zero: recompute them from those two."""
        start, stop = worker.start, worker.stop
        fresh = fresh[start:stop]
        if rows <= 0 or (previous is None and not fresh.all()):
            return
        _, initial = StateTree.of(self._policy.initial_state(stop - start), stop - start, "the policy's `initial_state()`")
        for index, (target, initial_leaf) in enumerate(zip(record.initial_state, initial)):
            initial_leaf = leaf_to_numpy(initial_leaf)
            carried = initial_leaf if previous is None else previous[0][index][start:stop]
            target[start:stop] = np.where(fresh.reshape((-1,) + (1,) * (initial_leaf.ndim - 1)), initial_leaf, carried)
        record.episode_starts[0, start:stop] = fresh if previous is None else fresh | previous[1][start:stop]
        _, starts = storage.episode_ends_and_starts(slice(0, rows - 1), slice(start, stop))
        record.episode_starts[1:rows, start:stop] = starts

    def _replacement_policy(self) -> protocol.ShippedPolicy:
        """The policy a replacement worker starts from: the state every other copy is at."""
        snapshot = None
        if self._shipper is not None:
            snapshot = pickle.dumps(self._shipper.resend(), protocol=pickle.HIGHEST_PROTOCOL)
        return protocol.ShippedPolicy(snapshot)

    def take_warnings(self) -> list:
        return self.pool.take_warnings()

    def _close(self) -> None:
        self._memory.release()
        self.pool.close()
