"""One version string, written once: ``parallel_rollouts.__version__``; the build, the command line
and the changelog all show that one, the build with the commit it was made from as a local label."""

from __future__ import annotations

import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import parallel_rollouts
from parallel_rollouts.core.build_record import RECORD_NAME, build_summary

REPO_ROOT = Path(__file__).resolve().parents[1]


def _installed_version() -> str:
    return importlib.metadata.version("parallel-rollouts")


def _is_editable() -> bool:
    direct_url = importlib.metadata.distribution("parallel-rollouts").read_text("direct_url.json") or "{}"
    return bool(json.loads(direct_url).get("dir_info", {}).get("editable"))


def _printed_version() -> str:
    # What --version prints: the build, and for an editable install that the source may have moved on;
    # then how the install made its compiled core.
    suffix = " (editable install)" if _is_editable() else ""
    return f"parallel-rollouts {_installed_version()}{suffix}\n{build_summary()}"


def test_the_version_is_written_once_in_the_package_root_and_the_build_reads_it_from_there():
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in pyproject["project"]
    assert "version" in pyproject["project"]["dynamic"]
    # A release (1.2.3) or the work towards one (1.2.3.dev0), in PEP 440's public form.
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.dev\d+)?", parallel_rollouts.__version__)
    written = [
        path.relative_to(REPO_ROOT).as_posix()
        for path in (REPO_ROOT / "src").rglob("*.py")
        if re.search(r"""__version__\s*=\s*["']""", path.read_text(encoding="utf-8"))
    ]
    assert written == ["src/parallel_rollouts/__init__.py"]


def test_the_installed_build_is_the_source_version_with_its_commit():
    # Installed from a clone git can read: the commit's short hash as the local label, `.dirty` after
    # an install from a tree with uncommitted changes under src/ or to the build files. From a tree
    # without a readable repository (a downloaded archive, no git): the source version alone.
    readable = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True).returncode == 0
    label = r"\+g[0-9a-f]{7,}(\.dirty)?" if readable else ""
    assert re.fullmatch(re.escape(parallel_rollouts.__version__) + label, _installed_version())


def _setup_py_version(project: Path) -> str:
    completed = subprocess.run(
        [sys.executable, "setup.py", "--version"], cwd=project, capture_output=True, text=True, timeout=120, check=True
    )
    return completed.stdout.strip().splitlines()[-1]


def test_the_build_labels_the_version_with_its_commit_marks_a_changed_tree_and_keeps_an_sdists_version(tmp_path):
    project = tmp_path / "project"
    (project / "src" / "parallel_rollouts").mkdir(parents=True)
    shutil.copy2(REPO_ROOT / "setup.py", project / "setup.py")
    init = project / "src" / "parallel_rollouts" / "__init__.py"
    shutil.copy2(REPO_ROOT / "src" / "parallel_rollouts" / "__init__.py", init)
    base = parallel_rollouts.__version__
    assert _setup_py_version(project) == base  # no repository, no sdist: the source version alone

    git = ["git", "-c", "user.email=ci@example.invalid", "-c", "user.name=ci"]
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    subprocess.run([*git, "add", "-A"], cwd=project, check=True)
    subprocess.run([*git, "commit", "-qm", "one"], cwd=project, check=True)
    commit = subprocess.run(
        ["git", "rev-parse", "--short=7", "HEAD"], cwd=project, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert _setup_py_version(project) == f"{base}+g{commit}"
    init.write_text(init.read_text(encoding="utf-8") + "\n# changed\n", encoding="utf-8")
    assert _setup_py_version(project) == f"{base}+g{commit}.dirty"

    unpacked = tmp_path / "unpacked"  # an unpacked sdist keeps the version it was made with
    shutil.copytree(project, unpacked, ignore=shutil.ignore_patterns(".git"))
    (unpacked / "PKG-INFO").write_text(f"Metadata-Version: 2.4\nName: parallel-rollouts\nVersion: {base}+gabc1234\n")
    assert _setup_py_version(unpacked) == f"{base}+gabc1234"


def test_python_m_parallel_rollouts_version_prints_the_installed_build():
    completed = subprocess.run(
        [sys.executable, "-m", "parallel_rollouts", "--version"], capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == _printed_version()


def test_the_console_script_prints_the_installed_build():
    script = shutil.which("parallel-rollouts", path=str(Path(sys.executable).parent))
    assert script is not None, "the parallel-rollouts console script is not installed next to this Python"
    completed = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == _printed_version()


def test_the_changelog_names_the_current_version():
    # A development version is the changelog's "Unreleased" section, named with that version, and
    # comes after the latest release listed; a release is the latest release listed.
    changelog = (REPO_ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", changelog, re.MULTILINE)
    released = [heading.split()[0] for heading in headings[1:] if re.match(r"\d+\.\d+\.\d+ ", heading)]
    assert released, f"no released version among the changelog's headings: {headings}"
    version = parallel_rollouts.__version__
    if ".dev" in version:
        assert headings[0] == f"Unreleased ({version})"
        numbers = tuple(int(part) for part in version.split(".dev")[0].split("."))
        assert numbers > tuple(int(part) for part in released[0].split("."))
    else:
        assert headings[0] == "Unreleased"
        assert released[0] == version


def _core_directory(tmp_path: Path, record: dict | None, compiled: bool = True) -> Path:
    # A package's core/ folder as an install leaves it: the compiled core and the build's record.
    tmp_path.mkdir()
    if compiled:
        (tmp_path / "_core.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    if record is not None:
        (tmp_path / RECORD_NAME).write_text(json.dumps(record), encoding="utf-8")
    return tmp_path


def test_the_version_says_whether_a_quiet_install_reused_the_compiled_core_or_compiled_it(tmp_path):
    names = ("parallel_rollouts.core._core", "parallel_rollouts.core._kernels", "parallel_rollouts.processes._doorbell")
    entries = lambda *reused: {name: {"reused": flag, "fingerprint": "f"} for name, flag in zip(names, reused)}  # noqa: E731
    assert build_summary(_core_directory(tmp_path / "a", entries(True, True, True))).startswith(
        "compiled core: reused from an earlier build (_core, _doorbell, _kernels unchanged since it"
    )
    assert build_summary(_core_directory(tmp_path / "b", entries(False, False, False))) == (
        "compiled core: compiled by its install (_core, _doorbell, _kernels)"
    )
    assert build_summary(_core_directory(tmp_path / "c", entries(False, True, True))).startswith(
        "compiled core: _core compiled by its install; _doorbell, _kernels reused from an earlier build"
    )
    assert "no record of how it was built" in build_summary(_core_directory(tmp_path / "d", None))
    assert "not installed" in build_summary(_core_directory(tmp_path / "e", entries(True, True, True), compiled=False))


def test_the_build_writes_its_record_where_the_version_reads_it():
    setup = (REPO_ROOT / "setup.py").read_text(encoding="utf-8")
    assert f'BUILD_RECORD = os.path.join("parallel_rollouts", "core", "{RECORD_NAME}")' in setup
    assert f"src/parallel_rollouts/core/{RECORD_NAME}" in (REPO_ROOT / ".gitignore").read_text(encoding="utf-8")
    assert f"src/parallel_rollouts/core/{RECORD_NAME}" in (REPO_ROOT / "MANIFEST.in").read_text(encoding="utf-8")
    # The install under test: its compiled core comes with the record of how it was made.
    if parallel_rollouts.active_core() == "compiled":
        # Compiled whole, reused whole, or (a reinstall after one extension's source changed) part each.
        summary = build_summary()
        assert summary.startswith(("compiled core: reused", "compiled core: compiled")) or re.match(
            r"compiled core: \S.* compiled by its install; \S.* reused from an earlier build", summary
        ), summary
