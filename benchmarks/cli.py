"""Command-line value parsers shared by the benchmark entry points."""

from __future__ import annotations

import argparse
from collections.abc import Iterable

__all__ = ["parse_counts", "parse_names"]


def parse_names(text: str, known: Iterable[str], option: str) -> tuple[str, ...]:
    """``"a,b"`` -> ``("a", "b")``, each of which must be in ``known``."""
    known = tuple(known)
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in known]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"{option} takes a comma-separated list from {sorted(known)!r}; got {text!r}."
        )
    return names


def parse_counts(text: str, option: str) -> tuple[int, ...]:
    """``"4,16"`` -> ``(4, 16)``; every count must be a positive integer."""
    try:
        counts = tuple(int(value) for value in text.split(","))
    except ValueError:
        counts = ()
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"{option} takes positive integers like 4,16; got {text!r}.")
    return counts
