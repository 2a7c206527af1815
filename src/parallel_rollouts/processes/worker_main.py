"""The async backend's worker program: one EnvGroup on a view of shared memory.

A worker steps its envs one row at a time on request (the per-step stepper), or, as a
rollout worker, runs whole rollouts of its slice with its own copy of the policy.

Protocol, over one duplex ``multiprocessing`` connection per worker (portable:
the same code runs on Windows). Every request gets exactly one reply, so the
two sides never disagree about what the next message is.

Start-up (pickled messages):

1. the worker makes its envs and sends ``("spaces", [(observation_space, action_space), ...])``
   or ``("error", exception)``;
2. the main process checks every env's spaces, creates the shared segment and
   sends ``("attach", AttachOrder)``; the worker attaches, builds its group,
   resets its envs (and, as a rollout worker, builds its copy of the policy from the
   first policy snapshot) and replies ``("ready", None)`` or
   ``("error", exception)``.

Rollouts (the per-step fast path: 9-byte requests, 1-byte replies, no pickling):

    request  = command byte + little-endian int64 argument
    b"b" n   + an n-byte segment name (n = 0: the working segment): begin a rollout
             into that segment, mapping it first if new (writes row 0 of this worker's columns)
    b"s" t   step t                   (reads actions[t], writes rows t and t + 1)
    b"f" 0   finish                   -> reply b"f" + pickled CompletedEpisodes
    b"a" t   abandon after t steps
    b"r" n   + an n-byte segment name, then a pickled PolicySnapshot, or nothing when the
             policy did not change: rollout workers: bring the worker's copy of the policy
             up to date, run a whole rollout with it into that segment
                              -> reply b"f" + pickled SliceResult, or
                                 b"p" + pickled (exception, steps done) if the policy failed
    b"c" 0   close the envs and exit
    b"x" 0   + pickled request: ``group.handle(request)`` -> reply b"f" + pickled result
             (the VectorEnv adapter's reset, call and set_attr; never on the per-step path)

    reply    = b"k" (done) | b"f" + payload | b"p" + payload | b"e" + pickled exception

A step replies ``b"f"`` + pickled result instead of ``b"k"`` when the group's
``step`` returns something (the VectorEnv adapter's infos); rollout groups return
``None``.

The worker ignores SIGINT: Ctrl-C is the main process's to handle, so the user
sees one exception rather than a traceback per worker. When the main process
dies, the connection reaches end-of-file and the worker exits.
"""

from __future__ import annotations

import faulthandler
import multiprocessing
import pickle
import signal
import struct
import sys
import traceback
from dataclasses import dataclass

import cloudpickle
from multiprocessing.connection import wait

from ..errors import ObservationError, WorkerError
from ..groups import GroupChain, RolloutGroup, build_groups, make_all, spaces_per_env
from ..groups.single_envs import close_each, describe_failure
from ..config.layout import RolloutLayout
from ..policy.shipping import PolicyReplica
from ..policy.slice_rollout import PolicyFailed, SliceRollout
from .batch_segments import AttachedSegments
from .shared_memory import SharedStorage
from .forwarded_warnings import WarningRecorder
from .waiting import SpinThenBlock, spin_budget_seconds

__all__ = ["AttachOrder", "REQUEST", "ShippedPolicy", "worker_main"]

REQUEST = struct.Struct("<cq")

#: Batch segments a worker keeps mapped: the main process recycles two (BatchMemory's pool).
BATCH_SEGMENTS_KEPT = 2
BEGIN, STEP, FINISH, ABANDON, ROLLOUT, CLOSE, HANDLE = b"b", b"s", b"f", b"a", b"r", b"c", b"x"
#: What a worker is doing while it serves each request (named when it dies there).
PHASES = {BEGIN: "begin", STEP: "step", FINISH: "finish", ABANDON: "abandon", ROLLOUT: "rollout", CLOSE: "close", HANDLE: "call"}
DONE, FINISHED, POLICY_FAILED, FAILED = b"k", b"f", b"p", b"e"
#: A reply preceded by the warnings raised since the last one: WARNED + pickle((records, reply)).
WARNED = b"w"

# What this worker would print as warnings goes back to the main process instead.
_warnings = WarningRecorder()


def _send(connection, reply: bytes) -> None:
    if _warnings.pending:
        reply = WARNED + pickle.dumps((_warnings.take(), reply))
    connection.send_bytes(reply)


@dataclass(frozen=True)
class ShippedPolicy:
    """What makes a worker a rollout worker: the first snapshot of the policy (``None``: random actions)."""

    #: A pickled :class:`~parallel_rollouts.policy.shipping.PolicySnapshot`.
    snapshot: bytes | None


@dataclass(frozen=True)
class AttachOrder:
    """What a worker needs, once every env's spaces are known, to join the rollout."""

    segment_name: str
    #: The collector's layout, as the main process resolved it (the core is loaded here by name).
    layout: RolloutLayout
    #: This worker's first env column (a factory returning a vector env spans several).
    column_offset: int = 0
    #: ``builder(envs, env_offset, layout)`` -> the group to host instead of the rollout
    #: groups (the VectorEnv adapter's); picklable.
    group_builder: object = None
    policy: ShippedPolicy | None = None
    #: How many times this slice's worker was replaced: its envs draw episode seeds
    #: from the stream of this incarnation (:mod:`parallel_rollouts.config.seeding`).
    incarnation: int = 0


def _picklable(error: BaseException, env_offset: int) -> BaseException:
    """The exception itself if it survives pickling, else a WorkerError describing it."""
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:
        return WorkerError.from_failures([describe_failure(env_offset, "worker", error)])


def _reply_error(connection, error: BaseException, env_offset: int) -> None:
    _send(connection, FAILED + pickle.dumps(_picklable(error, env_offset)))


def worker_main(connection, env_offset: int, pickled_env_fns: list[bytes], crash_report=None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if crash_report is not None:
        # A crash (segfault, abort) writes this process's Python stack into the pipe the main
        # process reads when it finds the worker dead; nothing is written otherwise.
        faulthandler.enable(file=crash_report.fileno())
    _allow_env_processes()
    _warnings.install()
    group = None
    shared: SharedStorage | None = None
    segments: AttachedSegments | None = None
    replica: PolicyReplica | None = None
    envs = []
    try:
        try:
            envs = make_all([cloudpickle.loads(pickled) for pickled in pickled_env_fns], env_offset)
            connection.send(("spaces", spaces_per_env(envs)))
            kind, order = pickle.loads(_receiver(connection)())
            if kind != "attach":
                return
            layout = order.layout
            shared = SharedStorage.attach(order.segment_name, layout.allocate_storage)
            env_offset = order.column_offset
            if order.group_builder is not None:
                group = order.group_builder(envs, env_offset, layout)
                groups = [(0, len(envs), group)]
            else:
                groups = build_groups(envs, env_offset, [(0, len(envs))], layout, order.incarnation)
            column_range = (env_offset, env_offset + groups[-1][1])
            columns = shared.storage.columns(*column_range)
            segments = AttachedSegments(layout.allocate_storage, column_range, BATCH_SEGMENTS_KEPT)
            group = groups[0][2] if len(groups) == 1 else GroupChain(groups)
            group.reset_all()
            rollout = None
            if order.policy is not None:
                policy = None
                if order.policy.snapshot is not None:
                    replica = PolicyReplica(layout.root_seed, env_offset)
                    replica.apply(pickle.loads(order.policy.snapshot))
                    policy = replica.policy
                if "torch" in sys.modules:
                    # Each worker is one of as many processes as cores: one thread each,
                    # not a full-machine thread pool per worker.
                    sys.modules["torch"].set_num_threads(1)
                rollout = SliceRollout(group, env_offset, groups[-1][1], layout, policy)
        except Exception as error:
            connection.send(("error", _picklable(error, env_offset)))
            return
        connection.send(("ready", None))
        _serve(connection, group, columns, segments, env_offset, rollout, replica)
    except (EOFError, OSError):
        pass  # the main process is gone: nothing left to report to
    finally:
        if group is None:
            close_each(envs)
        if segments is not None:
            segments.release_all()
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


def _receiver(connection):
    """``receive()`` for the next request; raises EOFError once the main process is gone.

    With ``spawn`` the connection alone shows the main process's death as
    end-of-file. A ``fork``-ed worker also holds copies of the main process's
    ends, so it watches the parent's sentinel as well.
    """
    spin = SpinThenBlock(connection, spin_budget_seconds()).spin
    parent = multiprocessing.parent_process()
    sentinel = parent.sentinel if parent is not None else None

    def receive() -> bytes:
        if not spin() and sentinel is not None:
            if connection not in wait([connection, sentinel]):
                raise EOFError("the main process is gone")
        return connection.recv_bytes()

    return receive


def _serve(connection, group: RolloutGroup, columns, segments: AttachedSegments, env_offset: int, rollout, replica) -> None:
    receive = _receiver(connection)

    def send(reply: bytes) -> None:
        _send(connection, reply)

    while True:
        message = receive()
        command, argument = REQUEST.unpack_from(message)
        try:
            if command == STEP:
                result = group.step(argument)
                send(DONE if result is None else FINISHED + pickle.dumps(result))
            elif command == ROLLOUT:
                target, update = _target_columns(message, argument, columns, segments)
                send(_run_rollout(rollout, replica, update, target, env_offset))
            elif command == BEGIN:
                group.begin(_target_columns(message, argument, columns, segments)[0])
                send(DONE)
            elif command == FINISH:
                send(FINISHED + pickle.dumps(group.finish()))
            elif command == ABANDON:
                group.abandon(argument)
                send(DONE)
            elif command == HANDLE:
                send(FINISHED + pickle.dumps(group.handle(pickle.loads(message[REQUEST.size :]))))
            elif command == CLOSE:
                errors = group.close()
                send(DONE if not errors else FAILED + pickle.dumps(_close_error(errors)))
                return
            else:
                raise RuntimeError(f"unknown request {command!r}")
        except (WorkerError, ObservationError) as error:
            _reply_error(connection, error, env_offset)
        except Exception as error:
            # A failure outside any env (a bug, or storage gone): report it with its traceback.
            _reply_error(connection, WorkerError.from_failures([describe_failure(env_offset, "worker", error)]), env_offset)


def _target_columns(message: bytes, argument: int, columns, segments: AttachedSegments):
    """The columns a BEGIN or ROLLOUT request says to write, and the rest of its payload.

    The argument is the length of the batch segment's name heading the payload (0: the
    working segment attached at start); a ROLLOUT's policy update follows the name.
    """
    name_end = REQUEST.size + argument
    target = segments.columns(message[REQUEST.size : name_end].decode()) if argument else columns
    return target, message[name_end:]


def _run_rollout(rollout: SliceRollout, replica: PolicyReplica | None, snapshot: bytes, columns, env_offset: int) -> bytes:
    """One whole rollout of this worker's slice; the reply to send."""
    try:
        if replica is not None:
            try:
                replica.apply(pickle.loads(snapshot) if snapshot else None)
            except Exception as error:
                raise PolicyFailed(error, 0) from error
            rollout.loop.policy = replica.policy
        result = rollout.run(columns)
    except PolicyFailed as failed:
        return POLICY_FAILED + pickle.dumps((_picklable_policy_error(failed.error, env_offset), failed.steps_done))
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
