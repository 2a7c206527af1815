"""Chooses the build of the per-step hot path: the compiled ``_core`` or the interpreted ``rows``.

Both are the one source ``rows.py``: ``_core`` is Cython's build of it with typed kernels,
``rows`` the same file run by the interpreter with NumPy kernels.

``core="auto"`` (the default) picks the compiled extension when it can be
imported, unless the environment variable ``PARALLEL_ROLLOUTS_PURE_PYTHON`` is
set to a non-empty value other than ``0``, which forces the pure-Python core.
When ``"auto"`` has to fall back because the extension cannot be imported, the
first collector that does so emits a :class:`CoreFallbackWarning` saying why
(not built, installed without it, shadowed by a source tree, built for another
Python, built from another version of ``rows.py``) and how to fix it; forcing the pure-Python core on purpose is silent.

An explicit ``core="compiled"`` or ``core="python"`` is always honoured; asking
for the compiled core when it cannot be imported raises
:class:`CoreUnavailableError` with the same reason, never a silent fallback.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import warnings
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from types import ModuleType

from ..errors import ConfigurationError, CoreUnavailableError
from . import rows

__all__ = [
    "CORE_CHOICES",
    "PURE_PYTHON_ENV_VAR",
    "CoreFallbackWarning",
    "active_core",
    "caller_stacklevel",
    "compiled_core_error",
    "load_core",
]

PURE_PYTHON_ENV_VAR = "PARALLEL_ROLLOUTS_PURE_PYTHON"
CORE_CHOICES = ("auto", "compiled", "python")
_EXTENSION = "parallel_rollouts.core._core"
#: Where the built extension lives: beside this module.
_EXTENSION_DIR = Path(__file__).resolve().parent
#: The package's root: frames in it are the library's, not the user's.
_PACKAGE_ROOT = _EXTENSION_DIR.parent


class CoreFallbackWarning(UserWarning):
    """``core="auto"`` runs the pure-Python core because the compiled one cannot be imported."""


HOW_TO_BUILD = (
    "To build it, run `python -m pip install .` (or `python -m pip install -e .`) from a checkout "
    "on a machine with a C compiler, or `python setup.py build_ext --inplace` to build it inside "
    "a source tree you run from."
)


def _compiled_files(directory: Path) -> list[Path]:
    """Built copies of ``_core`` in ``directory``, for any Python version or platform."""
    if not directory.is_dir():
        return []
    return sorted(path for path in directory.glob("_core*") if path.suffix in (".so", ".pyd"))


def _other_installed_copies() -> list[Path]:
    """``core`` directories of other copies of ``parallel_rollouts`` on ``sys.path`` that hold a built ``_core``."""
    copies = []
    for entry in sys.path:
        candidate = Path(entry or os.getcwd()) / "parallel_rollouts" / "core"
        try:
            if candidate.resolve() != _EXTENSION_DIR and _compiled_files(candidate):
                copies.append(candidate)
        except OSError:
            continue
    return copies


def _why_missing() -> str:
    """Why ``parallel_rollouts.core._core`` has no importable file next to this module."""
    here = f"The compiled extension `{_EXTENSION}` is not in {_EXTENSION_DIR}"
    shadowed = _other_installed_copies()
    if shadowed:
        return (
            f"{here}: the copy of the package at {_PACKAGE_ROOT} shadows the installed package at "
            f"{shadowed[0].parent}, which has it. Run from outside the source tree (or remove it from "
            "sys.path / PYTHONPATH), or build the extension in place with "
            "`python setup.py build_ext --inplace`."
        )
    stale = _compiled_files(_EXTENSION_DIR)
    if stale:
        names = ", ".join(path.name for path in stale)
        return (
            f"{here} for this interpreter (it looks for {', '.join(EXTENSION_SUFFIXES)}); found "
            f"{names}, built for another Python or platform. Rebuild it with this Python. {HOW_TO_BUILD}"
        )
    return (
        f"{here}: it was not built (a source checkout without a build, or an install with "
        f"PARALLEL_ROLLOUTS_NO_EXTENSION=1). {HOW_TO_BUILD}"
    )


def _import_compiled() -> tuple[ModuleType | None, CoreUnavailableError | None]:
    # Look before importing: a plain `from . import _core` of a missing module, run while
    # the package is still initialising, reports a misleading "circular import".
    spec = importlib.util.find_spec(_EXTENSION)
    # Only an extension next to this module counts: an editable install's finder would
    # otherwise serve a checkout's extension to a different copy of the Python code.
    if spec is None or spec.origin is None or Path(spec.origin).resolve().parent != _EXTENSION_DIR:
        return None, CoreUnavailableError(_why_missing())
    try:
        compiled = importlib.import_module(_EXTENSION)
    except ImportError as error:
        return None, CoreUnavailableError(
            f"The compiled extension `{_EXTENSION}` exists but cannot be imported ({error}); it was "
            f"probably built against another NumPy or Python. Rebuild it. {HOW_TO_BUILD}"
        )
    difference = interface_difference(compiled)
    if difference is not None:
        return None, CoreUnavailableError(
            f"The compiled extension `{_EXTENSION}` at {spec.origin} was built from another version of "
            f"core/rows.py than the one beside it ({difference}). Rebuild it. {HOW_TO_BUILD}"
        )
    return compiled, None


def _public_methods(owner: object) -> tuple[str, ...]:
    return tuple(sorted(name for name in dir(owner) if not name.startswith("_") and callable(getattr(owner, name))))


def interface_difference(compiled: ModuleType) -> str | None:
    """How a compiled core's names and methods differ from ``rows.py``'s, or None when they agree.

    The extension is ``rows.py`` compiled; a build left over from an earlier version of the file
    (a source checkout that was updated but not rebuilt) would otherwise run old code.
    """
    for name in rows.__all__:
        if not hasattr(compiled, name):
            return f"it has no `{name}`"
        built, source = _public_methods(getattr(compiled, name)), _public_methods(getattr(rows, name))
        if built != source:
            missing = sorted(set(source) - set(built))
            extra = sorted(set(built) - set(source))
            return f"`{name}` lacks {missing}" if missing else f"`{name}` has {extra} beyond the source"
    return None


_compiled_core, _COMPILED_IMPORT_ERROR = _import_compiled()
_fallback_reported = False


def _pure_forced() -> bool:
    return os.environ.get(PURE_PYTHON_ENV_VAR, "") not in ("", "0")


def compiled_core_error() -> CoreUnavailableError | None:
    """Why the compiled core cannot be imported, or ``None`` when it can."""
    return _COMPILED_IMPORT_ERROR


def _resolve(choice: str) -> str:
    if choice not in CORE_CHOICES:
        raise ConfigurationError(f"`core` must be one of {CORE_CHOICES!r}; got {choice!r}.")
    if choice == "auto":
        return "python" if _pure_forced() or _compiled_core is None else "compiled"
    return choice


def _report_fallback() -> None:
    """Warn, once per process, that ``core="auto"`` runs the pure-Python core and why."""
    global _fallback_reported
    if _fallback_reported or _pure_forced() or _COMPILED_IMPORT_ERROR is None:
        return
    _fallback_reported = True
    warnings.warn(
        f"parallel_rollouts runs its pure-Python core (same results, slower per step). "
        f"{_COMPILED_IMPORT_ERROR} Set {PURE_PYTHON_ENV_VAR}=1 to choose the pure-Python core "
        "on purpose and silence this warning.",
        CoreFallbackWarning,
        stacklevel=caller_stacklevel(),
    )


def caller_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside this package: the user's line."""
    frame, level = sys._getframe(1), 1
    while frame is not None and Path(frame.f_code.co_filename).resolve().is_relative_to(_PACKAGE_ROOT):
        frame, level = frame.f_back, level + 1
    return level


def load_core(choice: str = "auto") -> tuple[str, ModuleType]:
    """Return ``(name, module)`` of the core for ``choice``; see the module docstring."""
    name = _resolve(choice)
    if choice == "auto":
        name = _ACTIVE_CORE
        if name == "python":
            _report_fallback()
    if name == "python":
        return name, rows
    if _compiled_core is None:
        raise CoreUnavailableError(
            f"core='compiled' was requested but cannot be used. {_COMPILED_IMPORT_ERROR} "
            "Or pass core='python' (or 'auto') to run the pure-Python core."
        )
    return name, _compiled_core


_ACTIVE_CORE = _resolve("auto")


def active_core() -> str:
    """The core ``core="auto"`` uses in this process: ``"compiled"`` or ``"python"``.

    Decided once, at import time, from whether the extension can be imported and
    from ``PARALLEL_ROLLOUTS_PURE_PYTHON``; :func:`compiled_core_error` says why
    it cannot.
    """
    return _ACTIVE_CORE
