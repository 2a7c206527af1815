"""What every benchmark shares besides the rounds: the machine record, command-line parsers, and the
comparison's text table, Markdown, JSON and throughput plot.

Throughput numbers mean little without the machine they came from, so every entry point
prints :func:`machine_record` and stores it in its JSON output.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import os
import platform
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np

import parallel_rollouts
from parallel_rollouts.conformance.rounds import summarize_ratios
from parallel_rollouts.processes.slicing import usable_cores

__all__ = [
    "CEILINGS",
    "TARGETS",
    "ceiling_rows",
    "comparison_markdown",
    "format_accounts",
    "format_group_table",
    "format_machine_record",
    "machine_record",
    "parse_counts",
    "parse_names",
    "plot_throughput",
    "sweep_rows",
    "target_rows",
    "write_json",
]

_HEADERS = (
    "contender",
    "processes",
    "median t/s",
    "best t/s",
    "spread",
    "useful median t/s",
    "CPU us/transition",
    "vs hand-loop",
    "vs hand-loop-reseeding",
    "vs bare-loop",
    "vs async",
)


def _ratio_cell(ratio: dict | None) -> str:
    if ratio is None:
        return "-"
    return f"{ratio['median']:.2f}x [{ratio['min']:.2f}, {ratio['max']:.2f}]"


def _cpu_cell(cpu: dict | None) -> str:
    if cpu is None:
        return "-"
    return f"{cpu['median'] * 1e6:.2f}"


def _rows(group: dict) -> list[tuple[str, ...]]:
    rows = []
    for name in group["order"]:
        entry = group["contenders"][name]
        rates = entry["transitions_per_s"]
        rows.append(
            (
                name,
                str(entry["processes"]),
                f"{rates['median']:,.0f}",
                f"{rates['best']:,.0f}",
                f"{rates['spread']:.2f}x",
                f"{entry['useful_transitions_per_s']['median']:,.0f}",
                _cpu_cell(entry.get("cpu_seconds_per_transition")),
                _ratio_cell(entry.get("ratios", {}).get("hand-loop")),
                _ratio_cell(entry.get("ratios", {}).get("hand-loop-reseeding")),
                _ratio_cell(entry.get("ratios", {}).get("bare-loop", entry.get("ratio_vs_reference"))),
                _ratio_cell(entry.get("ratio_vs_async")),
            )
        )
    return rows


def _group_title(group: dict) -> str:
    return (
        f"{group['env']}, {group['num_envs']} envs: {group['description']}; "
        f"{group['rounds']} rounds of {group['transitions_per_collect']:,} transitions "
        f"(horizon {group['horizon']}); env step ~{group['env_step_cpu_us']:.0f} us CPU"
    )


def _notes(group: dict) -> list[str]:
    notes = [
        "t/s = transitions per second, horizon x num_envs per collect for every contender; "
        "best = fastest round; spread = fastest / slowest round; processes = processes the "
        "contender runs in, this one included.",
        "Ratios (median [min, max]) are per-round (both contenders timed in the same round), then "
        "the median, min and max over rounds, against each reference loop that ran (and each "
        "async mode against the default async).",
        "CPU us/transition: this process's CPU time per transition, single-process contenders only "
        "(drifts less than wall time on a shared machine).",
        "Gymnasium's vector envs and EnvPool autoreset in the next step: the step after an episode "
        "ends is a reset row whose action is ignored, one of every episode_length + 1 steps "
        f"(~{group['autoreset_row_share']:.1%} at {group['episode_length']} steps); "
        "'useful' t/s leaves those rows out.",
    ]
    notes += [f"skipped {name}: {reason}" for name, reason in group.get("skipped", {}).items()]
    return notes


def format_group_table(group: dict) -> str:
    """One group as an aligned plain-text table with its title and notes."""
    rows = [_HEADERS] + _rows(group)
    widths = [max(len(row[column]) for row in rows) for column in range(len(_HEADERS))]
    lines = [_group_title(group)]
    for index, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])] + [cell.rjust(width) for cell, width in zip(row[1:], widths[1:])]
        lines.append("  ".join(cells))
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    lines.extend("  " + note for note in _notes(group))
    return "\n".join(lines)


def format_accounts(group: dict) -> str:
    """Per contender, what one collect cost each of its processes (medians over rounds), and its
    per-round ratios against the two-process peers; empty where neither was measured."""
    lines = []
    for name, entry in group["contenders"].items():
        accounts = entry.get("per_process")
        if accounts:
            cells = [
                f"{'main' if index == 0 else f'child {index}'}: {cpu:.2f} ms CPU, {faults:.0f} faults, "
                f"{read:.1f} kB in, {written:.1f} kB out"
                for index, (cpu, faults, read, written) in enumerate(
                    zip(accounts["cpu_ms"], accounts["minor_faults"], accounts["read_kb"], accounts["written_kb"])
                )
            ]
            lines.append(f"  {name}: " + "; ".join(cells))
        for reference, ratio in entry.get("ratios_vs_two_processes", {}).items():
            lines.append(f"  {name} vs {reference}: {_ratio_cell(ratio)}")
    return "\n".join(["per collect, per process (median over rounds):", *lines]) if lines else ""


def comparison_markdown(result: dict) -> str:
    """The whole comparison as Markdown: the machine, the settings, one table per group."""
    lines = ["# Rollout collection throughput", "", "## Machine", ""]
    lines += [f"- {key}: {value}" for key, value in result["machine"].items()]
    lines += ["", "## Settings", ""]
    lines += [f"- {key}: {value}" for key, value in result["settings"].items()]
    if "load_average" in result:
        load = result["load_average"]
        lines += [f"- load average (1, 5, 15 min) before: {load['before']}, after: {load['after']}"]
    lines += targets_markdown(result)
    sweep = sweep_rows(result)
    if sweep:
        lines += ["", "## Worker sweep", "", "K workers against K independent hand loops (the hand loop itself for K = 1), "
                  "per-round ratios:", "", "| workload | envs | K | contender / reference | median [min, max] |",
                  "|---|---:|---:|---|---:|"]
        lines += [
            f"| {row['env']} | {row['num_envs']} | {row['k']} | `{row['contender']}` / `{row['reference']}` | "
            f"{row['median']:.2f}x [{row['min']:.2f}, {row['max']:.2f}] |"
            for row in sweep
        ]
    for group in result["groups"]:
        lines += ["", f"## {group['env']}, {group['num_envs']} envs", "", _group_title(group), ""]
        lines.append("| " + " | ".join(_HEADERS) + " |")
        lines.append("|" + "|".join(["---"] + ["---:"] * (len(_HEADERS) - 1)) + "|")
        lines += ["| " + " | ".join(row) + " |" for row in _rows(group)]
        lines += [""] + [f"- {note}" for note in _notes(group)]
    return "\n".join(lines) + "\n"


def write_json(data: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def plot_throughput(result: dict, path: Path) -> None:
    """Median transitions/s against the number of envs, one panel per workload, one line per contender."""
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    workloads = list(dict.fromkeys(group["env"] for group in result["groups"]))
    figure, axes = plt.subplots(1, len(workloads), figsize=(4.5 * len(workloads) + 2, 4), squeeze=False)
    for axis, workload in zip(axes[0], workloads):
        groups = sorted((g for g in result["groups"] if g["env"] == workload), key=lambda g: g["num_envs"])
        for name in groups[0]["order"]:
            axis.plot(
                [group["num_envs"] for group in groups],
                [group["contenders"][name]["transitions_per_s"]["median"] for group in groups],
                marker="o",
                # Dashed: the hand-written peers; solid: the collector.
                linestyle="--" if groups[0]["contenders"][name]["kind"] == "peer" else "-",
                label=name,
            )
        axis.set_title(workload)
        axis.set_xlabel("number of envs")
        axis.set_ylabel("transitions / s (median)")
        axis.set_xscale("log", base=2)
        counts = [group["num_envs"] for group in groups]
        axis.set_xticks(counts, [str(count) for count in counts])
        axis.set_yscale("log")
        axis.grid(True, which="both", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    # One legend beside the panels, where it cannot hide a line.
    figure.legend(handles, labels, loc="center right", fontsize="small")
    figure.tight_layout(rect=(0, 0, 0.84, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)


#: The speed targets the comparison reports: (label, workload, num_envs, contender, reference, at least).
TARGETS = (
    ("sync vs the reseeding hand loop, CartPole", "cartpole", 16, "sync", "hand-loop-reseeding", 1.05),
    ("sync vs the reseeding hand loop, 84x84x4 frames", "image", 16, "sync", "hand-loop-reseeding", 1.05),
    ("sync vs the reseeding hand loop, ~0.5 ms env", "half_ms", 16, "sync", "hand-loop-reseeding", 1.0),
    ("sync vs the hand loop, CartPole", "cartpole", 16, "sync", "hand-loop", 0.95),
    ("sync vs the hand loop, 84x84x4 frames", "image", 16, "sync", "hand-loop", 1.0),
    ("sync, policy_inputs='views', vs the hand loop, 84x84x4 frames", "image", 16, "sync/views", "hand-loop", 1.0),
    ("rollout workers (2) vs the hand loop, CartPole", "cartpole", 16, "async/workers", "hand-loop", 1.55),
    ("rollout workers (2) vs the hand loop, 84x84x4 frames", "image", 16, "async/workers", "hand-loop", 1.0),
    ("rollout workers (2) vs the hand loop, ~0.5 ms env", "half_ms", 16, "async/workers", "hand-loop", 1.5),
    ("pipelined vs default async, policy costing one env step per row", "costly_policy", 16, "async/pipelined", "async", 1.40),
)


#: Ratios that say how far a target could go on this machine: (label, workload, num_envs,
#: contender, reference). Two hand loops in two processes, exchanging each half-rollout once
#: per collect, are what a competent user writes to use two cores; two bare loops that
#: exchange nothing are the stricter ceiling of any runner with two worker processes.
CEILINGS = (
    ("two independent hand loops (one exchange per collect) vs one, CartPole", "cartpole", 16, "hand-loop/2proc", "hand-loop"),
    ("rollout workers (2) vs two independent hand loops, CartPole", "cartpole", 16, "async/workers", "hand-loop/2proc"),
    ("rollout workers (2) vs two independent hand loops, ~0.5 ms env", "half_ms", 16, "async/workers", "hand-loop/2proc"),
    ("async (2) vs two independent hand loops, one straggler in 8 envs", "straggler", 16, "async", "hand-loop/2proc"),
    ("two independent bare loops vs the hand loop, CartPole", "cartpole", 16, "bare-loop/2proc", "hand-loop"),
    ("two independent bare loops vs one (the two-process ceiling), CartPole", "cartpole", 16, "bare-loop/2proc", "bare-loop"),
    ("rollout workers (2) vs that ceiling, CartPole", "cartpole", 16, "async/workers", "bare-loop/2proc"),
    ("two independent bare loops vs one, ~0.5 ms env", "half_ms", 16, "bare-loop/2proc", "bare-loop"),
    ("rollout workers (2) vs that ceiling, ~0.5 ms env", "half_ms", 16, "async/workers", "bare-loop/2proc"),
    ("two independent bare loops vs one, policy costing one env step per row", "costly_policy", 16, "bare-loop/2proc", "bare-loop"),
)


def _ratio_rows(result: dict, specs) -> list[dict]:
    groups = {(group["env"], group["num_envs"]): group for group in result["groups"]}
    rows = []
    for label, env, num_envs, contender, reference, threshold in specs:
        group = groups.get((env, num_envs))
        if group is None or contender not in group["contenders"] or reference not in group["contenders"]:
            continue
        ours = group["contenders"][contender]["transitions_per_s"]["samples"]
        theirs = group["contenders"][reference]["transitions_per_s"]["samples"]
        ratio = summarize_ratios(ours, theirs)
        row = {
            "label": label, "contender": contender, "reference": reference,
            "median": ratio["median"], "min": ratio["min"], "max": ratio["max"],
        }
        if threshold is not None:
            row.update(target=threshold, met=ratio["median"] >= threshold)
        rows.append(row)
    return rows


def ceiling_rows(result: dict) -> list[dict]:
    """The CEILINGS ratios (median, min, max over rounds) from the groups that measured them."""
    return _ratio_rows(result, [spec + (None,) for spec in CEILINGS])


def sweep_rows(result: dict) -> list[dict]:
    """The K-worker sweep: per group and K, rollout workers and per-step async with K workers
    against K independent hand loops (the hand loop itself for K = 1), ratios per round."""
    rows = []
    for group in result["groups"]:
        names = group["contenders"]
        counts = sorted({int(name.rsplit("/", 1)[1]) for name in names if name.rsplit("/", 1)[-1].isdigit()})
        for k in counts:
            reference = "hand-loop" if k == 1 else f"hand-loop/shm/{k}"
            for contender in (f"async/workers/{k}", f"async/{k}"):
                if contender in names and reference in names:
                    ratio = summarize_ratios(
                        names[contender]["transitions_per_s"]["samples"], names[reference]["transitions_per_s"]["samples"]
                    )
                    rows.append({
                        "env": group["env"], "num_envs": group["num_envs"], "k": k, "contender": contender,
                        "reference": reference, "median": ratio["median"], "min": ratio["min"], "max": ratio["max"],
                    })
    return rows


def target_rows(result: dict) -> list[dict]:
    """Each target's per-round ratio (median, min, max) from the groups that measured it."""
    return _ratio_rows(result, TARGETS)


def targets_markdown(result: dict) -> list[str]:
    rows = target_rows(result)
    if not rows:
        return []
    lines = ["", "## Targets", "", "| target | ratio (median [min, max] over rounds) | at least | met |", "|---|---:|---:|---|"]
    for row in rows:
        lines.append(
            f"| {row['label']} (`{row['contender']}` / `{row['reference']}`) | {row['median']:.2f}x "
            f"[{row['min']:.2f}, {row['max']:.2f}] | {row['target']:.2f}x | {'yes' if row['met'] else 'no'} |"
        )
    ceilings = ceiling_rows(result)
    if ceilings:
        lines += ["", "What this machine allows (no target; context for the ones above):", "",
                  "| ratio | median [min, max] over rounds |", "|---|---:|"]
        for row in ceilings:
            lines.append(
                f"| {row['label']} (`{row['contender']}` / `{row['reference']}`) | {row['median']:.2f}x "
                f"[{row['min']:.2f}, {row['max']:.2f}] |"
            )
    return lines


# -- the machine -------------------------------------------------------------------------------


def _package_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    # /proc/cpuinfo names the model on Linux; platform.processor() is often empty there.
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _affinity_cores() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not offered on macOS or Windows
        return None


def _torch_record() -> dict[str, Any]:
    """PyTorch and CUDA details, or why they are missing; never raises."""
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        return {"torch": None, "cuda_available": False}
    record: dict[str, Any] = {"torch": torch.__version__, "cuda_available": False}
    try:
        if torch.cuda.is_available():
            record.update(
                cuda_available=True,
                cuda_version=torch.version.cuda,
                cuda_device_count=torch.cuda.device_count(),
                cuda_device_name=torch.cuda.get_device_name(0),
            )
    except Exception as error:  # a broken driver should not stop a CPU benchmark
        record["cuda_error"] = f"{type(error).__name__}: {error}"
    return record


def machine_record() -> dict[str, Any]:
    """A JSON-ready description of this machine and software stack."""
    return {
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "numpy": np.__version__,
        "gymnasium": gymnasium.__version__,
        "cython": _package_version("Cython"),
        # The installed build (the version and the commit it was built from), not only the source's.
        "parallel_rollouts": _package_version("parallel-rollouts") or parallel_rollouts.__version__,
        "active_core": parallel_rollouts.active_core(),
        "cpu_model": _cpu_model(),
        "logical_cores": os.cpu_count(),
        "affinity_cores": _affinity_cores(),
        "usable_cores": usable_cores(),
        "os": platform.platform(),
        "executable": sys.executable,
        **_torch_record(),
    }


def format_machine_record(record: dict[str, Any]) -> str:
    """The record as aligned ``key: value`` lines."""
    width = max(len(key) for key in record)
    return "\n".join(f"{key:<{width}}  {value}" for key, value in record.items())


# -- command-line values ------------------------------------------------------------------------


def parse_names(text: str, known: Iterable[str], option: str) -> tuple[str, ...]:
    """``"a,b"`` -> ``("a", "b")``, each of which must be in ``known``."""
    known = tuple(known)
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in known]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"{option} takes a comma-separated list from {sorted(known)!r}; got {text!r}."
        )
    return names


def parse_counts(text: str, option: str) -> tuple[int, ...]:
    """``"4,16"`` -> ``(4, 16)``; every count must be a positive integer."""
    try:
        counts = tuple(int(value) for value in text.split(","))
    except ValueError:
        counts = ()
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"{option} takes positive integers like 4,16; got {text!r}.")
    return counts
