"""Per-step handshake options for the async backend, measured side by side.

    python -m benchmarks.handshake --workers 2 --work-us 50 --steps 3000

Each option runs the same loop: the main process tells every worker "step",
each worker burns ``--work-us`` microseconds of CPU (a stand-in for stepping
its envs) and answers "done". Reported: microseconds per step beyond the work
itself, median over interleaved rounds. Options:

* ``connection``: ``multiprocessing`` connections, ``send_bytes``/``recv_bytes``
  blocking at once (portable, and a dead worker shows up as end-of-file);
* ``spin-then-block``: the same connections, each side first spinning up to
  100 us with ``sched_yield`` before blocking (what the backend uses);
* ``raw-fd``: the same pipes driven with ``os.write``/``os.read`` (POSIX only);
* ``semaphore``: one ``multiprocessing.Semaphore`` per worker plus a shared
  "done" semaphore (no end-of-file on death: needs timed waits to notice);
* ``spin``: workers and main busy-poll a shared flag array (no syscalls, but
  every waiter holds a core; timed on its own, since its idle workers would
  starve the other options).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import time

import numpy as np

OPTIONS = ("connection", "spin-then-block", "raw-fd", "semaphore", "spin")


def _burn(microseconds: float) -> None:
    end = time.perf_counter() + microseconds * 1e-6
    while time.perf_counter() < end:
        pass


def _connection_worker(connection, work_us):
    while True:
        message = connection.recv_bytes()
        if message == b"q":
            return
        _burn(work_us)
        connection.send_bytes(b"k")


def _spin_then_block_worker(connection, work_us):
    from parallel_rollouts.processes.waiting import SpinThenBlock

    spin = SpinThenBlock(connection, 100e-6).spin
    while True:
        spin()
        message = connection.recv_bytes()
        if message == b"q":
            return
        _burn(work_us)
        connection.send_bytes(b"k")


def _raw_worker(connection, work_us):
    fd = connection.fileno()
    while True:
        message = os.read(fd, 1)
        if message in (b"q", b""):
            return
        _burn(work_us)
        os.write(fd, b"k")


def _semaphore_worker(go, done, stop, work_us):
    while True:
        go.acquire()
        if stop.value:
            return
        _burn(work_us)
        done.release()


def _spin_worker(flags, index, work_us):
    view = np.frombuffer(flags, dtype=np.int64)
    seen = 0
    while True:
        while view[index] == seen:
            pass
        seen = int(view[index])
        if seen < 0:
            return
        _burn(work_us)
        view[len(view) // 2 + index] = seen


class _Option:
    """One running handshake: ``round_trip()`` does one step with every worker."""

    def __init__(self, name: str, context, workers: int, work_us: float) -> None:
        self.name = name
        self.processes = []
        if name in ("connection", "spin-then-block", "raw-fd"):
            self.connections = []
            target = {"connection": _connection_worker, "spin-then-block": _spin_then_block_worker, "raw-fd": _raw_worker}[name]
            for _ in range(workers):
                parent, child = context.Pipe(duplex=True)
                process = context.Process(target=target, args=(child, work_us), daemon=True)
                process.start()
                child.close()
                self.connections.append(parent)
                self.processes.append(process)
            self.fds = [c.fileno() for c in self.connections]
            if name == "spin-then-block":
                from parallel_rollouts.processes.waiting import SpinThenBlock

                self.waiters = [SpinThenBlock(c, 100e-6) for c in self.connections]
        elif name == "semaphore":
            self.stop = context.Value("b", 0, lock=False)
            self.go = [context.Semaphore(0) for _ in range(workers)]
            self.done = context.Semaphore(0)
            for go in self.go:
                process = context.Process(target=_semaphore_worker, args=(go, self.done, self.stop, work_us), daemon=True)
                process.start()
                self.processes.append(process)
        else:
            self.flags = context.RawArray("q", 2 * workers)
            self.view = np.frombuffer(self.flags, dtype=np.int64)
            self.counter = 0
            for index in range(workers):
                process = context.Process(target=_spin_worker, args=(self.flags, index, work_us), daemon=True)
                process.start()
                self.processes.append(process)
        self.workers = workers

    def round_trip(self) -> None:
        if self.name == "spin-then-block":
            for connection in self.connections:
                connection.send_bytes(b"s")
            for connection, waiter in zip(self.connections, self.waiters):
                waiter.spin()
                connection.recv_bytes()
        elif self.name == "connection":
            for connection in self.connections:
                connection.send_bytes(b"s")
            for connection in self.connections:
                connection.recv_bytes()
        elif self.name == "raw-fd":
            for fd in self.fds:
                os.write(fd, b"s")
            for fd in self.fds:
                os.read(fd, 1)
        elif self.name == "semaphore":
            for go in self.go:
                go.release()
            for _ in self.go:
                self.done.acquire()
        else:
            self.counter += 1
            self.view[: self.workers] = self.counter
            half = self.workers
            while (self.view[half:] != self.counter).any():
                pass

    def close(self) -> None:
        if self.name in ("connection", "spin-then-block"):
            for connection in self.connections:
                connection.send_bytes(b"q")
        elif self.name == "raw-fd":
            for fd in self.fds:
                os.write(fd, b"q")
        elif self.name == "semaphore":
            self.stop.value = 1
            for go in self.go:
                go.release()
        else:
            self.view[: self.workers] = -1
        for process in self.processes:
            process.join(5)
            if process.is_alive():
                process.terminate()


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--work-us", type=float, default=50.0, help="CPU each worker burns per step")
    parser.add_argument("--steps", type=int, default=2000, help="steps per timed round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--options", default=",".join(OPTIONS))
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    names = [name for name in args.options.split(",") if name]
    if os.name == "nt":
        names = [name for name in names if name != "raw-fd"]
    context = multiprocessing.get_context("spawn")
    overhead: dict[str, list[float]] = {name: [] for name in names}

    def measure(group: list[str]) -> None:
        options = [_Option(name, context, args.workers, args.work_us) for name in group]
        time.sleep(1.0)
        try:
            for _ in range(args.rounds):
                for option in options:  # interleaved: A B C A B C ...
                    start = time.perf_counter()
                    for _ in range(args.steps):
                        option.round_trip()
                    per_step = (time.perf_counter() - start) / args.steps * 1e6
                    overhead[option.name].append(per_step - args.work_us)
        finally:
            for option in options:
                option.close()

    # Pure spinners poll even while another option is being timed, which would starve
    # the others of both cores: they run on their own, after the interleaved group.
    measure([name for name in names if name != "spin"])
    if "spin" in names:
        measure(["spin"])
    result = {
        "workers": args.workers,
        "work_us": args.work_us,
        "overhead_us": {name: {"median": statistics.median(v), "best": min(v), "all": v} for name, v in overhead.items()},
    }
    print(f"workers={args.workers} work={args.work_us:.0f} us/step; handshake overhead per step (us):")
    for name, values in overhead.items():
        print(f"  {name:<11} median {statistics.median(values):8.1f}   best {min(values):8.1f}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)
        print(f"wrote {os.path.abspath(args.json)}")
    return result


if __name__ == "__main__":
    multiprocessing.freeze_support()
    main()
