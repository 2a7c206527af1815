"""The async backend's worker process: one EnvGroup on a view of shared memory.

Protocol, over one duplex ``multiprocessing`` connection per worker (portable:
the same code runs on Windows). Every request gets exactly one reply, so the
two sides never disagree about what the next message is.

Start-up (pickled messages):

1. the worker makes its envs and sends ``("spaces", [(observation_space, action_space), ...])``
   or ``("error", exception)``;
2. the main process checks every env's spaces, creates the shared segment and
   sends ``("attach", AttachOrder)``; the worker attaches, builds its group,
   resets its envs and replies ``("ready", None)`` or ``("error", exception)``.

Rollouts (the per-step fast path: 9-byte requests, 1-byte replies, no pickling):

    request  = command byte + little-endian int64 argument
    b"b" 0   begin a rollout          (writes row 0 of this worker's columns)
    b"s" t   step t                   (reads actions[t], writes rows t and t + 1)
    b"f" 0   finish                   -> reply b"f" + pickled CompletedEpisodes
    b"a" t   abandon after t steps
    b"c" 0   close the envs and exit
    b"x" 0   + pickled request: ``group.handle(request)`` -> reply b"f" + pickled result
             (the VectorEnv adapter's reset, call and set_attr; never on the per-step path)

    reply    = b"k" (done) | b"f" + payload | b"e" + pickled exception

A step replies ``b"f"`` + pickled result instead of ``b"k"`` when the group's
``step`` returns something (the VectorEnv adapter's infos); rollout groups return
``None``.

The worker ignores SIGINT: Ctrl-C is the main process's to handle, so the user
sees one exception rather than a traceback per worker. When the main process
dies, the connection reaches end-of-file and the worker exits.
"""

from __future__ import annotations

import multiprocessing
import pickle
import signal
import struct
from dataclasses import dataclass

import cloudpickle
from multiprocessing.connection import wait

from ..core import load_core
from ..errors import ObservationError, WorkerError
from ..spaces import SpaceLayout
from ..storage import RolloutStorage
from .shared_memory import SharedStorage
from .groups import GroupChain, build_groups, close_made, make_all, spaces_per_env
from .stepping import EnvGroup, describe_failure
from .waiting import SpinThenBlock, spin_budget_seconds

__all__ = ["AttachOrder", "REQUEST", "worker_main"]

REQUEST = struct.Struct("<cq")
BEGIN, STEP, FINISH, ABANDON, CLOSE, HANDLE = b"b", b"s", b"f", b"a", b"c", b"x"
DONE, FINISHED, FAILED = b"k", b"f", b"e"


@dataclass(frozen=True)
class AttachOrder:
    """What a worker needs, once every env's spaces are known, to join the rollout."""

    segment_name: str
    observation_space: object
    action_space: object
    root_seed: int
    horizon: int
    num_envs: int
    info_keys: tuple[str, ...]
    core_name: str
    observation_check: str = "warn"
    #: This worker's first env column (a factory returning a vector env spans several).
    column_offset: int = 0
    #: ``builder(envs, env_offset, observation_layout, action_layout, core)`` -> the group to
    #: host instead of the rollout groups (the VectorEnv adapter's); picklable.
    group_builder: object = None


def _picklable(error: BaseException, env_offset: int) -> BaseException:
    """The exception itself if it survives pickling, else a WorkerError describing it."""
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:
        return WorkerError.from_failures([describe_failure(env_offset, "worker", error)])


def _reply_error(connection, error: BaseException, env_offset: int) -> None:
    connection.send_bytes(FAILED + pickle.dumps(_picklable(error, env_offset)))


def worker_main(connection, env_offset: int, pickled_env_fns: list[bytes]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    group = None
    shared: SharedStorage | None = None
    envs = []
    try:
        try:
            envs = make_all([cloudpickle.loads(pickled) for pickled in pickled_env_fns], env_offset)
            connection.send(("spaces", spaces_per_env(envs)))
            kind, order = pickle.loads(_receiver(connection)())
            if kind != "attach":
                return
            _, core = load_core(order.core_name)
            observation_layout = SpaceLayout(order.observation_space, "observation")
            action_layout = SpaceLayout(order.action_space, "action")

            def allocate(allocator, zeroed):
                return RolloutStorage.allocate(
                    observation_layout, action_layout, order.horizon, order.num_envs, order.info_keys, allocator, zeroed
                )

            shared = SharedStorage.attach(order.segment_name, allocate)
            env_offset = order.column_offset
            if order.group_builder is not None:
                group = order.group_builder(envs, env_offset, observation_layout, action_layout, core)
                groups = [(0, len(envs), group)]
            else:
                groups = build_groups(
                    envs, env_offset, [(0, len(envs))], order.root_seed, observation_layout, action_layout,
                    order.info_keys, core, observation_check=order.observation_check,
                )
            columns = shared.storage.columns(env_offset, env_offset + groups[-1][1])
            group = groups[0][2] if len(groups) == 1 else GroupChain(groups)
            group.reset_all()
        except Exception as error:
            connection.send(("error", _picklable(error, env_offset)))
            return
        connection.send(("ready", None))
        _serve(connection, group, columns, env_offset)
    except (EOFError, OSError):
        pass  # the main process is gone: nothing left to report to
    finally:
        if group is None:
            close_made(envs)
        if shared is not None:
            shared.release()


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


def _serve(connection, group: EnvGroup | GroupChain, columns, env_offset: int) -> None:
    receive, send = _receiver(connection), connection.send_bytes
    while True:
        message = receive()
        command, argument = REQUEST.unpack_from(message)
        try:
            if command == STEP:
                result = group.step(argument)
                send(DONE if result is None else FINISHED + pickle.dumps(result))
            elif command == BEGIN:
                group.begin(columns)
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


def _close_error(errors) -> WorkerError:
    return WorkerError.from_failures([describe_failure(index, "close", error) for index, error in errors])
