"""The package's shape: a small root, floors that import only downward, and no import circles.

Every import of the package counts, at module level, inside a function or under
``if TYPE_CHECKING:`` (a type named from a floor above ties the floors together as much as a call
does), in the Python modules and in the Cython sources (their Python-level ``import`` and
``from ... import`` lines). The floors, bottom up, are the ones drawn in
``docs/architecture.md``; a module may import its own floor and the floors below it, never a
floor above.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import parallel_rollouts

PACKAGE_DIR = Path(parallel_rollouts.__file__).resolve().parent
PACKAGE = "parallel_rollouts"

#: Bottom up. A name is a top-level module or folder of the package.
FLOORS = [
    {"errors"},
    {"data"},
    {"checks"},
    {"core"},
    {"config"},
    {"groups"},
    {"policy"},
    {"processes"},
    {"steppers"},
    {"runners"},
    {"collector", "make", "vector_env", "sb3", "seeding"},
    {"conformance"},
    {"__init__", "__main__"},
]
FLOOR_OF = {name: level for level, names in enumerate(FLOORS) for name in names}
#: What the root may hold: the public face and nothing else (``seeding`` is the documented old path
#: of ``config.seeding``, a module that only hands that one over).
ROOT_MODULES = {"__init__", "__main__", "errors", "collector", "make", "vector_env", "seeding"}


def module_name(path: Path, package_dir: Path = PACKAGE_DIR) -> str:
    parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


#: A Python-level import line of a Cython source (``cimport`` lines import C declarations only).
PYX_IMPORT = re.compile(r"^\s*(from\s+[\w.]+\s+import\s+(?:\([^)]*\)|[^\n]+)|import\s+[\w., ]+)$", re.MULTILINE)


#: A cimport of a package module's declarations (a ``.pxd``): a dependency like an import.
PACKAGE_CIMPORT = re.compile(r"^\s*from\s+(parallel_rollouts[\w.]*)\s+cimport\s+([^\n]+)$", re.MULTILINE)


def _tree_of(path: Path) -> ast.AST:
    """The module's syntax tree; for a Cython file (``.pyx``, ``.pxd``), a tree of its import lines:
    Python-level imports, and cimports of the package's own declarations as imports of that module."""
    text = path.read_text(encoding="utf-8")
    if path.suffix not in (".pyx", ".pxd"):
        return ast.parse(text)
    lines = [match.group(1) for match in PYX_IMPORT.finditer(text) if " cimport " not in match.group(1)]
    lines += [f"import {match.group(1)}" for match in PACKAGE_CIMPORT.finditer(text)]
    return ast.parse("\n".join(lines))


def imports_of(path: Path, package_dir: Path = PACKAGE_DIR) -> set[str]:
    """The package modules ``path`` imports (absolute names), wherever the import statement is."""
    tree = _tree_of(path)
    exempt: set[int] = set()
    here = module_name(path, package_dir)
    package_parts = here.split(".") if path.name == "__init__.py" else here.split(".")[:-1]
    found = set()
    for node in ast.walk(tree):
        if id(node) in exempt:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_parts[: len(package_parts) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target != PACKAGE and not target.startswith(PACKAGE + "."):
                continue
            found.add(target)
            # `from .x import y` may import the submodule x.y.
            for alias in node.names:
                submodule = package_dir.parent / (target + "." + alias.name).replace(".", "/")
                if any(submodule.with_suffix(suffix).exists() for suffix in (".py", ".pyx")) or (
                    submodule / "__init__.py"
                ).exists():
                    found.add(target + "." + alias.name)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith(PACKAGE + "."))
    found.discard(here)
    return found


def floor_of(module: str) -> int:
    parts = module.split(".")
    return FLOOR_OF["__init__"] if len(parts) == 1 else FLOOR_OF[parts[1]]


def package_modules() -> dict[str, Path]:
    """Every module of the package, the Cython sources and declarations (``core/_kernels.pyx``,
    ``core/_core.pxd``, ...) included."""
    modules = {module_name(path): path for path in sorted(PACKAGE_DIR.rglob("*.py")) + sorted(PACKAGE_DIR.rglob("*.pyx"))}
    # A .pxd shares its module's name; it is checked as a module of its own.
    modules.update((module_name(path) + ".pxd", path) for path in sorted(PACKAGE_DIR.rglob("*.pxd")))
    return modules


def test_the_root_holds_only_the_public_face():
    root = {path.stem for path in PACKAGE_DIR.glob("*.py")}
    assert root == ROOT_MODULES, f"modules at the package root beyond the public face: {sorted(root - ROOT_MODULES)}"
    assert len(root) <= 8


def test_every_folder_of_the_package_has_a_floor():
    folders = {path.name for path in PACKAGE_DIR.iterdir() if (path / "__init__.py").exists()}
    assert folders <= set(FLOOR_OF), f"folders without a floor: {sorted(folders - set(FLOOR_OF))}"


def test_the_check_reads_the_cython_sources_and_type_only_imports(tmp_path):
    # The row code's imports are seen (it reads the conversion rule from checks/, its kernels beside
    # it), and so are the Cython files' imports and their cimports of the package's declarations.
    modules = package_modules()
    assert {"parallel_rollouts.checks.conversion", "parallel_rollouts.core._kernels"} <= imports_of(
        modules["parallel_rollouts.core.rows"]
    )
    assert "parallel_rollouts.core.arguments" in imports_of(modules["parallel_rollouts.core._kernels"])
    assert "parallel_rollouts.core._kernels" in imports_of(PACKAGE_DIR / "core" / "_core.pxd")
    # An import under TYPE_CHECKING counts.
    folder = tmp_path / PACKAGE / "data"
    folder.mkdir(parents=True)
    source = folder / "typed.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..runners.base import RolloutResult\n")
    assert "parallel_rollouts.runners.base" in imports_of(source, tmp_path / PACKAGE)


def test_no_import_runs_up_the_floors():
    upward = []
    for module, path in package_modules().items():
        for target in imports_of(path):
            if floor_of(target) > floor_of(module):
                upward.append(f"{module} imports {target}")
    assert not upward, "imports that run up the floors:\n" + "\n".join(upward)


def test_no_import_forms_a_circle():
    graph = {module: {target for target in imports_of(path)} for module, path in package_modules().items()}
    # A submodule's import of its own package's __init__ is how Python loads it, not a circle
    # of ours; every other edge counts.
    circles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if module.startswith(target + "."):
                continue
            if state.get(target) == 1:
                circles.append(" -> ".join(stack[stack.index(target):] + [target]))
            elif target in graph and target not in state:
                visit(target)
        stack.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert not circles, "import circles:\n" + "\n".join(circles)


def test_the_check_sees_an_upward_import_inside_a_function(tmp_path):
    """The floor check itself can fail: a data module importing a runner in a function is caught."""
    package_dir = tmp_path / PACKAGE
    (package_dir / "data").mkdir(parents=True)
    (package_dir / "runners").mkdir()
    for folder in ("", "data", "runners"):
        (package_dir / folder / "__init__.py").write_text("")
    (package_dir / "runners" / "base.py").write_text("")
    (package_dir / "data" / "storage.py").write_text("def f():\n    from ..runners import base\n")
    targets = imports_of(package_dir / "data" / "storage.py", package_dir)
    assert "parallel_rollouts.runners.base" in targets
    assert max(floor_of(target) for target in targets) > floor_of("parallel_rollouts.data.storage")
