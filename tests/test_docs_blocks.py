"""The pages under docs/ cannot rot: every code block runs as written or, marked as an excerpt, in a
shortened version; every relative link resolves; the numbers table shows the committed results;
the API reference and the site's navigation cover what they must."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import parallel_rollouts
from tests.doc_blocks import DOCS, REPO_ROOT, code_blocks, doc_pages, run_block, short_versions_named, shortened

BLOCKS = [block for page in doc_pages() for block in code_blocks(page)]
RUN = [block for block in BLOCKS if block.excerpt is None]
EXCERPTS = [block for block in BLOCKS if block.excerpt is not None]

#: Python excerpts that this file runs shortened: page -> (old, new) replacements, each of which
#: must occur exactly once in the page's excerpt.
SHORTENED = {
    "docs/conformance.md": [
        ('check_env("CartPole-v1")', 'check_env("CartPole-v1", max_steps=200)'),
        ("num_envs=16, policy=policy)", "num_envs=2, policy=policy, horizon=8, rounds=2, trial_seconds=0.05)"),
    ],
}
SHORTENED_HERE = [block for block in EXCERPTS if "tests/test_docs_blocks.py" in block.excerpt]


def test_the_docs_have_code_blocks_to_run():
    pages = {block.page for block in RUN if block.language == "python"}
    assert {"docs/vector-envs.md", "docs/sb3.md", "docs/training.md", "docs/benchmarks.md"} <= pages


@pytest.mark.parametrize("block", RUN, ids=[block.id for block in RUN])
def test_docs_code_block_runs_as_written_outside_the_checkout(block, tmp_path):
    run_block(block, block.code, tmp_path)


@pytest.mark.parametrize("block", EXCERPTS, ids=[block.id for block in EXCERPTS])
def test_every_excerpt_names_where_its_short_version_runs(block):
    named = short_versions_named(block.excerpt)
    assert named, f"{block.id}: the excerpt marker names no test file or .ci/run: {block.excerpt!r}"
    for path in named:
        assert (REPO_ROOT / path).is_file(), f"{block.id}: {path} does not exist"


def test_the_excerpts_shortened_here_are_the_ones_listed_here():
    assert sorted({block.page for block in SHORTENED_HERE}) == sorted(SHORTENED)
    assert all(block.language == "python" for block in SHORTENED_HERE)


@pytest.mark.parametrize("block", SHORTENED_HERE, ids=[block.id for block in SHORTENED_HERE])
def test_a_python_excerpt_runs_shortened(block, tmp_path):
    run_block(block, shortened(block, SHORTENED[block.page]), tmp_path)


def test_spawning_python_blocks_have_the_main_guard():
    spawning = re.compile(r"""backend=["'](async|ray)["']|\badvise\(|\bcheck_env\(""")
    unguarded = [
        block.id for block in BLOCKS
        if block.language == "python" and spawning.search(block.code) and 'if __name__ == "__main__":' not in block.code
        and block.excerpt is None
    ]
    assert unguarded == []


# -- links -------------------------------------------------------------------------------------

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    return {_anchor(match.group(1)) for match in re.finditer(r"^#{1,6} (.+)$", text, re.MULTILINE)}


def broken_links(path: Path) -> list[str]:
    """Relative links of a Markdown file whose file, folder or heading does not exist."""
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    broken = []
    for match in LINK.finditer(text):
        target = match.group(1) or match.group(2)
        if re.match(r"[a-z]+:", target):
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(f"{target}: no heading with anchor #{anchor}")
    return broken


@pytest.mark.parametrize("page", doc_pages(), ids=lambda page: page.name)
def test_every_relative_link_of_a_docs_page_resolves(page):
    assert broken_links(page) == []


def test_the_link_check_finds_a_missing_page_and_a_missing_heading(tmp_path):
    (tmp_path / "a.md").write_text("# Title\n\n## A section\n\n[ok](#a-section) [gone](b.md) [typo](#a-sectoin)\n")
    assert broken_links(tmp_path / "a.md") == ["b.md: no such file", "#a-sectoin: no heading with anchor #a-sectoin"]


# -- the site --------------------------------------------------------------------------------

MKDOCS = (REPO_ROOT / "mkdocs.yml").read_text(encoding="utf-8")
API = (DOCS / "api.md").read_text(encoding="utf-8")


def test_the_api_reference_renders_every_public_name():
    rendered = set(re.findall(r"^::: parallel_rollouts\.(\w+)$", API, re.MULTILINE))
    public = {name for name in parallel_rollouts.__all__ if name != "__version__"}
    assert rendered == public
    # The SB3 front door under the path users import it from, not its private module's.
    assert "::: parallel_rollouts.sb3.ParallelVecEnv" in API and ".adapter." not in API


def test_the_site_navigation_lists_every_docs_page():
    listed = set(re.findall(r":\s*([\w.-]+\.md)\s*$", MKDOCS, re.MULTILINE))
    assert listed == {page.name for page in doc_pages()}


# -- the numbers table -----------------------------------------------------------------------

TABLE_WORKLOADS = {
    "Gymnasium `CartPole-v1`": "cartpole",
    "84x84x4 uint8 image observations": "image",
    "~0.5 ms of Python per step": "half_ms",
}
TABLE_NUM_ENVS = 16


def expected_backend_rows(results: dict) -> dict[str, str]:
    """The backend table's rows, rendered from ``benchmarks/results/comparison.json``."""
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


#: The per-step benchmark's committed results (``python -m benchmarks.per_step``), at the defaults.
PER_STEP_RESULTS = REPO_ROOT / "benchmarks" / "results" / "per_step_2026-12-03.json"


def committed_async_to_sync_ratios() -> dict[str, float]:
    """Median collector ``async`` / ``sync`` ratio per workload at 16 envs, at the defaults, from
    the committed per-step results."""
    results = json.loads(PER_STEP_RESULTS.read_text(encoding="utf-8"))
    assert results["settings"]["num_envs"] == TABLE_NUM_ENVS
    return {entry["workload"]: entry["ratios"]["collector async / sync"]["median"] for entry in results["workloads"]}


def test_the_backend_table_shows_the_committed_benchmark_results():
    results = json.loads((REPO_ROOT / "benchmarks" / "results" / "comparison.json").read_text(encoding="utf-8"))
    assert results["settings"]["num_workers"] == 2 and results["settings"]["horizon"] == 128
    page = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    table = page.split("<!-- backend-table:")[1].split("<!-- end backend-table -->")[0]
    expected = expected_backend_rows(results)
    shown = {line.split("|")[1].strip(): line.strip() for line in table.splitlines() if line.startswith("| ")}
    stale = {label: row for label, row in expected.items() if shown.get(label) != row}
    assert not stale, "docs/benchmarks.md's backend table differs from benchmarks/results/comparison.json; use:\n" + "\n".join(
        expected.values()
    )
