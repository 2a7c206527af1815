"""The interleaved throughput comparison: every contender, round-robin, in one process tree.

The development machine's speed drifts between phases of a run (up to about
1.8x between the fastest and slowest minutes), far more than the differences
being measured. So contenders are never measured one after another: all of
them are built first and stay alive, and each round times one ``collect()`` of
each, in a fixed order (A B C, A B C, ...). A ratio between two contenders is
taken within each round, where both ran moments apart, and only then
summarized across rounds.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from .contenders import (
    COLLECTOR_CONTENDERS,
    REFERENCE_CONTENDER,
    REFERENCE_CONTENDERS,
    Contender,
    make_contender,
    unavailable_reason,
)
from .envs import measure_step_cpu_seconds
from .summary import summarize_ratios, summarize_throughputs
from .workloads import Workload, get_workload

__all__ = ["ComparisonSettings", "run_comparison"]

logger = logging.getLogger(__name__)

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
    try:
        for name in settings.contenders:
            reason = unavailable_reason(name, workload, num_envs)
            if reason is not None:
                skipped[name] = reason
                progress(f"  skipping {name}: {reason}")
                continue
            contenders.append(
                make_contender(name, workload, num_envs, settings.horizon, settings.seed, num_workers=settings.num_workers)
            )
        for contender in contenders:
            _warm_up(contender, settings)
        seconds: dict[str, list[float]] = {contender.name: [] for contender in contenders}
        cpu_seconds: dict[str, list[float]] = {contender.name: [] for contender in contenders}
        useful: dict[str, list[int]] = {contender.name: [] for contender in contenders}
        for round_index in range(settings.rounds):
            for contender in contenders:
                # This process's CPU time: the whole cost of a single-process contender, and
                # less sensitive than wall time to other load on a shared machine.
                cpu_start = time.process_time()
                start = time.perf_counter()
                useful_transitions = contender.collect()
                seconds[contender.name].append(time.perf_counter() - start)
                cpu_seconds[contender.name].append(time.process_time() - cpu_start)
                useful[contender.name].append(useful_transitions)
            progress(f"  round {round_index + 1}/{settings.rounds} done")
    finally:
        _close_all(contenders)
    processes = {contender.name: contender.processes for contender in contenders}
    return _summarize_group(workload, num_envs, settings, seconds, cpu_seconds, useful, processes, skipped)


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
