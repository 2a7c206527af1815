"""What handing the policy its own copy of each observation row costs, against zero-copy views.

Each collector contender runs twice in one process, interleaved round by round (their order
alternating between rounds): as shipped (``copies``: one ``bytes`` copy per leaf per row,
:mod:`parallel_rollouts.data.policy_inputs`) and with the earlier zero-copy rows put back for its
collects alone (``views``: read-only views of the batch, one per leaf per rollout, indexed per
row; the rows a torch policy could write the batch through). Reported per workload and mode:
the per-round ratio copies / views of transitions/s (median, min, max), the same ratio of this
process's CPU time per collect (steadier than wall time on a shared machine; for the async
modes it leaves out the workers, and holds the policy and its rows), and each against the
``hand-loop`` contender of the same round. Then the rows alone: microseconds to hand out one
row of ``num_envs`` observations either way, alternating, on the workload's own leaf shape.

The policy runs in this process for every mode measured here (``sync``, ``sync/reuse``,
``async``, ``async/pipelined``); rollout workers make the same copy per row in their own
processes, where no view can be put back from here.

    python -m benchmarks.policy_inputs --rounds 9
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from parallel_rollouts.data import batch_memory, policy_inputs
from parallel_rollouts.policy import loop as rollout_loop

from .contenders import make_contender
from .machine import format_machine_record, machine_record
from .report import write_json
from .summary import summarize_ratios, summarize_throughputs
from .workloads import get_workload

__all__ = ["main", "run"]

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "policy_inputs.json"
MODES = ("sync", "sync/reuse", "async", "async/pipelined")
REFERENCE = "hand-loop"


class ViewRows:
    """The rows before copies: read-only views through a read-only buffer, made once per storage."""

    def __init__(self) -> None:
        self._leaves: Sequence[np.ndarray] | None = None
        self._views: list[np.ndarray] = []

    def __call__(self, leaves: Sequence[np.ndarray], t: int, start: int = 0, stop: int | None = None) -> list[np.ndarray]:
        if leaves is not self._leaves:
            self._leaves = leaves
            self._views = [np.asarray(memoryview(leaf).toreadonly()).view(leaf.dtype) for leaf in leaves]
        if start == 0 and stop is None:
            return [self._views[0][t]] if len(self._views) == 1 else [view[t] for view in self._views]
        return [view[t, start:stop] for view in self._views]


@contextlib.contextmanager
def _views_in_place(rows: ViewRows):
    modules = (batch_memory, rollout_loop)
    shipped = [module.policy_rows_of for module in modules]
    for module in modules:
        module.policy_rows_of = rows
    try:
        yield
    finally:
        for module, function in zip(modules, shipped):
            module.policy_rows_of = function


class _WithViews:
    """A collector contender whose collects run with :class:`ViewRows` in place of the copies."""

    def __init__(self, contender) -> None:
        self.contender = contender
        self.name = f"{contender.name} [views]"
        self.rows = ViewRows()

    def collect(self) -> int:
        with _views_in_place(self.rows):
            return self.contender.collect()

    def close(self) -> None:
        self.contender.close()


def run(workloads: Sequence[str], modes: Sequence[str], num_envs: int, horizon: int, rounds: int,
        num_workers: int | None, warmup: int) -> list[dict]:
    groups = []
    for workload_name in workloads:
        workload = get_workload(workload_name)
        contenders = [make_contender(REFERENCE, workload, num_envs, horizon, 0)]
        try:
            for mode in modes:
                contenders.append(make_contender(mode, workload, num_envs, horizon, 0, num_workers=num_workers))
                contenders.append(_WithViews(make_contender(mode, workload, num_envs, horizon, 0, num_workers=num_workers)))
            for contender in contenders:
                for _ in range(warmup):
                    contender.collect()
            rates: dict[str, list[float]] = {contender.name: [] for contender in contenders}
            cpu: dict[str, list[float]] = {contender.name: [] for contender in contenders}
            for number in range(rounds):
                for contender in contenders if number % 2 == 0 else contenders[:1] + _swapped_pairs(contenders[1:]):
                    cpu_start, start = time.process_time(), time.perf_counter()
                    transitions = contender.collect()
                    rates[contender.name].append(transitions / (time.perf_counter() - start))
                    cpu[contender.name].append(time.process_time() - cpu_start)
                print(f"[{workload_name}] round {number + 1}/{rounds} done", flush=True)
        finally:
            for contender in reversed(contenders):
                contender.close()
        group = {
            "env": workload_name, "num_envs": num_envs, "horizon": horizon, "rounds": rounds, "modes": {},
            "row_us": _row_cost(workload, num_envs, horizon, rounds),
        }
        for mode in modes:
            copies, views = rates[mode], rates[f"{mode} [views]"]
            group["modes"][mode] = {
                "copies_vs_views": summarize_ratios(copies, views),
                "cpu_copies_vs_views": summarize_ratios(cpu[mode], cpu[f"{mode} [views]"]),
                "copies_transitions_per_s": summarize_throughputs(copies),
                "views_transitions_per_s": summarize_throughputs(views),
                f"copies_vs_{REFERENCE}": summarize_ratios(copies, rates[REFERENCE]),
                f"views_vs_{REFERENCE}": summarize_ratios(views, rates[REFERENCE]),
            }
            ratio, cpu_ratio = group["modes"][mode]["copies_vs_views"], group["modes"][mode]["cpu_copies_vs_views"]
            print(
                f"[{workload_name}] {mode}: t/s copies / views {ratio['median']:.3f} (min {ratio['min']:.3f}, max {ratio['max']:.3f}); "
                f"CPU copies / views {cpu_ratio['median']:.3f} (min {cpu_ratio['min']:.3f}, max {cpu_ratio['max']:.3f})"
            )
        row = group["row_us"]
        print(f"[{workload_name}] one row: copies {row['copies']['median']:.2f} us, views {row['views']['median']:.2f} us")
        groups.append(group)
    return groups


def _row_cost(workload, num_envs: int, horizon: int, rounds: int) -> dict:
    """Microseconds (CPU) per row handed out, copies and views alternating, over a batch-shaped leaf."""
    space = workload.env_factory().observation_space
    leaves = [np.zeros((horizon + 1, num_envs, *space.shape), dtype=space.dtype)]
    ways = {"copies": policy_inputs.policy_rows_of, "views": ViewRows()}
    samples: dict[str, list[float]] = {name: [] for name in ways}
    for number in range(rounds):
        for name in ways if number % 2 == 0 else reversed(list(ways)):
            rows, start = ways[name], time.process_time()
            for t in range(horizon):
                rows(leaves, t)
            samples[name].append((time.process_time() - start) / horizon * 1e6)
    return {name: {"median": statistics.median(values), "min": min(values), "max": max(values)} for name, values in samples.items()}


def _swapped_pairs(contenders: list) -> list:
    """Each (copies, views) pair in the other order: neither side always runs first."""
    swapped = []
    for index in range(0, len(contenders), 2):
        swapped += [contenders[index + 1], contenders[index]]
    return swapped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", default="cartpole,image", help="workloads, comma-separated (default cartpole,image)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"collector modes, comma-separated (default {','.join(MODES)})")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--horizon", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--warmup", type=int, default=3, help="untimed collects per contender first (default 3)")
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--quick", action="store_true", help="tiny sizes for a CI smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.num_envs, args.horizon, args.rounds, args.warmup = 2, 8, 2, 1
    machine = machine_record()
    print(format_machine_record(machine) + "\n", flush=True)
    groups = run(args.envs.split(","), args.modes.split(","), args.num_envs, args.horizon, args.rounds, args.num_workers, args.warmup)
    write_json({"machine": machine, "what": __doc__.splitlines()[0], "groups": groups}, args.out)
    print(args.out.resolve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
