"""The code blocks of the README and of the pages under docs/, and how the tests run them.

A fenced block whose language is ``python`` or ``bash`` is code. Each one runs in the test suite as
written, unless the line right before its fence is an HTML comment ``<!-- excerpt: REASON -->``:
then it is shown but not run as written (it installs something, runs for minutes, or needs a
cluster), and REASON names where its shortened version runs (a test file, or ``.ci/run``).
Blocks without a language, or ``text``, are output or diagrams, not code.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCS = REPO_ROOT / "docs"
CODE_LANGUAGES = ("python", "bash")
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
EXCERPT = re.compile(r"^<!-- excerpt: (?P<reason>.+?) -->$")
#: Where a shortened version of an excerpt may run: a test file or the CI script.
SHORT_VERSION = re.compile(r"tests/[\w/]+\.py|\.ci/run")


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository root
    line: int  # of the opening fence, counted from 1
    language: str
    code: str
    excerpt: str | None  # the reason, for a block marked as an excerpt

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def code_blocks(path: Path) -> list[Block]:
    """Every ``python`` and ``bash`` block of a Markdown file, with its excerpt marker."""
    text = path.read_text(encoding="utf-8")
    page = path.relative_to(REPO_ROOT).as_posix()
    blocks = []
    for match in FENCE.finditer(text):
        if match.group(1) not in CODE_LANGUAGES:
            continue
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = EXCERPT.match(before.strip())
        blocks.append(
            Block(page, text.count("\n", 0, match.start()) + 1, match.group(1), match.group(2),
                  marker.group("reason") if marker else None)
        )
    return blocks


def doc_pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def short_versions_named(reason: str) -> list[str]:
    return SHORT_VERSION.findall(reason)


def _environment(tmp_path: Path) -> dict[str, str]:
    # Only the package is importable, as after `pip install .`: not examples/, tests/ or benchmarks/.
    site = tmp_path / "site"
    if not site.exists():
        shutil.copytree(
            REPO_ROOT / "src" / "parallel_rollouts", site / "parallel_rollouts",
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    environment = {key: value for key, value in os.environ.items() if key != "PARALLEL_ROLLOUTS_PURE_PYTHON"}
    environment["PYTHONPATH"] = str(site)
    # The console script installed next to this interpreter, as an activated virtual environment has it.
    environment["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), environment.get("PATH", "")])
    return environment


def run_block(block: Block, code: str, tmp_path: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``code`` (the block's, or its shortened version) outside the checkout; assert it succeeded."""
    environment = _environment(tmp_path)
    if block.language == "python":
        script = tmp_path / "snippet.py"
        # A fallback to the pure-Python core would mean the copied package lost its extension. (The
        # warning category lives in the package, which `-W` cannot import at start-up: set it here.)
        guard = "import warnings\nimport parallel_rollouts\nwarnings.simplefilter('error', parallel_rollouts.CoreFallbackWarning)\n"
        script.write_text(guard + code, encoding="utf-8")
        command = [sys.executable, str(script)]
    else:
        command = ["bash", "-e", "-o", "pipefail", "-c", code]
    completed = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=timeout)
    assert completed.returncode == 0, (
        f"{block.id} ({block.language}) failed with status {completed.returncode}:\n"
        f"{completed.stdout[-4000:]}\n{completed.stderr[-4000:]}"
    )
    assert completed.stdout.strip(), f"{block.id} printed nothing"
    return completed


def shortened(block: Block, replacements: list[tuple[str, str]]) -> str:
    """The block with each ``(old, new)`` applied; every ``old`` must occur exactly once, so that the
    shortened version cannot drift from what the page shows."""
    code = block.code
    for old, new in replacements:
        assert code.count(old) == 1, f"{block.id}: {old!r} occurs {code.count(old)} times in the block"
        code = code.replace(old, new)
    return code
