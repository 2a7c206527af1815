"""The per-step hot path alone: the compiled core against the pure-Python one (the same ``rows.py``, interpreted).

One step's core work, as ``EnvGroup.step`` does it for ``num_envs`` envs:
``write_rows`` of one row of fresh observations, ``record_step`` of the rewards
and end flags, and for the envs whose episode just ended ``scatter_final`` and a
``write_row`` of their reset observation. A fixed share of envs ends each step
(``DONE_FRACTION``, episodes of 32 steps on average, spread evenly over envs).

Besides observations that arrive with the storage's exact dtype, the slow paths envs
really take are covered: float64 arrays into a float32 space (a common Box), Python
ints for a ``Discrete`` observation, and Python lists of floats.

Each case (env count x dtype x observation shape x source) times blocks of steps with
the compiled core and the pure-Python one alternately, so machine drift hits both
alike, and reports the median time per step and the median per-block speed-up.

    python -m benchmarks.core_microbench [--quick] [--json PATH]

``--recurrent`` times instead what carrying a recurrent policy's state costs the library per
row (resets at episode starts, the checks of each returned state, the batch's record of it)
against the policy's own cost: a small GRU policy on CartPole, in interleaved rounds of four
contenders: collects with the library carrying the state, collects with the same network
keeping its state itself, the network alone over the same rows, and the library's
bookkeeping alone with a policy that costs nothing. The policy's actions follow the pole, so both
kinds of collect run the same episodes (env ``i``'s truncated at ``32 + i`` steps, so each env
resets its state about that often, on rows of its own).
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
from parallel_rollouts.data.storage import RolloutStorage

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


# -- a recurrent policy's state: the library's per-row cost against the policy's own ----------

RECURRENT_HIDDEN = 64
RECURRENT_HORIZON = 128
RECURRENT_EPISODE_STEPS = 32


def _gru_policy(hidden: int):
    """A small batched GRU policy on CartPole (4 inputs, 2 actions, a value head), its state
    ``{"h": [n, hidden]}`` float32."""
    import torch

    from parallel_rollouts import PolicyOutput

    class GRUPolicy(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cell = torch.nn.GRUCell(4, hidden)
            self.logits = torch.nn.Linear(hidden, 2)
            self.value = torch.nn.Linear(hidden, 1)

        def initial_state(self, num_envs: int) -> dict:
            return {"h": torch.zeros(num_envs, hidden)}

        @torch.no_grad()
        def forward(self, observations, state, episode_starts):
            inputs = torch.from_numpy(np.array(observations, dtype=np.float32))
            hidden_state = self.cell(inputs, state["h"])
            logits = self.logits(hidden_state)
            # The actions follow the pole (angle plus angular velocity), not the state: with and
            # without the library's bookkeeping the envs then run the same episodes, so the
            # collects compared do the same env work. The logits are computed all the same.
            actions = (inputs[:, 2] + inputs[:, 3] > 0).to(torch.int64) + 0 * logits.argmax(dim=1)
            return PolicyOutput(actions, values=self.value(hidden_state).squeeze(1)), {"h": hidden_state}

    torch.manual_seed(0)
    return GRUPolicy()


class _HandCarried:
    """The same network as a feed-forward policy that keeps its state itself: no resets, no
    checks, no record; what a collect costs without the library's state bookkeeping."""

    def __init__(self, network, num_envs: int) -> None:
        self._network = network
        self._state = network.initial_state(num_envs)

    def __call__(self, observations):
        output, self._state = self._network(observations, self._state, None)
        return output


class RecurrentWorkload:
    """Collects of ``num_envs`` CartPoles with a GRU policy, and the parts of one alone."""

    def __init__(self, num_envs: int, horizon: int, hidden: int) -> None:
        from functools import partial

        import gymnasium as gym

        from parallel_rollouts import ParallelRolloutCollector

        self.rows = horizon
        self.network = _gru_policy(hidden)
        # Env i's episodes are truncated at RECURRENT_EPISODE_STEPS + i steps: every env resets its
        # state about that often, and the resets fall on different rows.
        fns = [
            partial(gym.make, "CartPole-v1", max_episode_steps=RECURRENT_EPISODE_STEPS + index) for index in range(num_envs)
        ]
        self.collectors = {
            "library state": ParallelRolloutCollector(fns, self.network, "sync", horizon=horizon, seed=0),
            "hand-carried state": ParallelRolloutCollector(
                fns, _HandCarried(self.network, num_envs), "sync", horizon=horizon, seed=0
            ),
        }
        batch = self.collectors["library state"].collect()
        self.observations = [np.array(batch.observations[t]) for t in range(horizon)]
        self.initial = self.network.initial_state(num_envs)
        # The bookkeeping alone runs over this batch's episode ends (CartPole's, with this policy).
        self.storage = _EndsOnly(batch.terminations, batch.truncations)
        self.num_envs = num_envs

    def seconds_per_row(self, name: str) -> float:
        """CPU seconds of this thread per row: on a busy machine, time other processes take is
        not counted (the envs and the policy all run in this thread)."""
        if name in self.collectors:
            collector = self.collectors[name]
            start = time.thread_time()
            collector.collect()
            return (time.thread_time() - start) / self.rows
        if name == "policy alone":
            state, network = self.initial, self.network
            start = time.thread_time()
            for observations in self.observations:
                _, state = network(observations, state, None)
            return (time.thread_time() - start) / self.rows
        # "bookkeeping alone": the library's carrier with a policy that costs nothing.
        from parallel_rollouts import RecurrentPolicy
        from parallel_rollouts.policy.recurrent import StateCarrier

        free = RecurrentPolicy(lambda observations, state, starts: (None, state), self.network.initial_state)
        carrier = StateCarrier(self.num_envs, 0, store_states=False)
        observations = self.observations
        start = time.thread_time()
        carrier.begin(free, self.storage)
        for t in range(self.rows):
            carrier.call(free, t, observations[t])
        carrier.finish()
        return (time.thread_time() - start) / self.rows

    def close(self) -> None:
        for collector in self.collectors.values():
            collector.close()


class _EndsOnly:
    """The storage fields the state carrier reads: the end flags of each row."""

    def __init__(self, terminations: np.ndarray, truncations: np.ndarray) -> None:
        self.terminations, self.truncations = terminations, truncations
        self.reset_steps = np.zeros_like(terminations)
        self.rewards = np.zeros(terminations.shape)
        self.horizon = terminations.shape[0]

    # The one rule of where an episode starts, read from these fields as from a rollout's.
    episode_ends_and_starts = RolloutStorage.episode_ends_and_starts


RECURRENT_CONTENDERS = ("library state", "hand-carried state", "policy alone", "bookkeeping alone")


def run_recurrent(num_envs: int, rounds: int, horizon: int = RECURRENT_HORIZON, hidden: int = RECURRENT_HIDDEN) -> dict:
    """Interleaved rounds of the four contenders; microseconds per row (one row: all envs)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    workload = RecurrentWorkload(num_envs, horizon, hidden)
    try:
        for name in RECURRENT_CONTENDERS:
            workload.seconds_per_row(name)  # warm-up
        measured = run_rounds(list(RECURRENT_CONTENDERS), workload.seconds_per_row, rounds)
    finally:
        workload.close()
        torch.set_num_threads(threads)
    samples = {name: [seconds * 1e6 for seconds in values] for name, values in zip(RECURRENT_CONTENDERS, measured.samples)}
    medians = {name: statistics.median(values) for name, values in samples.items()}
    paired = [a - b for a, b in zip(samples["library state"], samples["hand-carried state"])]
    ends = workload.storage.terminations | workload.storage.truncations
    return {
        "num_envs": num_envs,
        "horizon": horizon,
        "hidden": hidden,
        "rounds": rounds,
        "episode_ends_per_row": float(ends.sum() / horizon),
        "us_per_row": medians,
        "collect_difference_us_per_row": statistics.median(paired),
        "bookkeeping_share_of_policy": medians["bookkeeping alone"] / medians["policy alone"],
        # Per round, the two measured side by side: steadier than a ratio of medians on a busy machine.
        "bookkeeping_share_of_policy_paired": statistics.median(
            b / p for b, p in zip(samples["bookkeeping alone"], samples["policy alone"])
        ),
        "samples_us_per_row": samples,
    }


def format_recurrent(result: dict) -> str:
    lines = [
        f"GRU policy (hidden {result['hidden']}) on {result['num_envs']} CartPoles, horizon {result['horizon']}, "
        f"{result['rounds']} interleaved rounds; {result['episode_ends_per_row']:.2f} episode ends per row",
        f"{'contender':<22} {'us per row (median)':>20}",
    ]
    for name, value in result["us_per_row"].items():
        lines.append(f"{name:<22} {value:>20.1f}")
    lines.append(
        f"library - hand-carried collect (paired median): {result['collect_difference_us_per_row']:.1f} us per row; "
        f"bookkeeping alone / policy alone: {result['bookkeeping_share_of_policy']:.1%} "
        f"(paired per round: {result['bookkeeping_share_of_policy_paired']:.1%})"
    )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.core_microbench",
        description="Time one step's core work with the compiled core and the pure-Python one.",
    )
    parser.add_argument("--num-envs-list", default=None, help="env counts, comma-separated (default 16,64)")
    parser.add_argument("--repeats", type=int, default=None, help="timed blocks per core and case (default 51)")
    parser.add_argument("--json", type=Path, help="write the results as JSON to this path")
    parser.add_argument("--quick", action="store_true", help="16 envs and 3 repeats: a CI smoke run")
    parser.add_argument(
        "--recurrent", action="store_true",
        help="instead: a GRU policy's state carried by the library against the policy's own cost (16 envs, 9 rounds)",
    )
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
    machine = machine_record()
    print(format_machine_record(machine) + "\n", flush=True)
    if args.recurrent:
        rounds = args.repeats or (3 if args.quick else 9)
        # Quick: long enough that every env's episode is truncated once, so ends are always counted.
        quick_horizon = RECURRENT_EPISODE_STEPS + env_counts[0]
        result = run_recurrent(env_counts[0], rounds, horizon=quick_horizon if args.quick else RECURRENT_HORIZON)
        print(format_recurrent(result))
        if args.json:
            write_json({"machine": machine, "recurrent": result}, args.json)
            print(f"wrote {args.json.resolve()}")
        return 0
    cores = {"compiled": load_core("compiled")[1], "python": load_core("python")[1]}
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
