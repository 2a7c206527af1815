"""The messages between the main process and an async worker, and their codes.

Protocol, over one duplex ``multiprocessing`` connection per worker (portable:
the same code runs on Windows). Every request gets exactly one reply, so the
two sides never disagree about what the next message is.

Start-up (pickled messages):

1. the worker makes its envs and sends ``("spaces", [ColumnSpaces, ...])`` (each column's
   observation and action space, and its agent for a multi-agent env) or ``("error", exception)``;
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
    b"e" n   + n int64 env indices: step those envs only (the vector env's ready-first
             stepping; reads and writes their columns of row 0)
    b"f" 0   finish                   -> reply b"F" + pickled CompletedEpisodes
    b"a" t   abandon after t steps
    b"r" n   + an n-byte segment name, then a pickled PolicySnapshot, or nothing when the
             policy did not change: rollout workers: bring the worker's copy of the policy
             up to date, run a whole rollout with it into that segment
                              -> reply b"F" + pickled SliceResult, or
                                 b"P" + pickled (exception, steps done) if the policy failed
    b"c" 0   close the envs and exit
    b"x" 0   + pickled request: ``group.handle(request)`` -> reply b"F" + pickled result
             (the VectorEnv adapter's reset, call and set_attr; never on the per-step path)

    reply    = b"K" (done) | b"F" + payload | b"P" + payload | b"E" + pickled exception
             | b"W" + pickled (warning records, the reply)

A step replies ``b"F"`` + pickled result instead of ``b"K"`` when the group's
``step`` returns something (the VectorEnv adapter's infos); rollout groups return
``None``.

Requests are lower-case bytes and replies upper-case ones, so that no byte means two things.
The worker program is :mod:`~parallel_rollouts.processes.worker_main`; the main process's side
is :mod:`~parallel_rollouts.processes.pool`.
"""

from __future__ import annotations

import signal
import struct
from dataclasses import dataclass

from ..config.layout import RolloutLayout

__all__ = [
    "ABANDON", "BEGIN", "CANCEL_SIGNAL", "CLOSE", "DONE", "FAILED", "FINISH", "FINISHED", "HANDLE", "PHASES",
    "POLICY_FAILED", "REQUEST", "ROLLOUT", "STEP", "STEP_ENVS", "WARNED", "AttachOrder", "ShippedPolicy",
]

#: A request's header: its command byte and a little-endian int64 argument.
REQUEST = struct.Struct("<cq")

BEGIN, STEP, FINISH, ABANDON, ROLLOUT, CLOSE, HANDLE = b"b", b"s", b"f", b"a", b"r", b"c", b"x"
#: Step some of a worker's envs (ready-first stepping): n, then n int64 env indices.
STEP_ENVS = b"e"
#: What a worker is doing while it serves each request (named when it dies there).
PHASES = {
    BEGIN: "begin", STEP: "step", STEP_ENVS: "step", FINISH: "finish", ABANDON: "abandon", ROLLOUT: "rollout",
    CLOSE: "close", HANDLE: "call",
}
DONE, FINISHED, POLICY_FAILED, FAILED = b"K", b"F", b"P", b"E"
#: A reply preceded by the warnings raised since the last one: WARNED + pickle((records, reply)).
WARNED = b"W"
#: The signal that asks a rollout in flight to stop at its next row (POSIX only; elsewhere a
#: close waits out its bound instead).
CANCEL_SIGNAL = getattr(signal, "SIGUSR1", None)


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
    #: How requests reach this worker: a :class:`~parallel_rollouts.processes.transport.TransportOrder`,
    #: from which the worker builds its side of the pool's transport.
    transport: object
    #: This worker's first env column (a factory returning a vector env spans several).
    column_offset: int = 0
    #: ``builder(envs, env_offset, layout)`` -> the group to host instead of the rollout
    #: groups (the VectorEnv adapter's); picklable.
    group_builder: object = None
    policy: ShippedPolicy | None = None
    #: How many times this slice's worker was replaced: its envs draw episode seeds
    #: from the stream of this incarnation (:mod:`parallel_rollouts.config.seeding`).
    incarnation: int = 0
    #: This worker's slot of the transport's part of the segment (its index in the pool).
    slot: int = 0
