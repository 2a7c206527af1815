"""What the install did with the compiled extensions: compiled them, or reused an earlier build.

pip shows what a build prints only when the build fails or with ``pip install -v``, so a quiet
install cannot say on its own that it reused the compiled core from ``build/extension-cache/``.
The build writes ``build_record.json`` beside the compiled core instead (``setup.py``,
``BUILD_RECORD``), and ``parallel-rollouts --version`` reads it out with :func:`build_summary`.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["RECORD_NAME", "build_summary"]

#: The record's file name beside this module; setup.py writes it there.
RECORD_NAME = "build_record.json"
#: The extension whose presence means the compiled core is installed.
_CORE = "parallel_rollouts.core._core"
_HERE = Path(__file__).resolve().parent


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def build_summary(directory: Path = _HERE) -> str:
    """One line: whether the compiled core beside ``directory``'s record was compiled by the install
    or reused from an earlier build, or that there is no compiled core or no record of its build."""
    if not any(path.suffix in (".so", ".pyd") for path in directory.glob("_core*")):
        return "compiled core: not installed (the pure-Python core runs; see `parallel_rollouts.active_core()`)"
    try:
        record = json.loads((directory / RECORD_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "compiled core: installed; no record of how it was built (`pip install -v` shows the build's steps)"
    reused = sorted(_short(name) for name, entry in record.items() if entry.get("reused"))
    compiled = sorted(_short(name) for name, entry in record.items() if not entry.get("reused"))
    if not compiled:
        return (
            f"compiled core: reused from an earlier build ({', '.join(reused)} unchanged since it, "
            "taken from build/extension-cache/ in the source tree), not compiled again"
        )
    if not reused:
        return f"compiled core: compiled by its install ({', '.join(compiled)})"
    return (
        f"compiled core: {', '.join(compiled)} compiled by its install; {', '.join(reused)} reused from an "
        "earlier build (build/extension-cache/ in the source tree)"
    )
