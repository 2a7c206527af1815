"""The async backend's worker program: its groups of envs on a view of shared memory.

A worker hosts the groups its factories' envs need (single envs, vector envs or multi-agent
envs; the VectorEnv adapter's own group instead when it asks) and steps them one row at a time
on request (the per-step stepper), or, as a rollout worker, runs whole rollouts of its slice with
its own copy of the policy. Requests arrive, and replies leave, through the worker's side of the
pool's transport (a channel, built from the attach order: :mod:`~parallel_rollouts.processes.transport`);
this loop does not know which transport it is.

The messages and their codes are :mod:`~parallel_rollouts.processes.protocol`'s.

The worker ignores SIGINT: Ctrl-C is the main process's to handle, so the user
sees one exception rather than a traceback per worker. When the main process
dies, the connection reaches end-of-file and the worker exits.
"""

from __future__ import annotations

import faulthandler
import multiprocessing
import os
import pickle
import signal
import sys
import traceback

import cloudpickle
import numpy as np

from ..errors import ObservationError, WorkerError
from ..groups import GroupChain, RolloutGroup, build_groups, make_all, spaces_per_env
from ..groups.requests import ANSWERED_REQUESTS, RaisedByEnv
from ..groups.single_envs import close_each, describe_failure
from ..policy.cancel import CancelFlag
from ..policy.shipping import PolicyReplica
from ..policy.slice_rollout import PolicyFailed, SliceRollout
from .batch_segments import AttachedSegments
from .shared_memory import SharedStorage
from .forwarded_warnings import WarningRecorder
from .protocol import (
    ABANDON, BEGIN, CANCEL_SIGNAL, CLOSE, DONE, FAILED, FINISH, FINISHED, HANDLE, POLICY_FAILED, REQUEST, ROLLOUT,
    STEP, STEP_ENVS, WARNED, AttachOrder,
)
from .transport import pipe_receiver

__all__ = ["HostedSlice", "worker_main"]


# What this worker would print as warnings goes back to the main process instead.
_warnings = WarningRecorder()
#: Set when the main process asks a rollout in flight to stop (``close()`` with a batch in
#: flight): the rollout drops at its next row, and the worker serves the close request next.
#: Never cleared: it is only ever asked before closing, and the signal may arrive before the
#: worker has even read the rollout's request. A plain flag, not a threading.Event: the signal
#: handler must not take a lock.
_cancel_rollout = CancelFlag()
#: How much a rollout worker lowers its priority when a learner runs beside it (``os.nice``):
#: under contention for a core the learner gets most of it (about 90% at 10), and the workers
#: take whatever the learner leaves, all of it while the learner waits for the next batch.
WORKER_NICENESS = 10


def _with_warnings(reply: bytes) -> bytes:
    """``reply``, preceded by the warnings raised since the last one if there are any."""
    if _warnings.pending:
        return WARNED + pickle.dumps((_warnings.take(), reply))
    return reply


def _picklable(error: BaseException, env_offset: int) -> BaseException:
    """The exception itself if it survives pickling, else a WorkerError describing it."""
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:
        return WorkerError.from_failures([describe_failure(env_offset, "worker", error)])


def worker_main(connection, env_offset: int, pickled_env_fns: list[bytes], crash_report=None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if CANCEL_SIGNAL is not None:
        signal.signal(CANCEL_SIGNAL, _cancel_rollout.set_from_signal)
    if crash_report is not None:
        # A crash (segfault, abort) writes this process's Python stack into the pipe the main
        # process reads when it finds the worker dead; nothing is written otherwise.
        faulthandler.enable(file=crash_report.fileno())
    _allow_env_processes()
    _warnings.install()
    group = None
    shared: SharedStorage | None = None
    hosted: HostedSlice | None = None
    channel = None
    envs = []
    try:
        try:
            envs = make_all([cloudpickle.loads(pickled) for pickled in pickled_env_fns], env_offset)
            connection.send(("spaces", spaces_per_env(envs)))
            kind, order = pickle.loads(pipe_receiver(connection)())
            if kind != "attach":
                return
            shared = SharedStorage.attach(order.segment_name, order.layout.allocate_storage, order.transport.segment_bytes)
            channel = order.transport.channel(connection, shared.extra, order.slot)
            env_offset = order.column_offset
            hosted = HostedSlice.build(envs, order, shared.storage)
            group = hosted.group
        except Exception as error:
            connection.send(("error", _picklable(error, env_offset)))
            return
        connection.send(("ready", None))
        _serve(channel, hosted)
    except (EOFError, OSError):
        pass  # the main process is gone: nothing left to report to
    finally:
        if group is None:
            close_each(envs)
        if hosted is not None:
            hosted.segments.release_all()
        if channel is not None:
            channel.release()
        if shared is not None:
            shared.release()


def _allow_env_processes() -> None:
    """Let this worker's envs start processes of their own (an ``AsyncVectorEnv`` does).

    The main process starts workers as daemons, so that it terminates any still running at its
    exit; multiprocessing forbids a daemon to start children. The flag is cleared in this
    worker's own copy of its process object only: the main process still treats the worker as
    a daemon. Children an env starts go away with the worker: ``AsyncVectorEnv``'s own workers
    are daemons, terminated when this worker exits, and they leave when their pipe to this
    worker closes if it is killed.
    """
    multiprocessing.current_process().daemon = False


class HostedSlice:
    """A slice of the envs hosted by one process, and how it serves each request.

    A worker process hosts one; so does the main process when it steps a share of the envs
    itself (:mod:`.local_share`): both serve a request with the same code.
    """

    def __init__(self, group: RolloutGroup, columns, segments: AttachedSegments, env_offset: int, rollout, replica) -> None:
        self.group = group
        self.columns = columns
        self.segments = segments
        self.env_offset = env_offset
        self.rollout = rollout
        self.replica = replica

    @classmethod
    def build(cls, envs: list, order: AttachOrder, storage) -> HostedSlice:
        """Host ``envs`` on their columns of ``storage`` (the order's segment), reset them, and
        build the rollout worker's copy of the policy if the order ships one."""
        layout, env_offset = order.layout, order.column_offset
        if order.group_builder is not None:
            hosted_group = order.group_builder(envs, env_offset, layout)
            # Its columns: one per env, or one per agent of a multi-agent env.
            groups = [(0, hosted_group.num_envs, hosted_group)]
        else:
            groups = build_groups(envs, env_offset, [(0, len(envs))], layout, order.incarnation)
        column_range = (env_offset, env_offset + groups[-1][1])
        # As many batch segments mapped as the main process recycles (BatchMemory's pool).
        # A read-only mapping of each for the worker's own policy (rollout workers), when it reads rows.
        policy_reads = order.policy is not None and order.policy.snapshot is not None
        segments = AttachedSegments(
            layout.allocate_storage, column_range, layout.batches_recycled,
            read_only_mirrors=policy_reads and layout.policy_inputs == "protected",
        )
        group = groups[0][2] if len(groups) == 1 else GroupChain(groups)
        hosted = cls(group, storage.columns(*column_range), segments, env_offset, None, None)
        group.reset_all()
        if order.policy is not None:
            policy = None
            if order.policy.snapshot is not None:
                hosted.replica = PolicyReplica(layout.root_seed, env_offset)
                hosted.replica.apply(pickle.loads(order.policy.snapshot))
                policy = hosted.replica.policy
            if "torch" in sys.modules:
                # Each worker is one of as many processes as cores: one thread each,
                # not a full-machine thread pool per worker.
                sys.modules["torch"].set_num_threads(1)
            if layout.yield_to_learner and hasattr(os, "nice"):
                # With max_policy_lag=1 the learner's update runs while this worker collects: the
                # update is what the next hand-out waits for once collection is the smaller part.
                os.nice(WORKER_NICENESS)
            hosted.rollout = SliceRollout(group, env_offset, groups[-1][1], layout, policy)
        return hosted

    def serve(self, command: bytes, argument: int, message: bytes) -> bytes | None:
        """Serve one request; the reply (``None``: a bare "done"). What the envs raise is
        the reply (``FAILED`` + the pickled error), never raised here."""
        group = self.group
        try:
            if command == STEP:
                result = group.step(argument)
                return None if result is None else FINISHED + pickle.dumps(result)
            if command == STEP_ENVS:
                envs = np.frombuffer(message, dtype=np.int64, count=argument, offset=REQUEST.size)
                result = group.step(0, (envs - self.env_offset).tolist())
                return None if result is None else FINISHED + pickle.dumps(result)
            if command == ROLLOUT:
                target, policy_observations, update = _target_columns(message, argument, self.columns, self.segments)
                return _run_rollout(self.rollout, self.replica, update, target, policy_observations, self.env_offset)
            if command == BEGIN:
                group.begin(_target_columns(message, argument, self.columns, self.segments)[0])
                return None
            if command == FINISH:
                return FINISHED + pickle.dumps(group.finish())
            if command == ABANDON:
                group.abandon(argument)
                return None
            if command == HANDLE:
                request = pickle.loads(message[REQUEST.size :])
                answer = group.handle(request)
                try:
                    return FINISHED + pickle.dumps(answer)
                except Exception as error:
                    if request[0] not in ANSWERED_REQUESTS:
                        raise
                    # An answer that must stay here (an env's `unwrapped`, a lock) is the request's
                    # mistake, which leaves every env where it was.
                    asked = f"{request[0]}({request[1]!r})"
                    unsent = TypeError(f"the answer to {asked} cannot be sent from a worker process: {error}")
                    return FINISHED + pickle.dumps(RaisedByEnv(self.env_offset, asked, unsent))
            if command == CLOSE:
                errors = group.close()
                return None if not errors else FAILED + pickle.dumps(_close_error(errors))
            raise RuntimeError(f"unknown request {command!r}")
        except (WorkerError, ObservationError) as error:
            return FAILED + pickle.dumps(_picklable(error, self.env_offset))
        except Exception as error:
            # A failure outside any env (a bug, or storage gone): report it with its traceback.
            failure = WorkerError.from_failures([describe_failure(self.env_offset, "worker", error)])
            return FAILED + pickle.dumps(_picklable(failure, self.env_offset))


def _serve(channel, hosted: HostedSlice) -> None:
    """Serve requests from ``channel`` (the transport's worker side) until asked to close."""
    receive, send, done, serve = channel.receive, channel.send, channel.done, hosted.serve
    while True:
        command, argument, message = receive()
        reply = serve(command, argument, message)
        if reply is None and command == STEP and not _warnings.pending:
            done()  # a bare "done" to a step: the transport's shortest reply
        else:
            send(_with_warnings(DONE if reply is None else reply))
        if command == CLOSE:
            return


def _target_columns(message: bytes, argument: int, columns, segments: AttachedSegments):
    """The columns a BEGIN or ROLLOUT request says to write, their observations through a
    read-only mapping (``None`` without one: the policy's rows are then copied), and the rest
    of its payload.

    The argument is the length of the batch segment's name heading the payload (0: the
    working segment attached at start); a ROLLOUT's policy update follows the name.
    """
    name_end = REQUEST.size + argument
    if not argument:
        return columns, None, message[name_end:]
    name = message[REQUEST.size : name_end].decode()
    return segments.columns(name), segments.read_only_observations(name), message[name_end:]


def _run_rollout(
    rollout: SliceRollout, replica: PolicyReplica | None, snapshot: bytes, columns, policy_observations, env_offset: int
) -> bytes:
    """One whole rollout of this worker's slice; the reply to send."""
    try:
        if replica is not None:
            try:
                replica.apply(pickle.loads(snapshot) if snapshot else None)
            except Exception as error:
                raise PolicyFailed(error, 0) from error
            rollout.loop.policy = replica.policy
        result = rollout.run(columns, _cancel_rollout, policy_observations)
    except PolicyFailed as failed:
        return POLICY_FAILED + pickle.dumps((_picklable_policy_error(failed.error, env_offset), failed.steps_done))
    if result.recurrent is not None:
        # The state's nesting names the policy's own classes (a named tuple defined in the
        # script being run), which came here by value with the policy: they go back the same
        # way, and cloudpickle maps them to the main process's own classes.
        return FINISHED + cloudpickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
    return FINISHED + pickle.dumps(result)


def _picklable_policy_error(error: BaseException, env_offset: int) -> BaseException:
    """The policy's own exception (with its remote traceback as a note) if it pickles, else a description."""
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    try:
        _add_note(error, f"Raised in the rollout worker hosting envs from {env_offset}:\n{text}")
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:
        return RuntimeError(f"the policy raised {type(error).__name__}: {error}\n{text}")


def _add_note(error: BaseException, note: str) -> None:
    """``error.add_note(note)``; on Python 3.10, which has no ``add_note``, the same ``__notes__`` list.

    Python 3.10 does not print notes under the traceback, but the note still travels with the
    pickled exception and can be read from ``error.__notes__``.
    """
    if hasattr(error, "add_note"):
        error.add_note(note)
    else:
        error.__notes__ = [*getattr(error, "__notes__", ()), note]


def _close_error(errors) -> WorkerError:
    return WorkerError.from_failures([describe_failure(index, "close", error) for index, error in errors])
