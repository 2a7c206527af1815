"""Summaries of repeated measurements: throughputs and per-round ratios."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

__all__ = ["summarize_ratios", "summarize_throughputs"]


def summarize_throughputs(rates: Sequence[float]) -> dict[str, object]:
    """Median, min, max, best-of and spread of throughputs (higher is better).

    ``best`` equals ``max``: the best-of-N estimate, the run least disturbed by
    other load. ``spread`` is ``max / min``, how far apart the runs were.
    """
    if not rates:
        raise ValueError("no measurements to summarize.")
    low, high = min(rates), max(rates)
    return {
        "median": statistics.median(rates),
        "min": low,
        "max": high,
        "best": high,
        "spread": high / low if low > 0 else float("inf"),
        "samples": list(rates),
    }


def summarize_ratios(numerators: Sequence[float], denominators: Sequence[float]) -> dict[str, object]:
    """Median, min and max of the per-round ratios ``numerators[r] / denominators[r]``.

    Taking the ratio within a round, before summarizing, cancels the machine's
    speed drift between rounds: both sides of a ratio ran moments apart.
    """
    if len(numerators) != len(denominators) or not numerators:
        raise ValueError(
            f"per-round ratios need two equally long, non-empty series; got {len(numerators)} "
            f"and {len(denominators)} values."
        )
    ratios = [top / bottom for top, bottom in zip(numerators, denominators)]
    return {
        "median": statistics.median(ratios),
        "min": min(ratios),
        "max": max(ratios),
        "per_round": ratios,
    }
