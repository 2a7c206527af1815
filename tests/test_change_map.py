"""The "where a change goes" table of ``docs/architecture.md`` against the code.

The table says which files a kind of change touches. What can be read from the code is checked
here, so the table cannot drift: every path it names exists, the row of files naming Gymnasium's
autoreset modes is exactly those files, a transport's mechanism is imported by the transports'
module alone, and the vector env's front door never reaches into the worker processes' layer.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import parallel_rollouts

PACKAGE_DIR = Path(parallel_rollouts.__file__).resolve().parent
ARCHITECTURE = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"
AUTORESET_NAMES = re.compile(r"\b(AutoresetMode|NEXT_STEP|SAME_STEP)\b")


def change_table() -> dict[str, list[str]]:
    """Each row of the table: its change, and the package paths its files column names."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text[text.index("\n## Where a change goes\n"):]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("change", "---") or set(cells[0]) <= {"-"}:
            continue
        rows[cells[0]] = re.findall(r"`([\w/]+\.(?:py|pyx|pxd))`", cells[1])
    return rows


def source_files() -> list[Path]:
    return sorted(path for pattern in ("*.py", "*.pyx", "*.pxd") for path in PACKAGE_DIR.rglob(pattern))


def relative(path: Path) -> str:
    return path.relative_to(PACKAGE_DIR).as_posix()


def test_every_path_the_table_names_exists():
    rows = change_table()
    assert len(rows) >= 8, f"the table lost rows: {sorted(rows)}"
    missing = {change: [p for p in paths if not (PACKAGE_DIR / p).is_file()] for change, paths in rows.items()}
    missing = {change: paths for change, paths in missing.items() if paths}
    assert not missing, f"paths in docs/architecture.md's table that are not in the package: {missing}"


def test_the_autoreset_row_names_exactly_the_files_that_name_the_modes():
    row = next(paths for change, paths in change_table().items() if "autoreset modes" in change)
    naming = {relative(path) for path in source_files() if AUTORESET_NAMES.search(path.read_text(encoding="utf-8"))}
    assert set(row) == naming, (
        f"files naming the autoreset modes: {sorted(naming)}; the table says {sorted(row)} "
        f"(not listed: {sorted(naming - set(row))}; listed but naming none: {sorted(set(row) - naming)})"
    )
    kernels = {"core/kernels.py", "core/_kernels.pyx", "core/_kernels.pxd"}
    assert not naming & kernels, f"a kernel names an autoreset mode: {sorted(naming & kernels)}"


def imported_modules(path: Path) -> set[str]:
    """The package modules a Python file imports, as dotted paths below the package."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = relative(path.parent).split("/") if path.parent != PACKAGE_DIR else []
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + (node.module.split(".") if node.module else []))
            if node.level == 0:
                module = module.removeprefix("parallel_rollouts.").removeprefix("parallel_rollouts")
            found.add(module)
            found.update(f"{module}.{alias.name}".strip(".") for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name.removeprefix("parallel_rollouts.") for alias in node.names)
    return found


def test_only_the_transports_module_imports_a_transport_mechanism():
    mechanisms = {"processes.doorbell", "processes._doorbell"}
    importers = {
        relative(path)
        for path in PACKAGE_DIR.rglob("*.py")
        if path.stem not in ("doorbell",) and imported_modules(path) & mechanisms
    }
    assert importers == {"processes/transport.py"}, f"modules importing a transport's mechanism: {sorted(importers)}"


def test_the_vector_env_front_door_imports_nothing_from_processes():
    reached = sorted(module for module in imported_modules(PACKAGE_DIR / "vector_env.py") if module.startswith("processes"))
    assert not reached, f"vector_env.py imports from processes/: {reached}"


def test_the_import_reader_sees_imports_from_processes():
    """The two checks above would pass on a reader that saw nothing: it must see known imports."""
    assert "processes.doorbell" in imported_modules(PACKAGE_DIR / "processes" / "transport.py")
    assert any(m.startswith("processes") for m in imported_modules(PACKAGE_DIR / "steppers" / "processes.py"))
