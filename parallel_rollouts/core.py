"""Chooses the implementation of the per-step hot path: compiled ``_core`` or its twin.

``core="auto"`` (the default) picks the compiled extension when it was built,
unless the environment variable ``PARALLEL_ROLLOUTS_PURE_PYTHON`` is set to a
non-empty value other than ``0``, which forces the pure-Python twin. An explicit
``core="compiled"`` or ``core="python"`` is always honoured; asking for the
compiled core when it cannot be imported raises :class:`CoreUnavailableError`
rather than falling back silently.
"""

from __future__ import annotations

import os
from types import ModuleType

from . import _core_python
from .errors import ConfigurationError, CoreUnavailableError

__all__ = ["CORE_CHOICES", "PURE_PYTHON_ENV_VAR", "active_core", "compiled_core_error", "load_core"]

PURE_PYTHON_ENV_VAR = "PARALLEL_ROLLOUTS_PURE_PYTHON"
CORE_CHOICES = ("auto", "compiled", "python")

try:
    from . import _core as _compiled_core

    _COMPILED_IMPORT_ERROR: ImportError | None = None
except ImportError as error:  # not built, e.g. a source checkout without `pip install -e .`
    _compiled_core = None
    _COMPILED_IMPORT_ERROR = error


def _pure_forced() -> bool:
    return os.environ.get(PURE_PYTHON_ENV_VAR, "") not in ("", "0")


def compiled_core_error() -> ImportError | None:
    """Why the compiled core cannot be imported, or ``None`` when it can."""
    return _COMPILED_IMPORT_ERROR


def _resolve(choice: str) -> str:
    if choice not in CORE_CHOICES:
        raise ConfigurationError(f"`core` must be one of {CORE_CHOICES!r}; got {choice!r}.")
    if choice == "auto":
        return "python" if _pure_forced() or _compiled_core is None else "compiled"
    return choice


def load_core(choice: str = "auto") -> tuple[str, ModuleType]:
    """Return ``(name, module)`` of the core for ``choice``; see the module docstring."""
    name = _resolve(choice)
    if choice == "auto":
        name = _ACTIVE_CORE
    if name == "python":
        return name, _core_python
    if _compiled_core is None:
        raise CoreUnavailableError(
            "core='compiled' was requested but the compiled extension `parallel_rollouts._core` "
            f"cannot be imported ({_COMPILED_IMPORT_ERROR}). Build it with `pip install .` "
            "(or `pip install -e .`), or pass core='python'."
        )
    return name, _compiled_core


_ACTIVE_CORE = _resolve("auto")


def active_core() -> str:
    """The core ``core="auto"`` uses in this process: ``"compiled"`` or ``"python"``.

    Decided once, at import time, from whether the extension was built and from
    ``PARALLEL_ROLLOUTS_PURE_PYTHON``.
    """
    return _ACTIVE_CORE
