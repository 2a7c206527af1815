"""The per-step hot path alone: the compiled core against its pure-Python twin.

One step's core work, as ``EnvGroup.step`` does it for ``num_envs`` envs:
``write_rows`` of one row of fresh observations, ``record_step`` of the rewards
and end flags, and for the envs whose episode just ended ``scatter_final`` and a
``write_row`` of their reset observation. A fixed share of envs ends each step
(``DONE_FRACTION``, episodes of 32 steps on average, spread evenly over envs).

Besides observations that arrive with the storage's exact dtype, the slow paths envs
really take are covered: float64 arrays into a float32 space (a common Box), Python
ints for a ``Discrete`` observation, and Python lists of floats.

Each case (env count x dtype x observation shape x source) times blocks of steps with
the compiled core and the pure twin alternately, so machine drift hits both
alike, and reports the median time per step and the median per-block speed-up.

    python -m benchmarks.core_microbench [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np

from parallel_rollouts.conformance.rounds import run_rounds
from parallel_rollouts.core.selector import load_core

from .report import format_machine_record, machine_record, parse_counts, write_json

SMALL_SHAPE = (4,)
LARGE_SHAPE = (84, 84, 4)
DTYPES = ("uint8", "int64", "float32", "float64", "bool")
LARGE_DTYPES = ("uint8", "float32")
EPISODE_PERIOD = 32
DONE_FRACTION = 1 / EPISODE_PERIOD
# Observation storage per case stays under this; large observations get shorter blocks.
STORAGE_BUDGET_BYTES = 64 * 2**20
MAX_BLOCK_STEPS = 64
MIN_BLOCK_STEPS = 4


#: How an env hands over its observation: ``exact`` (an array of the storage's dtype),
#: ``float64`` (a float64 array into float32 storage), ``python-int`` (a Python int for a
#: scalar Discrete observation), ``list`` (a Python list of floats).
SOURCES = ("exact", "float64", "python-int", "list")
SLOW_PATH_CASES = (("float32", SMALL_SHAPE, "float64"), ("int64", (), "python-int"), ("float32", SMALL_SHAPE, "list"))


@dataclass(frozen=True)
class Case:
    num_envs: int
    dtype: str
    shape: tuple[int, ...]
    source: str = "exact"

    def block_steps(self) -> int:
        row_bytes = int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize * self.num_envs
        # observations and final_observations each hold about one row per step
        fitting = STORAGE_BUDGET_BYTES // (2 * row_bytes)
        return int(min(MAX_BLOCK_STEPS, max(MIN_BLOCK_STEPS, fitting)))


def cases_for(env_counts: tuple[int, ...]) -> list[Case]:
    cases = []
    for num_envs in env_counts:
        cases += [Case(num_envs, dtype, SMALL_SHAPE) for dtype in DTYPES]
        cases += [Case(num_envs, dtype, LARGE_SHAPE) for dtype in LARGE_DTYPES]
        cases += [Case(num_envs, dtype, shape, source) for dtype, shape, source in SLOW_PATH_CASES]
    return cases


class StepWorkload:
    """Storage and inputs for blocks of ``steps`` core steps of one case, shared by both cores."""

    def __init__(self, case: Case, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        n, steps = case.num_envs, case.block_steps()
        self.steps = steps
        self.observations = np.zeros((steps + 1, n) + case.shape, dtype=case.dtype)
        self.final_observations = np.zeros((steps, n) + case.shape, dtype=case.dtype)
        if case.dtype == "bool":
            self.sources = [rng.random(case.shape) > 0.5 for _ in range(n)]
        elif np.dtype(case.dtype).kind in "iu":
            self.sources = [rng.integers(0, 100, size=case.shape).astype(case.dtype) for _ in range(n)]
        else:
            self.sources = [rng.random(case.shape).astype(case.dtype) for _ in range(n)]
        if case.source == "float64":
            self.sources = [source.astype(np.float64) for source in self.sources]
        elif case.source == "python-int":
            self.sources = [int(source) for source in self.sources]
        elif case.source == "list":
            self.sources = [source.astype(np.float64).tolist() for source in self.sources]
        # Python scalars, as envs return them.
        self.rewards = [float(value) for value in rng.random(n)]
        self.terminations = [[(t + column) % EPISODE_PERIOD == 0 for column in range(n)] for t in range(steps)]
        self.truncations = [False] * n
        self.done_columns = np.zeros(n, dtype=np.int64)
        self.running = (np.zeros(n), np.zeros(n, dtype=np.int64), np.arange(n, dtype=np.int64))
        capacity = steps * n
        self.completed = (np.empty(capacity),) + tuple(np.empty(capacity, dtype=np.int64) for _ in range(4))
        self.books = (
            np.zeros((steps, n)),
            np.zeros((steps, n), dtype=bool),
            np.zeros((steps, n), dtype=bool),
            np.zeros((steps, n), dtype=np.int64),
        )

    def time_block(self, core: ModuleType) -> float:
        """Seconds per step over one block of steps with ``core``."""
        writer = core.ObservationWriter(self.observations, self.final_observations)
        recorder = core.StepRecorder(*self.books, *self.running, *self.completed, self.done_columns, 0)
        sources, rewards, truncations = self.sources, self.rewards, self.truncations
        terminations, done_columns = self.terminations, self.done_columns
        start = time.perf_counter()
        for t in range(self.steps):
            if writer.write_rows(t + 1, sources) != -1:
                raise RuntimeError("a benchmark source did not match its storage row.")
            n_done = recorder.record_step(t, rewards, terminations[t], truncations)
            if n_done:
                writer.scatter_final(t, done_columns, n_done)
                for column in done_columns[:n_done].tolist():
                    writer.write_row(t + 1, column, sources[column])
        return (time.perf_counter() - start) / self.steps


def run_case(case: Case, repeats: int, cores: dict[str, ModuleType]) -> dict:
    workload = StepWorkload(case)
    order = list(cores)
    for name in order:
        workload.time_block(cores[name])  # warm-up
    # Alternate which core goes first so neither always follows the other.
    measured = run_rounds(order, lambda name: workload.time_block(cores[name]), repeats, order="alternate")
    seconds = dict(zip(order, measured.samples))
    compiled, python = seconds["compiled"], seconds["python"]
    return {
        "num_envs": case.num_envs,
        "dtype": case.dtype,
        "shape": list(case.shape),
        "source": case.source,
        "steps_per_block": workload.steps,
        "done_fraction": DONE_FRACTION,
        "compiled_us_per_step": statistics.median(compiled) * 1e6,
        "python_us_per_step": statistics.median(python) * 1e6,
        "speedup": statistics.median(p / c for p, c in zip(python, compiled)),
        "speedup_min": min(p / c for p, c in zip(python, compiled)),
        "speedup_max": max(p / c for p, c in zip(python, compiled)),
        "compiled_samples_s": compiled,
        "python_samples_s": python,
    }


def format_results(cases: list[dict]) -> str:
    header = f"{'case':<40} {'compiled us/step':>16} {'python us/step':>15} {'speedup (median [min, max])':>28}"
    lines = [header, "-" * len(header)]
    for result in cases:
        source = "" if result["source"] == "exact" else f" from {result['source']}"
        label = f"N={result['num_envs']} {result['dtype']}{result['shape']}{source}"
        speedup = f"{result['speedup']:.2f}x [{result['speedup_min']:.2f}, {result['speedup_max']:.2f}]"
        lines.append(
            f"{label:<40} {result['compiled_us_per_step']:>16.2f} {result['python_us_per_step']:>15.2f} {speedup:>28}"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.core_microbench",
        description="Time one step's core work with the compiled core and its pure-Python twin.",
    )
    parser.add_argument("--num-envs-list", default=None, help="env counts, comma-separated (default 16,64)")
    parser.add_argument("--repeats", type=int, default=None, help="timed blocks per core and case (default 51)")
    parser.add_argument("--json", type=Path, help="write the results as JSON to this path")
    parser.add_argument("--quick", action="store_true", help="16 envs and 3 repeats: a CI smoke run")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    env_counts_text = args.num_envs_list or ("16" if args.quick else "16,64")
    try:
        env_counts = parse_counts(env_counts_text, "--num-envs-list")
    except argparse.ArgumentTypeError as error:
        parser.error(str(error))
    repeats = args.repeats or (3 if args.quick else 51)
    if repeats < 1:
        parser.error(f"--repeats must be >= 1; got {repeats!r}.")
    cores = {"compiled": load_core("compiled")[1], "python": load_core("python")[1]}
    machine = machine_record()
    print(format_machine_record(machine) + "\n", flush=True)
    results = []
    for case in cases_for(env_counts):
        results.append(run_case(case, repeats, cores))
    print(format_results(results))
    if args.json:
        settings = {"num_envs_list": list(env_counts), "repeats": repeats, "done_fraction": DONE_FRACTION}
        write_json({"machine": machine, "settings": settings, "cases": results}, args.json)
        print(f"wrote {args.json.resolve()}")
    return 0


if __name__ == "__main__":
    multiprocessing.freeze_support()
    sys.exit(main())
