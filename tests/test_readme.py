"""The README cannot rot: each of its code blocks runs (Python as a script outside the checkout,
shell commands with the installed console script), or is marked as an excerpt whose shortened
version runs elsewhere; its first collect is the block CI runs in a fresh clone; it stays a front
page."""

from __future__ import annotations

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


def test_the_backend_ratios_quoted_are_the_committed_benchmark_results():
    from tests.test_docs_blocks import committed_async_to_sync_ratios

    ratios = committed_async_to_sync_ratios()
    section = _section("## Choosing a backend")
    assert f"collected CartPole at {ratios['cartpole']:.2f}x the rate of `sync`" in section
    assert f"~0.5 ms per step at {ratios['half_ms']:.2f}x" in section


def test_every_relative_link_of_the_readme_resolves():
    from tests.test_docs_blocks import broken_links

    assert broken_links(README_PATH) == []


def test_the_readme_links_every_docs_page_a_user_reads_first():
    for page in ("install.md", "training.md", "batch-contract.md", "api.md", "benchmarks.md", "conformance.md"):
        assert f"(docs/{page}" in README, page
    assert Path(REPO_ROOT / "CHANGELOG.md").is_file() and "(CHANGELOG.md)" in README
