"""One version string, written once: ``parallel_rollouts.__version__``; the build, the command line
and the changelog all show that one."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import parallel_rollouts

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_the_version_is_written_once_in_the_package_root_and_the_build_reads_it_from_there():
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in pyproject["project"]
    assert "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "parallel_rollouts.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", parallel_rollouts.__version__)
    written = [
        path.relative_to(REPO_ROOT).as_posix()
        for path in (REPO_ROOT / "src").rglob("*.py")
        if re.search(r"""__version__\s*=\s*["']""", path.read_text(encoding="utf-8"))
    ]
    assert written == ["src/parallel_rollouts/__init__.py"]


def test_python_m_parallel_rollouts_version_prints_the_package_version():
    completed = subprocess.run(
        [sys.executable, "-m", "parallel_rollouts", "--version"], capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == f"parallel-rollouts {parallel_rollouts.__version__}"


def test_the_console_script_prints_the_package_version():
    script = shutil.which("parallel-rollouts", path=str(Path(sys.executable).parent))
    assert script is not None, "the parallel-rollouts console script is not installed next to this Python"
    completed = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == f"parallel-rollouts {parallel_rollouts.__version__}"


def test_the_changelog_lists_the_current_version_as_its_latest_release():
    changelog = (REPO_ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", changelog, re.MULTILINE)
    assert headings[0] == "Unreleased"
    released = [heading for heading in headings[1:] if re.match(r"\d+\.\d+\.\d+ ", heading)]
    assert released, f"no released version among the changelog's headings: {headings}"
    assert released[0].split()[0] == parallel_rollouts.__version__
