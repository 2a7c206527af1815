"""The README cannot rot: each of its code blocks runs (Python as a script outside the checkout,
shell commands with the installed console script), or is marked as an excerpt whose shortened
version runs elsewhere; its first collect is the block CI runs in a fresh clone; it stays a front
page."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.doc_blocks import REPO_ROOT, code_blocks, run_block, short_versions_named

README_PATH = REPO_ROOT / "README.md"
README = README_PATH.read_text(encoding="utf-8")
BLOCKS = code_blocks(README_PATH)
RUN = [block for block in BLOCKS if block.excerpt is None]


def _section(heading: str) -> str:
    start = README.index(f"\n{heading}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else len(README)]


def test_the_readme_is_a_front_page():
    assert 150 <= len(README.splitlines()) <= 200


def test_the_readme_has_a_python_block_per_front_door():
    code = "\n".join(block.code for block in RUN if block.language == "python")
    for front_door in ("make_collector(", "ParallelRolloutCollector(", "ParallelVectorEnv(", "ParallelVecEnv("):
        assert front_door in code, f"no README block runs {front_door}"


@pytest.mark.parametrize("block", RUN, ids=[block.id for block in RUN])
def test_readme_code_block_runs_as_written_outside_the_checkout(block, tmp_path):
    run_block(block, block.code, tmp_path)


def test_the_first_collect_is_the_first_block_of_its_section_and_runs_the_compiled_core(tmp_path):
    # .ci/run takes the first python block under this heading and runs it in a fresh clone.
    section = _section("## A first collect")
    first = next(block for block in RUN if block.language == "python" and block.code in section)
    assert section.index("```python") < section.index(first.code)
    assert "make_collector(" in first.code
    completed = run_block(first, first.code, tmp_path)
    assert completed.stdout.strip().splitlines()[-1] == "core: compiled"


def test_the_install_sequence_clones_and_installs_with_pip_install_dot():
    install = [block for block in BLOCKS if block.code in _section("## Install") and block.language == "bash"]
    assert len(install) == 1 and install[0].excerpt is not None and ".ci/run" in install[0].excerpt
    lines = [line.split("#")[0].strip() for line in install[0].code.splitlines()]
    assert lines[0].startswith("git clone REPOSITORY_URL ")
    assert "python -m pip install ." in lines


def test_the_readme_quotes_two_test_commands_that_ci_runs():
    tests = [block for block in BLOCKS if block.code in _section("## Running the tests") and block.language == "bash"]
    assert len(tests) == 1
    commands = [line.split("#")[0].strip() for line in tests[0].code.splitlines()]
    assert "python -m pytest tests/test_install.py" in commands and "python -m pytest" in commands
    ci = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert '"## Running the tests"' in ci, ".ci/run no longer runs the README's test commands"


@pytest.mark.parametrize("block", [block for block in BLOCKS if block.excerpt], ids=lambda block: block.id)
def test_every_readme_excerpt_names_where_its_short_version_runs(block):
    named = short_versions_named(block.excerpt)
    assert named, f"{block.id}: the excerpt marker names no test file or .ci/run: {block.excerpt!r}"
    for path in named:
        assert (REPO_ROOT / path).is_file(), f"{block.id}: {path} does not exist"


PEERS = REPO_ROOT / "benchmarks" / "results" / "peers_2026-12-05"


def _peer_runs() -> list[dict]:
    # {run: {group: group record}} for the three committed runs of the peers groups.
    runs = []
    for run in (1, 2, 3):
        record = json.loads((PEERS / f"peers_run{run}.json").read_text(encoding="utf-8"))
        runs.append({group["group"]: group for group in record["groups"]})
    return runs


def _ratio(group: dict, contender: str, reference: str) -> dict:
    return group["ratios"][f"{contender} / {reference}"]


def test_the_peers_table_is_the_committed_run_it_names():
    # Every row of the README's table, recomputed from the run it quotes (run 3): median
    # transitions/s, and the median (min-max) of the per-round ratios to the collector's sync.
    groups = _peer_runs()[2]
    section = _section("## Measured against what you would use instead")
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| contender")]
    sync = "parallel_rollouts sync"
    expected = []
    for contender in groups["peers_cartpole_16"]["throughputs"]:
        cells = [contender]
        for name in ("peers_cartpole_16", "peers_half_ms_16"):
            group = groups[name]
            cells.append(f"{group['throughputs'][contender]['median']:,.0f}")
            if contender == sync:
                cells.append("1.00x")
            else:
                ratio = _ratio(group, contender, sync)
                cells.append(f"{ratio['median']:.2f}x ({ratio['min']:.2f}-{ratio['max']:.2f})")
        expected.append("| " + " | ".join(cells) + " |")
    assert rows == expected
    assert len(rows) >= 11  # the collector, the hand loops, Gymnasium's, SB3's and TorchRL's contenders


def test_the_peers_findings_quote_the_committed_runs():
    runs = _peer_runs()
    section = " ".join(_section("## Measured against what you would use instead").split())
    sync, hand, two = "parallel_rollouts sync", "hand loop", "hand loop, 2 processes"
    asynchronous = "parallel_rollouts async"

    def median(run: int, group: str, contender: str, reference: str) -> str:
        return f"{_ratio(runs[run - 1][group], contender, reference)['median']:.2f}"

    cheap, costly = "peers_cartpole_16", "peers_half_ms_16"
    assert {median(run, cheap, sync, hand) for run in (1, 2, 3)} == {"0.93"}
    assert f"runs at {median(3, cheap, sync, hand)}x the hand loop" in section
    assert (
        f"`async` gave {median(3, cheap, asynchronous, sync)}x and {median(2, cheap, asynchronous, sync)}x `sync` "
        f"in two runs with the second core free, but {median(1, cheap, asynchronous, sync)}x in a third"
    ) in section
    low, high = sorted([median(2, costly, asynchronous, sync), median(3, costly, asynchronous, sync)])
    assert f"{low}-{high}x `sync`" in section
    assert {median(run, costly, asynchronous, two) for run in (2, 3)} == {"0.97"}
    assert f"{median(3, costly, asynchronous, two)}x of the two-process ceiling" in section


def test_every_relative_link_of_the_readme_resolves():
    from tests.test_docs_blocks import broken_links

    assert broken_links(README_PATH) == []


def test_the_readme_links_every_docs_page_a_user_reads_first():
    for page in ("install.md", "training.md", "batch-contract.md", "api.md", "benchmarks.md", "conformance.md"):
        assert f"(docs/{page}" in README, page
    assert Path(REPO_ROOT / "CHANGELOG.md").is_file() and "(CHANGELOG.md)" in README


def test_the_examples_quick_runs_are_the_trainers_own_and_cover_every_trainer():
    # Each trainer names its quick run in `QUICK_RUN` (shown by its --help); the README quotes them all.
    (block,) = [block for block in BLOCKS if "python -m examples." in block.code]
    quoted = [line.split("#")[0].strip() for line in block.code.splitlines() if line.strip()]
    trainers = sorted((REPO_ROOT / "examples").glob("*/train.py"))
    own = []
    for trainer in trainers:
        match = re.search(r'^QUICK_RUN = "([^"]+)"$', trainer.read_text(encoding="utf-8"), re.MULTILINE)
        assert match, f"{trainer.relative_to(REPO_ROOT)} names no QUICK_RUN"
        own.append(match.group(1))
    assert sorted(quoted) == sorted(own)


def test_the_training_loop_table_is_the_committed_runs_it_names():
    # Every ratio of the README's training-loop table, recomputed from the runs its link names.
    import json
    import statistics

    runs = REPO_ROOT / "benchmarks" / "results" / "training_loop_2026-12-07"

    def speed(path: str, name: str, baseline: str, bold: bool = False) -> str:
        contenders = json.loads((runs / path).read_text())["workloads"]["cartpole"]["contenders"]
        ratios = [b / c for b, c in zip(contenders[baseline]["loop_seconds"], contenders[name]["loop_seconds"])]
        median = f"**{statistics.median(ratios):.2f}x**" if bold else f"{statistics.median(ratios):.2f}x"
        return f"{median} ({min(ratios):.2f}-{max(ratios):.2f})"

    def seconds(path: str, name: str) -> str:
        contenders = json.loads((runs / path).read_text())["workloads"]["cartpole"]["contenders"]
        return f"{statistics.median(contenders[name]['loop_seconds']):.2f} s"

    rows = [line for line in _section("## In a training loop").splitlines() if line.startswith("| ") and "---" not in line]
    quiet, busy = "after_step_change/cartpole_quiet.json", "after_step_change/cartpole_competitor.json"
    assert f"| 1.00x ({seconds(quiet, 'cleanrl')}) | 1.00x ({seconds(busy, 'cleanrl')}) |" in rows[1]
    assert f"| {speed(quiet, 'swap', 'cleanrl')} | {speed(busy, 'swap', 'cleanrl')} |" in rows[2]
    assert f"| {speed(quiet, 'recipe', 'cleanrl', True)} | {speed(busy, 'recipe', 'cleanrl', True)} |" in rows[3]
    assert f"| {speed('sb3_cartpole_quiet.json', 'sb3_parallel', 'sb3_dummy')} | |" in rows[4]
