"""What an installed package says about itself: its version, its type information, which core
runs and why, and an install without the compiled extension."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import parallel_rollouts
import parallel_rollouts.core.selector as core_module
from parallel_rollouts import CoreFallbackWarning, CoreUnavailableError, ParallelRolloutCollector
from tests.envs import counting

PACKAGE_DIR = Path(parallel_rollouts.__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parents[1]  # the package lives in src/

COLLECT_WITH_AUTO_AND_COMPILED = """
import warnings
import parallel_rollouts
from parallel_rollouts import CoreFallbackWarning, CoreUnavailableError, ParallelRolloutCollector
from tests.envs import counting

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for _ in range(2):
        with ParallelRolloutCollector([counting], horizon=2, seed=0) as collector:
            collector.collect()
fallbacks = [w for w in caught if issubclass(w.category, CoreFallbackWarning)]
print("CORE", parallel_rollouts.active_core(), collector.core)
print("WARNINGS", len(fallbacks))
for warning in fallbacks:
    print("WARNING", warning.message)
try:
    ParallelRolloutCollector([counting], core="compiled")
except CoreUnavailableError as error:
    print("ERROR", error)
"""


def _copy_sources_without_extension(destination: Path) -> Path:
    copy = destination / "parallel_rollouts"
    shutil.copytree(PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("_core*.so", "_core*.pyd", "__pycache__"))
    return copy


def _run(code: str, cwd: Path, pythonpath: list[Path], **environment: str) -> str:
    env = {key: value for key, value in os.environ.items() if key != "PARALLEL_ROLLOUTS_PURE_PYTHON"}
    env.update(environment, PYTHONPATH=os.pathsep.join(str(path) for path in pythonpath))
    completed = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def test_the_version_is_written_once_and_read_by_the_build():
    # Read as text: tomllib is not in Python 3.10. setup.py reads the version from the package root.
    lines = [line.strip() for line in (REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8").splitlines()]
    assert 'dynamic = ["version"]' in lines
    assert not [line for line in lines if line.startswith("version = ")]
    assert "version=build_version()" in (REPO_ROOT / "setup.py").read_text(encoding="utf-8")


def test_a_source_tree_shadowing_the_built_package_falls_back_once_and_says_why(tmp_path):
    _copy_sources_without_extension(tmp_path)
    shutil.copytree(REPO_ROOT / "tests", tmp_path / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    output = _run(COLLECT_WITH_AUTO_AND_COMPILED, tmp_path, [tmp_path, REPO_ROOT])
    assert "CORE python python" in output
    assert "WARNINGS 1" in output  # two collectors, one warning
    warning = next(line for line in output.splitlines() if line.startswith("WARNING "))
    assert "runs its pure-Python core" in warning
    assert f"the copy of the package at {(tmp_path / 'parallel_rollouts').resolve()} shadows the installed package at {PACKAGE_DIR}" in warning
    error = next(line for line in output.splitlines() if line.startswith("ERROR "))
    assert "core='compiled' was requested but cannot be used" in error
    assert "shadows the installed package" in error
    assert "circular import" not in output


def test_forcing_the_pure_python_core_is_silent(tmp_path):
    shutil.copytree(REPO_ROOT / "tests", tmp_path / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    output = _run(COLLECT_WITH_AUTO_AND_COMPILED, tmp_path, [tmp_path, REPO_ROOT], PARALLEL_ROLLOUTS_PURE_PYTHON="1")
    assert "CORE python python" in output
    assert "WARNINGS 0" in output
    assert "ERROR" not in output  # the extension is there: an explicit core="compiled" works


def test_a_missing_extension_says_how_to_build_or_install_without_it(monkeypatch, tmp_path):
    package = _copy_sources_without_extension(tmp_path)
    monkeypatch.setattr(core_module, "_EXTENSION_DIR", package / "core")
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    reason = core_module._why_missing()
    assert f"`parallel_rollouts.core._core` is not in {package / 'core'}: it was not built" in reason
    assert "PARALLEL_ROLLOUTS_NO_EXTENSION=1" in reason
    assert "python -m pip install ." in reason


def test_an_extension_built_for_another_python_is_named(monkeypatch, tmp_path):
    package = _copy_sources_without_extension(tmp_path)
    (package / "core" / "_core.cpython-39-x86_64-linux-gnu.so").write_bytes(b"")
    monkeypatch.setattr(core_module, "_EXTENSION_DIR", package / "core")
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    reason = core_module._why_missing()
    assert "found _core.cpython-39-x86_64-linux-gnu.so, built for another Python or platform" in reason


def test_the_fallback_warning_is_emitted_once_per_process(monkeypatch):
    monkeypatch.setattr(core_module, "_compiled_core", None)
    monkeypatch.setattr(core_module, "_COMPILED_IMPORT_ERROR", CoreUnavailableError("it was not built."))
    monkeypatch.setattr(core_module, "_ACTIVE_CORE", "python")
    monkeypatch.setattr(core_module, "_fallback_reported", False)
    monkeypatch.delenv("PARALLEL_ROLLOUTS_PURE_PYTHON", raising=False)
    with pytest.warns(CoreFallbackWarning, match=r"runs its pure-Python core .* it was not built\.") as record:
        ParallelRolloutCollector([counting], horizon=2, seed=0).close()
        ParallelRolloutCollector([counting], horizon=2, seed=0).close()
    assert len(record) == 1
    assert record[0].filename == __file__  # points at the caller's line, not the library's


def test_a_wheel_built_without_the_extension_runs_the_pure_python_core_and_says_so(tmp_path):
    # A copy of what the build reads, so that nothing built earlier in the checkout leaks in.
    project = tmp_path / "project"
    _copy_sources_without_extension(project / "src")
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE"):
        shutil.copy2(REPO_ROOT / name, project / name)
    wheel_dir = tmp_path / "wheels"
    env = {**os.environ, "PARALLEL_ROLLOUTS_NO_EXTENSION": "1"}
    # No build isolation: with the variable set the build needs neither Cython nor NumPy.
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(wheel_dir),
         str(project)],
        env=env, check=True, capture_output=True, text=True, timeout=300,
    )
    (wheel,) = wheel_dir.glob("*.whl")
    assert wheel.name == f"parallel_rollouts-{parallel_rollouts.__version__}-py3-none-any.whl"
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        archive.extractall(site)
    assert "parallel_rollouts/py.typed" in names
    assert "parallel_rollouts/make.py" in names
    assert not [name for name in names if name.startswith(("parallel_rollouts/core/_core.", "parallel_rollouts/core/_kernels."))]
    assert "parallel_rollouts/core/rows.py" in names  # the row code: the pure-Python core is its source
    shutil.copytree(REPO_ROOT / "tests", tmp_path / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    output = _run(COLLECT_WITH_AUTO_AND_COMPILED, tmp_path, [site, tmp_path])
    assert "CORE python python" in output
    assert "WARNINGS 1" in output
    assert "runs its pure-Python core" in output
    assert "core='compiled' was requested but cannot be used" in output


def test_the_fallback_warning_points_at_the_callers_line_through_make_collector(monkeypatch):
    monkeypatch.setattr(core_module, "_compiled_core", None)
    monkeypatch.setattr(core_module, "_COMPILED_IMPORT_ERROR", CoreUnavailableError("it was not built."))
    monkeypatch.setattr(core_module, "_ACTIVE_CORE", "python")
    monkeypatch.setattr(core_module, "_fallback_reported", False)
    monkeypatch.delenv("PARALLEL_ROLLOUTS_PURE_PYTHON", raising=False)
    with pytest.warns(CoreFallbackWarning) as record:
        parallel_rollouts.make_collector("CartPole-v1", horizon=2, seed=0).close()
    assert record[0].filename == __file__
