"""Rollout throughput: one backend on one workload, or ``--compare`` everything against the hand loops.

One backend (timed collects after untimed warm-up collects)::

    python -m benchmarks.run_rollout_benchmark --backend async --num-envs 4 --env vr_edge_cheap

The comparison: every backend and mode against the loops users write by hand (see
``contenders``), in interleaved rounds (:mod:`parallel_rollouts.conformance.rounds`): all
contenders are built first and stay alive, each round times one ``collect()`` of each in a
rotating order, and ratios are taken within a round before the median over rounds::

    python -m benchmarks.run_rollout_benchmark --compare --envs cartpole,half_ms,image \\
        --num-envs-list 4,16 --num-workers 2 --plot

The scaling run is the same comparison over many env counts, with the two-process contenders
(``hand-loop/2proc``, ``bare-loop/2proc``) as the ceiling of any two-worker runner; add the
``straggler`` workload to see what one slow env costs each backend::

    python -m benchmarks.run_rollout_benchmark --compare --envs cartpole,half_ms,straggler \\
        --num-envs-list 2,4,8,16,32,64 --num-workers 2 \\
        --contenders hand-loop,hand-loop/2proc,bare-loop/2proc,sync,async,async/workers
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from parallel_rollouts import ParallelRolloutCollector
from parallel_rollouts.processes.slicing import usable_cores
from parallel_rollouts.conformance.rounds import run_rounds, summarize_ratios, summarize_throughputs

from .contenders import (
    COLLECTOR_CONTENDERS,
    HEADLINE_CONTENDERS,
    PEER_CONTENDERS,
    REFERENCE_CONTENDER,
    REFERENCE_CONTENDERS,
    SWEEP_CONTENDER,
    Contender,
    make_contender,
    sweep_contenders,
    unavailable_reason,
)
from .envs import measure_step_cpu_seconds
from .report import (
    ceiling_rows,
    comparison_markdown,
    format_accounts,
    format_group_table,
    format_machine_record,
    machine_record,
    parse_counts,
    parse_names,
    plot_throughput,
    sweep_rows,
    target_rows,
    write_json,
)
from .workloads import WORKLOADS, Workload, get_workload

logger = logging.getLogger(__name__)

BACKENDS = ("serial", "sync", "async")
ALL_CONTENDERS = tuple(COLLECTOR_CONTENDERS) + PEER_CONTENDERS

# Relative to the working directory and untracked, so that a run never overwrites the
# results committed in benchmarks/results/; pass `--out benchmarks/results` to refresh those.
DEFAULT_RESULTS_DIR = Path("benchmark-results")

# Settings left unset on the command line take these values; --quick swaps in the second
# set, sized for a CI smoke run of seconds.
FULL_DEFAULTS = {
    "horizon": 128, "repeats": 5, "rounds": 7, "warmup_seconds": 1.0, "envs": "cartpole,half_ms,image",
    "num_envs_list": "4,16",
}
QUICK_DEFAULTS = {
    "horizon": 8, "repeats": 2, "rounds": 2, "warmup_seconds": 0.0, "envs": "cartpole", "num_envs_list": "2",
}


# Steps timed (in this process, outside the rounds) to report each workload's own step cost.
STEP_COST_SAMPLE_STEPS = 100


@dataclass(frozen=True)
class ComparisonSettings:
    """What one comparison runs.

    ``workloads`` x ``num_envs_list`` gives the groups; within a group every
    contender in ``contenders`` runs ``rounds`` timed collects of ``horizon``
    steps after its warm-up: at least ``warmup_collects`` untimed collects and at least
    ``warmup_seconds`` of collecting, so that what is timed is the steady state of a training
    loop, not the first collects' one-time costs. ``num_workers`` applies to the async
    backend (``None``: its default). Each collector contender runs with the settings its
    name says (the defaults unless it says ``/reuse`` etc.); an optional contender that
    cannot run here is skipped and the reason recorded.
    """

    workloads: tuple[str, ...]
    num_envs_list: tuple[int, ...]
    horizon: int
    rounds: int
    seed: int
    contenders: tuple[str, ...]
    num_workers: int | None = None
    warmup_collects: int = 2
    warmup_seconds: float = 1.0


def run_comparison(settings: ComparisonSettings, progress: Callable[[str], None] = print) -> dict:
    """Run every group of ``settings``; return the JSON-ready result (``settings`` and ``groups``)."""
    if settings.rounds < 1:
        raise ValueError(f"`rounds` must be >= 1; got {settings.rounds!r}.")
    groups = []
    for workload_name in settings.workloads:
        workload = get_workload(workload_name)
        step_cpu_seconds = measure_step_cpu_seconds(workload.env_factory(), STEP_COST_SAMPLE_STEPS)
        for num_envs in settings.num_envs_list:
            progress(f"[{workload.name}, {num_envs} envs] starting {len(settings.contenders)} contenders")
            group = _run_group(workload, num_envs, settings, progress)
            group["env_step_cpu_us"] = step_cpu_seconds * 1e6
            groups.append(group)
    return {"settings": asdict(settings), "groups": groups}


def _run_group(
    workload: Workload, num_envs: int, settings: ComparisonSettings, progress: Callable[[str], None]
) -> dict:
    contenders: list[Contender] = []
    skipped: dict[str, str] = {}
    tree: dict[str, list[int]] = {}
    try:
        for name in settings.contenders:
            reason = unavailable_reason(name, workload, num_envs)
            if reason is not None:
                skipped[name] = reason
                progress(f"  skipping {name}: {reason}")
                continue
            known = _descendants(os.getpid())
            contenders.append(
                make_contender(name, workload, num_envs, settings.horizon, settings.seed, num_workers=settings.num_workers)
            )
            # This process and the ones the contender started (multiprocessing's helpers excluded:
            # they existed already, or are shared by every contender).
            tree[contenders[-1].name] = [os.getpid(), *sorted(_descendants(os.getpid()) - known - _helpers())]
        for contender in contenders:
            _warm_up(contender, settings)
        measured = run_rounds(
            contenders, lambda contender: _timed_collect(contender, tree[contender.name]), settings.rounds,
            order="rotate", after_round=lambda index: progress(f"  round {index + 1}/{settings.rounds} done"),
        )
    finally:
        _close_all(contenders)
    processes = {contender.name: contender.processes for contender in contenders}
    seconds = {c.name: [s[0] for s in samples] for c, samples in zip(contenders, measured.samples)}
    cpu_seconds = {c.name: [s[1] for s in samples] for c, samples in zip(contenders, measured.samples)}
    useful = {c.name: [s[2] for s in samples] for c, samples in zip(contenders, measured.samples)}
    group = _summarize_group(workload, num_envs, settings, seconds, cpu_seconds, useful, processes, skipped)
    for contender, samples in zip(contenders, measured.samples):
        accounts = [sample[3] for sample in samples]
        if accounts and all(accounts):
            group["contenders"][contender.name]["per_process"] = _summarize_accounts(accounts)
    return group


#: Two-process peers every contender is also compared with, round by round.
TWO_PROCESS_REFERENCES = ("hand-loop/2proc", "bare-loop/2proc")

#: What one collect costs each process of a contender, from Linux's /proc: CPU time (the
#: scheduler's nanosecond count), minor page faults (first touches of memory), and bytes read
#: and written by system calls (pipes and sockets included: what the processes exchanged).
ACCOUNT_FIELDS = ("cpu_ms", "minor_faults", "read_kb", "written_kb")


def _descendants(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (Linux; empty elsewhere)."""
    found, pending = set(), [pid]
    while pending:
        parent = pending.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children") as file:
                    children = [int(child) for child in file.read().split()]
            except OSError:
                continue
            for child in children:
                if child not in found:
                    found.add(child)
                    pending.append(child)
    return found


def _helpers() -> set[int]:
    """multiprocessing's resource tracker and forkserver, if running: no contender's own."""
    helpers = set()
    for pid in _descendants(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as file:
                command = file.read()
        except OSError:
            continue
        if b"resource_tracker" in command or b"forkserver" in command:
            helpers.add(pid)
    return helpers


def _counters(pids: list[int]) -> list[tuple[float, ...]] | None:
    """``ACCOUNT_FIELDS`` of each of ``pids`` so far; ``None`` where /proc does not tell."""
    counters = []
    try:
        for pid in pids:
            with open(f"/proc/{pid}/schedstat") as file:
                cpu_ns = int(file.read().split()[0])
            with open(f"/proc/{pid}/stat") as file:
                minor_faults = int(file.read().rsplit(")", 1)[1].split()[7])
            with open(f"/proc/{pid}/io") as file:
                io = dict(line.split(": ") for line in file.read().splitlines())
            counters.append((cpu_ns / 1e6, minor_faults, int(io["rchar"]) / 1e3, int(io["wchar"]) / 1e3))
    except (OSError, ValueError, KeyError, IndexError):
        return None
    return counters


def _summarize_accounts(accounts: list[list[tuple[float, ...]]]) -> dict:
    """Per process (this one first), the median over rounds of each ``ACCOUNT_FIELDS`` entry."""
    processes = len(accounts[0])
    return {
        field: [statistics.median(account[process][index] for account in accounts) for process in range(processes)]
        for index, field in enumerate(ACCOUNT_FIELDS)
    }


def _timed_collect(contender: Contender, pids: list[int]) -> tuple[float, float, int, list | None]:
    """One collect: its wall seconds, this process's CPU seconds, its useful transitions, and
    what it cost each of ``pids`` (``ACCOUNT_FIELDS``; ``None`` without /proc).

    This process's CPU time is the whole cost of a single-process contender, and less
    sensitive than wall time to other load on a shared machine. The counters are read
    outside the timed span.
    """
    before = _counters(pids)
    cpu_start = time.process_time()
    start = time.perf_counter()
    useful_transitions = contender.collect()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    after = _counters(pids)
    account = None
    if before is not None and after is not None:
        account = [tuple(end - begin for begin, end in zip(first, last)) for first, last in zip(before, after)]
    return elapsed, cpu, useful_transitions, account


def _warm_up(contender: Contender, settings: ComparisonSettings) -> None:
    """Collect until the one-time costs are paid: imports, allocation, first touch of memory.

    Memory that a rollout writes sparsely (final observations) is touched for the first time
    over many collects, not one: with 84x84x4 frames, 16 envs and 100-step episodes, the rows
    where episodes end cycle through the horizon over about 30 collects, each first write
    faulting pages in. A time floor covers that for cheap envs without making a costly env's
    warm-up long (two of its collects already exceed it).
    """
    start, collects = time.perf_counter(), 0
    while collects < settings.warmup_collects or time.perf_counter() - start < settings.warmup_seconds:
        contender.collect()
        collects += 1


def _close_all(contenders: list[Contender]) -> None:
    # Every contender gets closed even if one of them fails to: each holds processes or envs.
    for contender in reversed(contenders):
        try:
            contender.close()
        except Exception:
            logger.warning("closing contender %s failed", contender.name, exc_info=True)


def _summarize_group(
    workload: Workload,
    num_envs: int,
    settings: ComparisonSettings,
    seconds: dict[str, list[float]],
    cpu_seconds: dict[str, list[float]],
    useful: dict[str, list[int]],
    processes: dict[str, int],
    skipped: dict[str, str],
) -> dict:
    transitions = settings.horizon * num_envs
    rates = {name: [transitions / elapsed for elapsed in values] for name, values in seconds.items()}
    results = {}
    for name, elapsed in seconds.items():
        entry = {
            "kind": "collector" if name in COLLECTOR_CONTENDERS else "peer",
            "processes": processes[name],
            "seconds_per_collect": elapsed,
            "transitions_per_s": summarize_throughputs(rates[name]),
            "useful_transitions_per_s": summarize_throughputs(
                [count / duration for count, duration in zip(useful[name], elapsed)]
            ),
            "useful_fraction": sum(useful[name]) / (transitions * len(elapsed)),
        }
        if REFERENCE_CONTENDER in rates:
            entry["ratio_vs_reference"] = summarize_ratios(rates[name], rates[REFERENCE_CONTENDER])
        entry["ratios"] = {
            reference: summarize_ratios(rates[name], rates[reference])
            for reference in REFERENCE_CONTENDERS
            if reference in rates
        }
        entry["ratios_vs_two_processes"] = {
            reference: summarize_ratios(rates[name], rates[reference])
            for reference in TWO_PROCESS_REFERENCES
            if reference in rates and reference != name
        }
        if processes[name] == 1:
            # Only a single-process contender's whole cost shows in this process's CPU time.
            per_transition = [cpu / transitions for cpu in cpu_seconds[name]]
            entry["cpu_seconds_per_transition"] = {
                "median": statistics.median(per_transition),
                "min": min(per_transition),
                "max": max(per_transition),
                "samples": per_transition,
            }
        if name.startswith("async") and "sync" in rates:
            # What the worker processes buy (or cost) against stepping in this process.
            entry["ratio_vs_sync"] = summarize_ratios(rates[name], rates["sync"])
        if name.startswith("async/") and "async" in rates:
            # What a mode buys against the async backend's default per-step mode.
            entry["ratio_vs_async"] = summarize_ratios(rates[name], rates["async"])
        results[name] = entry
    return {
        "env": workload.name,
        "description": workload.description,
        "num_envs": num_envs,
        "horizon": settings.horizon,
        "rounds": settings.rounds,
        "transitions_per_collect": transitions,
        "episode_length": workload.episode_length,
        "autoreset_row_share": 1.0 / (workload.episode_length + 1),
        "reference": REFERENCE_CONTENDER,
        "order": list(seconds),
        "contenders": results,
        "skipped": skipped,
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run_rollout_benchmark",
        description="Transitions per second of rollout collection; --compare runs every "
        "backend and core against hand-written loops, interleaved.",
    )
    parser.add_argument("--backend", choices=BACKENDS, default="sync", help="single mode: the backend (default sync)")
    parser.add_argument("--num-envs", type=int, default=4, help="single mode: number of envs (default 4)")
    parser.add_argument("--env", choices=sorted(WORKLOADS), default="vr_edge_cheap", help="single mode: the workload")
    parser.add_argument("--core", choices=("auto", "compiled", "python"), default="auto", help="single mode: per-step core")
    parser.add_argument("--repeats", type=int, help="single mode: timed collects after the warm-up (default 5)")
    parser.add_argument(
        "--warmup", type=int, default=2, help="untimed collects before timing, per contender (default 2)"
    )
    parser.add_argument(
        "--warmup-seconds",
        type=float,
        help="comparison mode: warm each contender up for at least this long as well (default 1.0; quick: 0)",
    )
    parser.add_argument("--horizon", type=int, help="steps per env per collect (default 128)")
    parser.add_argument("--num-workers", type=int, help="async backend worker count (default: the collector's)")
    parser.add_argument("--seed", type=int, default=0, help="root seed of every contender (default 0)")
    parser.add_argument(
        "--reuse-buffers",
        action="store_true",
        help="single mode: reuse_buffers=True (every collect overwrites the same arrays); the default is "
        "the collector's default, a fresh batch per collect",
    )
    parser.add_argument(
        "--policy-placement", choices=("main", "workers"), help="single mode, async: where the policy runs"
    )
    parser.add_argument("--pipelined", action="store_true", help="single mode, async: pipelined=True")
    parser.add_argument("--json", type=Path, help="write the result as JSON to this path")
    parser.add_argument("--quick", action="store_true", help="tiny sizes for a CI smoke run")
    compare = parser.add_argument_group("comparison mode")
    compare.add_argument("--compare", action="store_true", help="run the interleaved comparison")
    compare.add_argument("--envs", help="workloads, comma-separated (default cartpole,half_ms,image)")
    compare.add_argument("--num-envs-list", help="env counts, comma-separated (default 4,16)")
    compare.add_argument("--rounds", type=int, help="timed rounds per group (default 7)")
    compare.add_argument(
        "--contenders",
        default=",".join(HEADLINE_CONTENDERS),
        help=f"contenders, comma-separated, from {', '.join(ALL_CONTENDERS)} (default: {','.join(HEADLINE_CONTENDERS)})",
    )
    compare.add_argument(
        "--workers-sweep",
        action="store_true",
        help="add the K-worker sweep: for K = 1, 2, 4, ... up to the usable cores, K independent hand loops "
        "writing into shared memory (hand-loop/shm/K), rollout workers (async/workers/K) and per-step "
        "async (async/K), each with K worker processes",
    )
    compare.add_argument("--out", type=Path, default=DEFAULT_RESULTS_DIR, help="directory for comparison.{json,md,png} (default ./benchmark-results)")
    compare.add_argument("--plot", action="store_true", help="also draw throughput against number of envs")
    return parser


def _resolve_defaults(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    defaults = QUICK_DEFAULTS if args.quick else FULL_DEFAULTS
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    try:
        args.envs = parse_names(args.envs, WORKLOADS, "--envs")
        args.num_envs_list = parse_counts(args.num_envs_list, "--num-envs-list")
        names = [name.strip() for name in args.contenders.split(",") if name.strip()]
        swept = [name for name in names if SWEEP_CONTENDER.match(name)]
        rest = ",".join(name for name in names if not SWEEP_CONTENDER.match(name))
        args.contenders = (parse_names(rest, ALL_CONTENDERS, "--contenders") if rest else ()) + tuple(swept)
        if args.workers_sweep:
            extra = sweep_contenders(usable_cores(), max(args.num_envs_list))
            args.contenders += tuple(name for name in extra if name not in args.contenders)
        if not args.contenders:
            raise argparse.ArgumentTypeError("--contenders names no contender.")
    except argparse.ArgumentTypeError as error:
        parser.error(str(error))
    for option in ("horizon", "repeats", "rounds", "num_envs"):
        if getattr(args, option) < 1:
            parser.error(f"--{option.replace('_', '-')} must be >= 1; got {getattr(args, option)!r}.")
    if args.warmup < 0:
        parser.error(f"--warmup must be >= 0; got {args.warmup!r}.")
    if args.warmup_seconds < 0:
        parser.error(f"--warmup-seconds must be >= 0; got {args.warmup_seconds!r}.")
    if not args.compare and args.backend != "async":
        for option in ("num_workers", "policy_placement", "pipelined"):
            if getattr(args, option):
                parser.error(f"--{option.replace('_', '-')} applies to --backend async only; got --backend {args.backend}.")


def _timed_collect_seconds(collector: ParallelRolloutCollector) -> float:
    start = time.perf_counter()
    collector.collect()
    return time.perf_counter() - start


def run_single(args: argparse.Namespace) -> dict:
    """Time ``args.repeats`` collects of one collector after ``args.warmup`` untimed ones."""
    workload = get_workload(args.env)
    async_options = {}
    if args.backend == "async":
        async_options = {"num_workers": args.num_workers, "policy_placement": args.policy_placement, "pipelined": args.pipelined}
    collector = ParallelRolloutCollector(
        workload.env_fns(args.num_envs),
        workload.policy,
        backend=args.backend,
        horizon=args.horizon,
        seed=args.seed,
        core=args.core,
        reuse_buffers=args.reuse_buffers,
        **async_options,
    )
    with collector:
        for _ in range(args.warmup):
            collector.collect()
        (samples,) = run_rounds([collector], _timed_collect_seconds, args.repeats).samples
        durations = list(samples)
        core = collector.core
    transitions = args.horizon * args.num_envs
    return {
        "settings": {
            "env": workload.name,
            "description": workload.description,
            "backend": args.backend,
            "core": core,
            "num_envs": args.num_envs,
            "num_workers": args.num_workers,
            "horizon": args.horizon,
            "repeats": args.repeats,
            "warmup_collects": args.warmup,
            "seed": args.seed,
            "reuse_buffers": args.reuse_buffers,
            "policy_placement": args.policy_placement,
            "pipelined": args.pipelined,
        },
        "result": {
            "transitions_per_collect": transitions,
            "seconds_per_collect": durations,
            "transitions_per_s": summarize_throughputs([transitions / elapsed for elapsed in durations]),
        },
    }


def _format_single(report: dict) -> str:
    settings, rates = report["settings"], report["result"]["transitions_per_s"]
    return (
        f"{settings['env']}: backend={settings['backend']} core={settings['core']} "
        f"num_envs={settings['num_envs']} horizon={settings['horizon']} repeats={settings['repeats']}\n"
        f"transitions/s: median {rates['median']:,.0f}  min {rates['min']:,.0f}  max {rates['max']:,.0f}  "
        f"best-of {rates['best']:,.0f}  spread {rates['spread']:.2f}x"
    )


def run_compare(args: argparse.Namespace, machine: dict) -> dict:
    settings = ComparisonSettings(
        workloads=args.envs,
        num_envs_list=args.num_envs_list,
        horizon=args.horizon,
        rounds=args.rounds,
        seed=args.seed,
        contenders=args.contenders,
        num_workers=args.num_workers,
        warmup_collects=args.warmup,
        warmup_seconds=args.warmup_seconds,
    )
    load_before = os.getloadavg()
    result = {"machine": machine, **run_comparison(settings, progress=lambda line: print(line, flush=True))}
    # Other programs' load while this ran (1, 5, 15-minute averages): with more runnable processes
    # than cores, multi-process contenders get less than their share and wall-time ratios move.
    result["load_average"] = {"before": load_before, "after": os.getloadavg()}
    for group in result["groups"]:
        print("\n" + format_group_table(group), flush=True)
        print(format_accounts(group), flush=True)
    result["targets"] = target_rows(result)
    result["ceilings"] = ceiling_rows(result)
    for row in result["targets"]:
        verdict = "met" if row["met"] else "MISSED"
        print(f"target {row['label']}: {row['median']:.2f}x [{row['min']:.2f}, {row['max']:.2f}] "
              f"(at least {row['target']:.2f}x) {verdict}", flush=True)
    for row in result["ceilings"]:
        print(f"context {row['label']}: {row['median']:.2f}x [{row['min']:.2f}, {row['max']:.2f}]", flush=True)
    result["workers_sweep"] = sweep_rows(result)
    for row in result["workers_sweep"]:
        print(f"sweep {row['env']}, {row['num_envs']} envs, K={row['k']}: {row['contender']} / {row['reference']} "
              f"{row['median']:.2f}x [{row['min']:.2f}, {row['max']:.2f}]", flush=True)
    json_path = args.json or args.out / "comparison.json"
    write_json(result, json_path)
    markdown_path = args.out / "comparison.md"
    markdown_path.parent.mkdir(parents=True, exist_ok=True)
    markdown_path.write_text(comparison_markdown(result), encoding="utf-8")
    written = [json_path, markdown_path]
    if args.plot:
        plot_path = args.out / "comparison.png"
        plot_throughput(result, plot_path)
        written.append(plot_path)
    print("\nwrote " + ", ".join(str(path.resolve()) for path in written))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _resolve_defaults(args, parser)
    machine = machine_record()
    print(format_machine_record(machine) + "\n", flush=True)
    if args.compare:
        run_compare(args, machine)
        return 0
    report = {"machine": machine, **run_single(args)}
    print(_format_single(report))
    if args.json:
        write_json(report, args.json)
        print(f"wrote {args.json.resolve()}")
    return 0


if __name__ == "__main__":
    multiprocessing.freeze_support()
    sys.exit(main())
