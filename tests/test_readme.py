"""The README cannot rot: each of its Python blocks runs as a script outside the checkout, and its
backend table matches the committed benchmark results.

A block whose fence reads ```` ```python norun ```` is shown but not run; none is today.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import parallel_rollouts

REPO_ROOT = Path(__file__).resolve().parents[1]
README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
FENCE = re.compile(r"^```python([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _python_blocks(text: str = README) -> list[tuple[int, str]]:
    """``(line number, code)`` of every Python block not marked ``norun``."""
    blocks = []
    for match in FENCE.finditer(text):
        if "norun" not in match.group(1).split():
            blocks.append((text.count("\n", 0, match.start()) + 1, match.group(2)))
    return blocks


BLOCKS = _python_blocks()
#: Pages of docs/ whose examples run the same way (a Ray page would start a cluster per block).
DOC_PAGES = ("vector-envs.md", "sb3.md")
DOC_BLOCKS = [
    (page, line, code)
    for page in DOC_PAGES
    for line, code in _python_blocks((REPO_ROOT / "docs" / page).read_text(encoding="utf-8"))
]


def test_the_readme_has_python_blocks_to_run():
    assert len(BLOCKS) >= 4


@pytest.mark.parametrize("line, code", BLOCKS, ids=[f"README.md:{line}" for line, _ in BLOCKS])
def test_readme_python_block_runs_as_a_script_outside_the_checkout(line, code, tmp_path):
    _run_block_outside_the_checkout("README.md", line, code, tmp_path)


def test_the_docs_pages_have_python_blocks_to_run():
    assert {page for page, _, _ in DOC_BLOCKS} == set(DOC_PAGES)


@pytest.mark.parametrize("page, line, code", DOC_BLOCKS, ids=[f"docs/{page}:{line}" for page, line, _ in DOC_BLOCKS])
def test_docs_python_block_runs_as_a_script_outside_the_checkout(page, line, code, tmp_path):
    _run_block_outside_the_checkout(f"docs/{page}", line, code, tmp_path)


def _run_block_outside_the_checkout(where: str, line: int, code: str, tmp_path) -> None:
    # Only the package is importable, as after `pip install .`: not examples/, tests/ or benchmarks/.
    site = tmp_path / "site"
    shutil.copytree(REPO_ROOT / "src" / "parallel_rollouts", site / "parallel_rollouts", ignore=shutil.ignore_patterns("__pycache__"))
    script = tmp_path / "snippet.py"
    # A fallback to the pure-Python core would mean the copied package lost its extension. (The
    # warning category lives in the package, which `-W` cannot import at start-up: set it here.)
    guard = "import warnings\nimport parallel_rollouts\nwarnings.simplefilter('error', parallel_rollouts.CoreFallbackWarning)\n"
    script.write_text(guard + code, encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if key != "PARALLEL_ROLLOUTS_PURE_PYTHON"}
    env["PYTHONPATH"] = str(site)
    completed = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert completed.returncode == 0, f"{where} block at line {line} failed:\n{completed.stderr}"
    assert completed.stdout.strip(), f"{where} block at line {line} printed nothing"


# -- the backend table -----------------------------------------------------------------------

TABLE_WORKLOADS = {
    "Gymnasium `CartPole-v1`": "cartpole",
    "84x84x4 uint8 image observations": "image",
    "~0.5 ms of Python per step": "half_ms",
}
TABLE_NUM_ENVS = 16


def expected_backend_rows(results: dict) -> dict[str, str]:
    """The README's backend table rows, rendered from ``benchmarks/results/comparison.json``."""
    groups = {(group["env"], group["num_envs"]): group for group in results["groups"]}
    rows = {}
    for label, workload in TABLE_WORKLOADS.items():
        group = groups[(workload, TABLE_NUM_ENVS)]
        sync = group["contenders"]["sync"]
        asynchronous = group["contenders"]["async"]
        rows[label] = (
            f"| {label} | {group['env_step_cpu_us']:,.0f} µs | {sync['transitions_per_s']['median']:,.0f} | "
            f"{asynchronous['transitions_per_s']['median']:,.0f} | {asynchronous['ratio_vs_sync']['median']:.2f}x |"
        )
    return rows


def test_the_backend_table_shows_the_committed_benchmark_results():
    results = json.loads((REPO_ROOT / "benchmarks" / "results" / "comparison.json").read_text(encoding="utf-8"))
    assert results["settings"]["num_workers"] == 2 and results["settings"]["horizon"] == 128
    table = README.split("<!-- backend-table:")[1].split("<!-- end backend-table -->")[0]
    expected = expected_backend_rows(results)
    shown = {line.split("|")[1].strip(): line.strip() for line in table.splitlines() if line.startswith("| ")}
    stale = {label: row for label, row in expected.items() if shown.get(label) != row}
    assert not stale, "README.md's backend table differs from benchmarks/results/comparison.json; use:\n" + "\n".join(
        expected.values()
    )
