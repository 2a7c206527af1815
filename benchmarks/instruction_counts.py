"""Instructions per transition, counted by Valgrind: a measure a loaded machine cannot move.

Run: ``python -m benchmarks.instruction_counts [--workloads cartpole,image,null]
[--contenders hand-loop,hand-loop-reseeding,sync,sync/python-core] [--collects 4,16]
[--output benchmarks/results/instruction_counts.json]``

Wall time and CPU time on a shared 2-core machine drift in phases up to 3x apart, which buries
differences of a few percent between loops whose cost is mostly the env's. The number of
instructions a loop executes does not drift: Valgrind's ``callgrind`` tool counts them exactly,
whatever else runs. Each contender runs alone in a child process under ``callgrind`` twice,
with ``a`` and ``b`` timed collects after the same warm-up; the difference of the two totals,
divided by ``(b - a)`` collects of ``horizon x num_envs`` transitions, is the cost of one
transition with interpreter start-up, imports and construction cancelled out.

What it does not see: cache misses, memory bandwidth and branch mispredictions. Two loops
executing the same instructions can still differ in time, most of all when observations are
large (the frames workload moves 28 kB per transition), so this complements the interleaved
timings of ``run_rollout_benchmark --compare``; it does not replace them. Needs ``valgrind``
on the ``PATH`` (Debian: ``apt install valgrind``); about a minute per contender and workload.

``null`` is :class:`~benchmarks.step_profile.NullEnv`, an env that does nothing: there the
count is the loop's own cost, what each contender spends beyond the env and the policy.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["collected_instructions", "count_instructions", "main"]

CONTENDERS = ("hand-loop", "hand-loop-reseeding", "sync", "sync/python-core", "sync/first-seed")
WORKLOADS = ("cartpole", "image", "null")
_COLLECTED = re.compile(r"Collected : (\d+)")


def collected_instructions(valgrind_stderr: str) -> int | None:
    """The instruction total callgrind prints at exit (``Collected : N``), else ``None``."""
    match = _COLLECTED.search(valgrind_stderr)
    return int(match.group(1)) if match else None


def _make_collect(workload_name: str, contender: str, num_envs: int, horizon: int, seed: int):
    """The contender's ``collect`` callable (child side)."""
    from parallel_rollouts import ParallelRolloutCollector

    from .contenders import HandLoop
    from .step_profile import NullEnv
    from .workloads import Workload, get_workload, sign_policy

    if workload_name == "null":
        workload = Workload("null", "NullEnv", NullEnv, sign_policy, episode_length=40)
    else:
        workload = get_workload(workload_name)
    if contender in ("hand-loop", "hand-loop-reseeding"):
        return HandLoop(workload, num_envs, horizon, seed, reseed=contender == "hand-loop-reseeding").collect
    if contender in ("sync", "sync/python-core", "sync/first-seed"):
        core = "python" if contender == "sync/python-core" else "compiled"
        episode_seeds = "first" if contender == "sync/first-seed" else "every"
        collector = ParallelRolloutCollector(
            workload.env_fns(num_envs), workload.policy, backend="sync", horizon=horizon, seed=seed, core=core,
            episode_seeds=episode_seeds,
        )
        return lambda: collector.collect().num_transitions
    raise ValueError(f"unknown contender {contender!r}; choose from {CONTENDERS}.")


def _child(workload: str, contender: str, num_envs: int, horizon: int, seed: int, warmup: int, collects: int) -> None:
    tree = os.environ.get("INSTRUCTION_COUNTS_TREE")
    if tree:
        # The package from the other tree, the benchmark code from this one: import the
        # package first, then drop the tree so that ``benchmarks`` still resolves here.
        # A tree of the src/ layout holds the package in src/; older trees at their root.
        if (Path(tree) / "src" / "parallel_rollouts").is_dir():
            tree = str(Path(tree) / "src")
        sys.path.insert(0, tree)
        import parallel_rollouts

        sys.path.remove(tree)
        if not Path(parallel_rollouts.__file__).resolve().is_relative_to(Path(tree).resolve()):
            raise RuntimeError(f"parallel_rollouts came from {parallel_rollouts.__file__}, not from {tree}.")
    collect = _make_collect(workload, contender, num_envs, horizon, seed)
    for _ in range(warmup + collects):
        collect()


def count_instructions(
    workload: str,
    contender: str,
    *,
    num_envs: int = 16,
    horizon: int = 128,
    seed: int = 0,
    warmup: int = 2,
    collects: tuple[int, int] = (4, 16),
    tree: str | None = None,
) -> dict:
    """Instructions per transition of ``contender`` on ``workload``, by the two-run difference.

    ``tree``: the source tree to import the package from (default: this one), so that two
    checkouts can be compared on the same machine.
    """
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise RuntimeError("`valgrind` is not on the PATH; install it (Debian: `apt install valgrind`).")
    small, large = collects
    if not 0 <= small < large:
        raise ValueError(f"`collects` must be two counts a < b; got {collects!r}.")
    here = Path(__file__).resolve().parents[1]
    environment = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=str(here), INSTRUCTION_COUNTS_TREE=str(Path(tree).resolve()) if tree else "")
    totals = []
    with tempfile.TemporaryDirectory() as directory:
        for count in (small, large):
            command = [
                valgrind, "--tool=callgrind", f"--callgrind-out-file={directory}/out.%p",
                sys.executable, "-m", "benchmarks.instruction_counts", "--child",
                workload, contender, str(num_envs), str(horizon), str(seed), str(warmup), str(count),
            ]
            result = subprocess.run(command, capture_output=True, text=True, env=environment, cwd=here)
            total = collected_instructions(result.stderr) if result.returncode == 0 else None
            if total is None:
                raise RuntimeError(f"{contender} on {workload} failed under valgrind:\n{result.stderr[-3000:]}")
            totals.append(total)
    transitions = (large - small) * num_envs * horizon
    return {
        "workload": workload,
        "contender": contender,
        "instructions_per_transition": (totals[1] - totals[0]) / transitions,
        "totals": totals,
        "collects": [small, large],
        "transitions_counted": transitions,
    }


def _ratios(rows: list[dict]) -> list[dict]:
    """``reference / contender`` instruction ratios: above 1 means the contender executes fewer."""
    by_key = {(row["workload"], row["contender"]): row["instructions_per_transition"] for row in rows}
    ratios = []
    for (workload, contender), count in by_key.items():
        for reference in ("hand-loop", "hand-loop-reseeding"):
            if contender != reference and (workload, reference) in by_key:
                ratios.append({
                    "workload": workload, "contender": contender, "reference": reference,
                    "reference_over_contender": by_key[(workload, reference)] / count,
                })
    return ratios


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        workload, contender, num_envs, horizon, seed, warmup, collects = argv[1:8]
        _child(workload, contender, int(num_envs), int(horizon), int(seed), int(warmup), int(collects))
        return 0
    parser = argparse.ArgumentParser(prog="python -m benchmarks.instruction_counts", description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--horizon", type=int, default=128)
    parser.add_argument("--collects", default="4,16", help="the two timed-collect counts a,b whose difference is counted")
    parser.add_argument("--tree", default=None, help="source tree to import the package from (default: this one)")
    parser.add_argument("--output", default="benchmark-results/instruction_counts.json")
    args = parser.parse_args(argv)
    from .machine import machine_record

    small, large = (int(value) for value in args.collects.split(","))
    # Checked before the first count: each takes minutes under Valgrind.
    for names, known, what in ((args.workloads, WORKLOADS, "workload"), (args.contenders, CONTENDERS, "contender")):
        unknown = [name for name in names.split(",") if name not in known]
        if unknown:
            parser.error(f"unknown {what}(s) {unknown!r}; choose from {known!r}")
    rows = []
    for workload in args.workloads.split(","):
        for contender in args.contenders.split(","):
            row = count_instructions(
                workload, contender, num_envs=args.num_envs, horizon=args.horizon, collects=(small, large), tree=args.tree
            )
            rows.append(row)
            print(f"{workload:9s} {contender:22s} {row['instructions_per_transition']:10,.0f} instructions/transition", flush=True)
    ratios = _ratios(rows)
    for ratio in ratios:
        print(f"{ratio['workload']:9s} {ratio['reference']} / {ratio['contender']}: {ratio['reference_over_contender']:.3f}")
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "machine": machine_record(),
        "settings": {
            "num_envs": args.num_envs, "horizon": args.horizon, "collects": [small, large],
            "tree": str(Path(args.tree).resolve()) if args.tree else "this checkout",
        },
        "rows": rows,
        "ratios": ratios,
    }
    output.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
