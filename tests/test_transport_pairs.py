"""A transport is one pair of classes (``processes/transport.py``): its main side, and the worker
side (the channel) each worker builds from the order it is sent. A new one, listed in
``TRANSPORTS``, is used by the pool, start-up and the worker loop with no change to any of them."""

from __future__ import annotations

import pickle
import re
from functools import partial
from pathlib import Path

import numpy as np

import parallel_rollouts
from parallel_rollouts import ParallelRolloutCollector
from parallel_rollouts.processes import transport
from parallel_rollouts.processes.transport import (
    PipeChannel,
    PipeTransport,
    TransportOrder,
)

from .batch_compare import assert_batches_identical
from .envs import CountingEnv

PROCESSES = Path(parallel_rollouts.__file__).resolve().parent / "processes"


class CountingChannel(PipeChannel):
    """The pipe's worker side, counting the requests it receives in the transport's part of the segment."""

    def __init__(self, connection, served) -> None:
        super().__init__(connection)
        self.served = served

    def receive(self):
        request = super().receive()
        self.served[0] += 1
        return request

    def release(self) -> None:
        self.served = None


class CountingTransport(PipeTransport):
    """A third transport: the pipes, with one int64 per worker in the segment where its channel
    counts what it served, and a count here of what was posted to it."""

    @staticmethod
    def segment_bytes(slots: int) -> int:
        return 8 * slots

    @classmethod
    def open(cls, extra, slots: int):
        return cls(extra, slots), TransportOrder(cls, slots)

    @staticmethod
    def channel(connection, extra, slots: int, slot: int):
        return CountingChannel(connection, extra[: 8 * slots].view(np.int64)[slot : slot + 1])

    def __init__(self, extra, slots: int) -> None:
        super().__init__()
        self.served = extra[: 8 * slots].view(np.int64)
        self.posted = [0] * slots

    def post(self, worker, request, step_row):
        self.posted[worker.index] += 1
        return super().post(worker, request, step_row)

    def release(self) -> None:
        self.served = None


def test_a_transport_listed_first_carries_every_request_both_ways(monkeypatch, no_leaks):
    monkeypatch.setattr(transport, "TRANSPORTS", (CountingTransport, *transport.TRANSPORTS))
    fns = [partial(CountingEnv, env_id=i, episode_length=3 + i) for i in range(4)]
    with ParallelRolloutCollector(fns, None, "sync", horizon=6, seed=2) as reference, \
            ParallelRolloutCollector(fns, None, "async", horizon=6, seed=2, num_workers=2) as collector:
        backend = collector._backend
        pool = backend.pool if hasattr(backend, "pool") else backend.stepper.pool
        main_side = pool._resources.transport
        assert type(main_side) is CountingTransport
        for _ in range(2):
            assert_batches_identical(collector.collect(), reference.collect())
        assert list(main_side.served) == main_side.posted
        assert min(main_side.posted) >= 2 * 6, "every step of both rollouts went through it"


def test_the_order_a_worker_is_sent_names_its_transport_and_pickles():
    order = TransportOrder(CountingTransport, 3)
    assert pickle.loads(pickle.dumps(order)) == order
    assert order.segment_bytes == 24
    assert TransportOrder(PipeTransport, 3).segment_bytes == 0


def test_the_pipes_are_the_transport_of_last_resort():
    assert transport.TRANSPORTS[-1] is PipeTransport
    assert transport.transport_for("python") is PipeTransport


def test_only_the_transport_module_names_a_transport():
    # The worker loop, start-up and the pool talk to whichever transport runs.
    for name in ("worker_main.py", "startup.py", "pool.py", "protocol.py", "worker_handle.py", "local_share.py"):
        text = (PROCESSES / name).read_text(encoding="utf-8")
        assert not re.search("doorbell", text, re.IGNORECASE), name
