"""The pool of worker processes behind ``backend="async"``.

Each worker owns a contiguous slice of the envs and runs the same
:class:`~parallel_rollouts.groups.EnvGroup` as the in-process backends, on a view
of a shared-memory copy of the rollout storage; with rollout workers it also holds a
copy of the policy (see ``protocol`` for the messages).

Ownership: the main process owns the workers, their connections and the segments.
:class:`WorkerPool` holds them and frees them on every exit path: ``close()``, a
failure during start-up, garbage collection of the collector, and interpreter exit
(through ``weakref.finalize``). With ``max_restarts`` it also replaces a lost worker
(:meth:`WorkerPool.replace`): the lost process is stopped and its ends closed before
the new one takes its place. Start-up is in :mod:`.startup`, one worker's process and
ends in :mod:`.worker_handle`.
"""

from __future__ import annotations

import logging
import os
import pickle
import time
import weakref
from dataclasses import dataclass, field, replace
from multiprocessing.connection import wait

import numpy as np

from ..errors import CollectorClosedError, StepTimeoutError, WorkerDiedError, WorkerError
from ..checks.failures import losses_beyond_restarts, merged_failure, timed_out
from ..groups import check_replacement_columns
from ..config.layout import RolloutLayout
from ..config.spec import RolloutSpec
from ..config.worker_options import WorkerOptions
from . import protocol
from .forwarded_warnings import raise_again
from .local_share import LocalShare, resolve_main_share
from .shared_memory import SharedStorage
from .oversubscription import warn_if_oversubscribed
from .slicing import pickle_env_fns, resolve_num_workers, split_envs, usable_cores
from .transport import DIED, LATE, PipeTransport
from .startup import attach, exit_if_importing_the_main_script, raise_startup_errors, startup_reply
from .worker_handle import WorkerHandle, close_worker, died_error, launch_worker, read_crash_report, stop_worker

__all__ = ["WorkerPool"]

logger = logging.getLogger("parallel_rollouts")

#: Seconds ``close()`` waits for the workers to close their envs and exit before
#: terminating them, and then for terminated workers to go.
CLOSE_TIMEOUT = 2.0



@dataclass
class _Resources:
    """Everything the pool owns that must be freed; no reference back to the pool."""

    workers: list[WorkerHandle] = field(default_factory=list)
    shared: SharedStorage | None = None
    #: How requests reach the workers: the main side of the transport start-up opened with the
    #: segment (:mod:`.transport`; the pipes until then).
    transport: PipeTransport = field(default_factory=PipeTransport)
    closed: bool = False

    @property
    def processes(self) -> list[WorkerHandle]:
        """The workers that are processes of their own (not this process's share of the envs)."""
        return [worker for worker in self.workers if not worker.is_local]

    def post(self, worker: WorkerHandle, request: bytes, step_row: int | None = None) -> None:
        """Send ``request`` to ``worker`` (``step_row``: a bare step of that row) through the
        transport. The main process's share keeps it, to serve when its reply is read. A
        worker that is gone is not an error here: receiving its reply reports how (and lets
        it be replaced)."""
        worker.post(request, step_row, self.transport)

    def shutdown(self, graceful: bool = True) -> list[WorkerError]:
        """Stop every worker (bounded in time) and release the segment. Idempotent."""
        if self.closed:
            return []
        self.closed = True
        errors: list[WorkerError] = []
        deadline = time.monotonic() + CLOSE_TIMEOUT
        workers = self.processes
        for share in (worker for worker in self.workers if worker.is_local):
            try:
                reply = share.close()
                if reply is not None and reply[:1] == protocol.FAILED:
                    errors.append(pickle.loads(reply[1:]))
            except Exception:  # closing goes on: the workers and the segment are freed below
                logger.debug("closing the main process's share of the envs raised", exc_info=True)
        if graceful:
            # A request still in flight (a ready-first step, a step a Ctrl-C interrupted) is let
            # finish first, within the same bound: the close request is then the next one each
            # worker serves, and its reply the next one read here.
            workers = [worker for worker in workers if self._finish_in_flight(worker, deadline)]
            for worker in workers:
                if worker.alive and not self.transport.post(worker, protocol.REQUEST.pack(protocol.CLOSE, 0), None):
                    worker.alive = False
            for worker in workers:
                if not worker.alive:
                    continue
                remaining = deadline - time.monotonic()
                try:
                    if worker.connection.poll(max(remaining, 0)):
                        reply = worker.connection.recv_bytes()
                        if reply[:1] == protocol.WARNED:
                            records, reply = pickle.loads(reply[1:])
                            raise_again(records, quietly=True)
                        if reply[:1] == protocol.FAILED:
                            errors.append(pickle.loads(reply[1:]))
                except (EOFError, OSError):
                    pass
                except Exception:  # a reply this process cannot unpickle: closing goes on
                    logger.debug("unreadable close reply from a worker", exc_info=True)
        workers = self.processes
        for worker in workers:
            worker.process.join(max(deadline - time.monotonic(), 0) if graceful else 0)
        for worker in workers:
            if worker.process.is_alive():
                worker.process.terminate()
        for worker in workers:
            worker.process.join(CLOSE_TIMEOUT)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(CLOSE_TIMEOUT)
            close_worker(worker)
        self.transport.release()
        self.transport = PipeTransport()
        if self.shared is not None:
            self.shared.release()
            self.shared = None
        return errors


    def _finish_in_flight(self, worker: WorkerHandle, deadline: float) -> bool:
        """Read the reply to ``worker``'s request in flight, if any, by ``deadline``; False when
        it is not there by then (a step that hangs): that worker is terminated, not asked."""
        if not worker.alive or not worker.awaiting_reply:
            return True
        try:
            if not self.transport.read_in_flight(worker, deadline):
                return False
        except (EOFError, OSError):
            worker.alive = False
            return True
        worker.awaiting_reply = False
        return True


@dataclass
class _Restarts:
    """Replacements of dead or hung workers over the pool's life (``max_restarts``)."""

    max_restarts: int = 0
    used: int = 0
    #: One error per death, in order, each naming the worker, its envs, the phase and how it ended.
    deaths: list[WorkerError] = field(default_factory=list)


def _shutdown_in_owner(pool: _Resources, owner_pid: int) -> None:
    if os.getpid() == owner_pid:
        pool.shutdown(graceful=True)


class WorkerPool:
    """Worker processes, each hosting a contiguous slice of the envs, and the shared storage.

    ``exchange(command, argument, workers)`` sends one request to each of ``workers`` and
    returns their replies in order; a dead worker raises :class:`WorkerDiedError`, a
    worker silent past ``step_timeout`` raises :class:`StepTimeoutError`. Failure replies
    are returned as they are, for the caller to interpret (see :meth:`raise_failures`).
    """

    def __init__(
        self,
        layout: RolloutLayout,
        resources: _Resources,
        step_timeout: float | None,
        launch: tuple | None = None,
        max_restarts: int = 0,
    ) -> None:
        #: The layout resolved at start-up from the workers' envs; every worker holds the same.
        self.layout = layout
        self._resources = resources
        self.workers = resources.workers
        self.step_timeout = step_timeout
        # (multiprocessing context, pickled factories, attach order): what a replacement needs.
        self._launch = launch
        self._restarts = _Restarts(max_restarts)
        # Warnings the workers raised, sent with their replies; the runner raises them in
        # this process once its rollout is complete (take_warnings).
        self._forwarded: list = []
        # Runs on garbage collection or at interpreter exit if close() was never called,
        # but only in the process that created the pool (not in a forked child).
        self._finalizer = weakref.finalize(self, _shutdown_in_owner, resources, os.getpid())

    # -- construction ----------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        spec: RolloutSpec,
        *,
        options: WorkerOptions,
        policy: protocol.ShippedPolicy | None = None,
    ) -> WorkerPool:
        """Start the workers, check every env's spaces, create the segment, attach the workers.

        With ``policy`` (rollout workers), each worker builds its own copy of the policy.
        ``options.max_restarts``: how many dead or hung workers :meth:`replace` may replace
        over the pool's life.
        """
        resources = _Resources()
        try:
            exit_if_importing_the_main_script()
            local = resolve_main_share(options, spec.num_factories)
            if policy is not None and local:
                # The front door's parse refuses or zeroes it for rollout workers; a caller that
                # skipped the parse would otherwise split the envs from their policy.
                raise ValueError("rollout workers host every env next to the policy: parse the options with share_refused")
            remote_factories = spec.num_factories - local
            if local and options.num_workers is None:
                # The main process is one of the usable cores' processes.
                num_workers = max(1, min(usable_cores() - 1, remote_factories))
            else:
                num_workers = resolve_num_workers(options.num_workers, remote_factories)
            warn_if_oversubscribed(num_workers)
            mp_context = options.multiprocessing_context()
            pickled = pickle_env_fns(spec.env_fns, "a worker process")
            for index, (start, stop) in enumerate(split_envs(remote_factories, num_workers), start=1 if local else 0):
                resources.workers.append(launch_worker(mp_context, index, local + start, local + stop, pickled))
            if local:
                # Made while the workers start theirs.
                resources.workers.insert(0, LocalShare.make(spec.env_fns, local))
            order = attach(spec, resources, policy)
        except BaseException:
            resources.shutdown(graceful=False)
            raise
        return cls(order.layout, resources, options.step_timeout, (mp_context, pickled, order), options.max_restarts)

    @property
    def shared(self) -> SharedStorage:
        return self._resources.shared

    # -- requests --------------------------------------------------------------------------

    def send(self, command: bytes, argument: int, workers: list[WorkerHandle] | None = None, payload: bytes = b"") -> None:
        """Send one request (a payload may follow the 9-byte header) to each of ``workers``."""
        request = protocol.REQUEST.pack(command, argument) + payload
        workers = self.workers if workers is None else workers
        if any(worker.awaiting_reply for worker in workers):
            # An interruption fell between a request and its reply: the reply still
            # queued would answer the wrong request.
            raise CollectorClosedError(
                "an earlier request to the workers was interrupted before all of them replied; "
                "their state is unknown. Close this collector and create a new one."
            )
        phase = protocol.PHASES.get(command, "worker")
        # A bare step is marked: the transport may carry it its quickest way; anything else goes over the pipe.
        step_row = argument if command == protocol.STEP and not payload else None
        post = self._resources.post
        for worker in workers:
            worker.phase = phase
            post(worker, request, step_row)
            worker.awaiting_reply = True

    def receive(self, workers: list[WorkerHandle] | None = None, steps: int = 1) -> list[bytes]:
        """One reply from each of ``workers`` (all by default), in order, within ``steps`` step timeouts."""
        deadline = None if self.step_timeout is None else time.monotonic() + self.step_timeout * steps
        return [self._receive(worker, deadline, steps) for worker in (self.workers if workers is None else workers)]

    def receive_all(
        self, workers: list[WorkerHandle] | None = None, steps: int = 1
    ) -> tuple[list[bytes | None], list[tuple[WorkerHandle, WorkerError]]]:
        """``receive``, reading every worker's reply even after one died or hung.

        Returns the replies (``None`` for a lost worker) and ``(worker, error)`` for each
        worker that died (:class:`WorkerDiedError`) or overran the step timeout
        (:class:`StepTimeoutError`); the caller replaces them or raises.
        """
        deadline = None if self.step_timeout is None else time.monotonic() + self.step_timeout * steps
        replies: list[bytes | None] = []
        losses: list[tuple[WorkerHandle, WorkerError]] = []
        for worker in self.workers if workers is None else workers:
            try:
                replies.append(self._receive(worker, deadline, steps))
            except (WorkerDiedError, StepTimeoutError) as loss:
                replies.append(None)
                losses.append((worker, loss))
        return replies, losses

    def wait_any(self, workers: list[WorkerHandle]) -> list[WorkerHandle]:
        """Those of ``workers`` (each awaiting a reply) whose reply can be read without waiting,
        or whose process ended; waits for the first (``step_timeout`` bounds the wait: past it,
        every one of them is returned, and reading its reply raises the time-out)."""
        if not workers:
            return []
        # The main process's share replies when its reply is read (it steps then): always ready.
        at_once = [worker for worker in workers if worker.replies_at_once]
        if at_once:
            return at_once
        timeout = self.step_timeout if self.step_timeout is not None else float("inf")
        deadline = time.monotonic() + timeout
        transport = self._resources.transport
        while True:
            remaining = max(deadline - time.monotonic(), 0.0)
            ready = transport.wait_any(workers, min(remaining, 1.0))
            if ready:
                return sorted(ready, key=lambda worker: worker.index)
            if time.monotonic() >= deadline:
                return list(workers)

    def cancel_rollouts(self) -> None:
        """Ask every worker still running a rollout to drop it at its next row (its reply then
        says the policy failed, with :class:`~parallel_rollouts.policy.cancel.RolloutCancelled`)."""
        if protocol.CANCEL_SIGNAL is None:
            return
        for worker in self._resources.processes:
            if (
                worker.alive and worker.awaiting_reply and worker.phase == "rollout"
                and worker.process.is_alive()
            ):
                try:
                    os.kill(worker.process.pid, protocol.CANCEL_SIGNAL)
                except (OSError, ValueError):
                    pass  # already gone: closing finds out

    def take_wait_seconds(self) -> np.ndarray:
        """``[num_envs]``: seconds this process waited for each env's worker since the last call."""
        seconds = np.zeros(self.layout.num_envs)
        for worker in self.workers:  # the main process's share: the seconds it stepped
            seconds[worker.start : worker.stop] = worker.wait_seconds
            worker.wait_seconds = 0.0
        return seconds

    # -- replacing workers -------------------------------------------------------------------

    @property
    def restarts_left(self) -> int:
        return self._restarts.max_restarts - self._restarts.used

    def raise_losses(self, losses: list[tuple[WorkerHandle, WorkerError]]) -> None:
        """Raise for workers lost when they cannot all be replaced; return when they can.

        Without ``max_restarts`` the loss itself is raised (several: merged); once the
        restarts are spent, an error listing every death over the pool's life.
        """
        if not losses:
            return
        restarts = self._restarts
        deaths = [self._record_death(worker, loss) for worker, loss in losses]
        restarts.deaths.extend(deaths)
        error = losses_beyond_restarts([loss for _, loss in losses], restarts.deaths, restarts.max_restarts, self.restarts_left)
        if error is not None:
            raise error

    def replace(self, worker: WorkerHandle, policy: protocol.ShippedPolicy | None = None) -> None:
        """Stop ``worker`` (dead or hung) and start a new process for its envs, from the same
        factories, whose episodes draw seeds from a stream never used before.

        Call :meth:`raise_losses` first. The new worker is ready but in no rollout: its
        envs join at the next ``BEGIN``. ``policy``: the copy a rollout worker starts from.
        A replacement that dies while starting up is a loss like any other: replaced again
        while restarts are left. Raises what the new worker's start-up raises otherwise (a
        factory that fails, spaces that differ).
        """
        while True:
            try:
                self._start_replacement(worker, policy)
                return
            except WorkerDiedError as death:
                self.raise_losses([(worker, death)])

    def _start_replacement(self, worker: WorkerHandle, policy: protocol.ShippedPolicy | None) -> None:
        mp_context, pickled, order = self._launch
        self._restarts.used += 1
        worker.phase = "make"
        logger.warning(
            "%s was lost; replacing it (restart %d of %d)", worker.describe(), self._restarts.used, self._restarts.max_restarts
        )
        stop_worker(worker, CLOSE_TIMEOUT)
        self._resources.transport.forget(worker)
        old_process = worker.process
        fresh = launch_worker(mp_context, worker.index, *worker.factories, pickled)
        # The handle takes the new process before anything else can raise, so that shutdown
        # always finds it (and its pipe ends) whatever happens next.
        worker.process, worker.connection, worker.waiter = fresh.process, fresh.connection, fresh.waiter
        worker.crash_report, worker.alive, worker.awaiting_reply = fresh.crash_report, True, False
        worker.incarnation += 1
        if hasattr(old_process, "close"):
            try:
                old_process.close()
            except ValueError:
                # Not reaped yet (killed, still exiting): the process object is dropped instead,
                # and multiprocessing reaps the process later.
                logger.debug("a replaced worker was not reaped yet", exc_info=True)
        reply = startup_reply(worker, "spaces")
        raise_startup_errors([reply])
        check_replacement_columns(reply, worker.start, worker.stop, self.layout, worker.describe())
        attach = replace(order, column_offset=worker.start, incarnation=worker.incarnation, slot=worker.index)
        if policy is not None:
            attach = replace(attach, policy=policy)
        try:
            worker.connection.send(("attach", attach))
        except OSError:
            pass  # it died after sending its spaces: the ready reply below reports how
        raise_startup_errors([startup_reply(worker, "ready")])

    def found_dead(self) -> list[tuple[WorkerHandle, WorkerError]]:
        """``(worker, error)`` for each worker whose process has already ended, without
        waiting: checked before a request that would otherwise lose a whole rollout to it."""
        sentinels = {worker.process.sentinel: worker for worker in self._resources.processes}
        ended = wait(list(sentinels), 0)
        losses = []
        for sentinel in ended:
            worker = sentinels[sentinel]
            worker.alive = False
            worker.phase = "between rollouts"
            worker.process.join(1.0)
            losses.append((worker, died_error(worker, "between two rollouts.")))
        return sorted(losses, key=lambda loss: loss[0].index)

    def _record_death(self, worker: WorkerHandle, loss: WorkerError) -> WorkerError:
        """The loss, with the phase the worker was in and its crash report as the traceback."""
        worker.process.join(0.5 if isinstance(loss, WorkerDiedError) else 0)
        crash = read_crash_report(worker)
        failures = tuple(replace(failure, phase=worker.phase, traceback=crash) for failure in loss.failures)
        return type(loss)(str(loss), failures)

    def take_warnings(self) -> list:
        """The warnings the workers sent since the last call (``forwarded_warnings`` records)."""
        forwarded, self._forwarded = self._forwarded, []
        return forwarded

    def exchange(
        self, command: bytes, argument: int, workers: list[WorkerHandle] | None = None, steps: int = 1, payload: bytes = b""
    ) -> list[bytes]:
        self.send(command, argument, workers, payload)
        return self.receive(workers, steps)

    def request(
        self, command: bytes, argument: int = 0, workers: list[WorkerHandle] | None = None, payload: bytes = b""
    ) -> list[bytes | None]:
        """``exchange``, raising what the workers reported; each worker's reply payload in
        order (``None`` for a bare "done")."""
        replies = self.exchange(command, argument, workers, payload=payload)
        self.raise_failures(replies)
        return [reply[1:] if reply[:1] == protocol.FINISHED else None for reply in replies]

    @staticmethod
    def raise_failures(replies: list[bytes]) -> None:
        """Raise every env failure reported, together; else the first other error."""
        error = merged_failure([pickle.loads(reply[1:]) for reply in replies if reply[:1] == protocol.FAILED])
        if error is not None:
            raise error

    def _receive(self, worker: WorkerHandle, deadline: float | None, steps: int) -> bytes:
        started = time.perf_counter()
        try:
            outcome, reply = worker.take_reply(self._resources.transport, deadline)
        except (EOFError, ConnectionError):
            self._raise_died(worker)
        if outcome == DIED:
            self._raise_died(worker)
        if outcome == LATE:
            raise self._timed_out(worker, steps)
        worker.wait_seconds += time.perf_counter() - started
        worker.awaiting_reply = False
        if reply[:1] == protocol.WARNED:
            records, reply = pickle.loads(reply[1:])
            self._forwarded.extend(records)
        return reply

    def _timed_out(self, worker: WorkerHandle, steps: int) -> StepTimeoutError:
        """The error for a worker that did not reply within the bound of ``steps`` steps (a
        rollout worker's whole rollout: ``horizon`` of them)."""
        bound = (
            f"within step_timeout={self.step_timeout} s per step" if steps <= 1
            else f"a rollout of horizon={steps} within horizon * step_timeout = {steps * self.step_timeout:g} s"
        )
        return timed_out(
            worker.describe(),
            bound,
            range(worker.start, worker.stop),
            outcome=(
                "It is replaced while restarts are left (max_restarts)." if self._restarts.max_restarts
                else "The collector is now unusable."
            ),
        )

    def _raise_died(self, worker: WorkerHandle) -> None:
        worker.alive = False
        worker.process.join(1.0)
        raise died_error(
            worker,
            "while the collector was waiting for it. If an env crashes its process (a segfault in a "
            "simulator, os._exit), run it with backend='serial' to see the error.",
        )

    def close(self) -> None:
        errors = self._resources.shutdown(graceful=True)
        self._finalizer.detach()
        for error in errors:
            logger.warning("an env raised while closing: %s", error)
