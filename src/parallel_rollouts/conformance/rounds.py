"""Interleaved rounds: time several contenders under the same load, then compare them round by round.

A shared machine's speed drifts between minutes (by up to about 1.8x on a loaded 2-core VM),
far more than the differences worth measuring. So contenders are never timed one after
another: all of them are built first and stay alive, and each round measures every one
once, moments apart. A ratio between two contenders is taken within each round and only
then summarized over the rounds (median, min, max). The order inside a round rotates (or
alternates) so that no contender always runs right after the same neighbour.

The advisor (:func:`parallel_rollouts.advise`) and every benchmark in ``benchmarks/`` run
their trials through :func:`run_rounds`; this is the one rounds loop of the project.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["DEFAULT_ROUNDS", "ORDERS", "Rounds", "round_order", "run_rounds", "summarize_ratios", "summarize_throughputs"]

#: Rounds a benchmark runs unless told otherwise: enough for a median that one disturbed round cannot move.
DEFAULT_ROUNDS = 7
#: ``rotate``: round ``r`` starts at contender ``r mod n``; ``alternate``: forward, then backward;
#: ``fixed``: the given order every round.
ORDERS = ("rotate", "alternate", "fixed")

Contender = TypeVar("Contender")
Sample = TypeVar("Sample")


@dataclass
class Rounds(Generic[Sample]):
    """What :func:`run_rounds` measured: ``samples[i]`` holds contender ``i``'s results in round order.

    ``errors[i]`` is the exception that stopped contender ``i`` (``None`` if none did); a
    stopped contender has fewer samples than the others and is not measured again.
    """

    samples: list[list[Sample]]
    errors: list[BaseException | None] = field(default_factory=list)


def round_order(count: int, round_index: int, order: str = "rotate") -> list[int]:
    """The indices of ``count`` contenders in the order round ``round_index`` measures them."""
    if order not in ORDERS:
        raise ValueError(f"`order` must be one of {ORDERS!r}; got {order!r}.")
    indices = list(range(count))
    if order == "rotate" and count:
        shift = round_index % count
        return indices[shift:] + indices[:shift]
    if order == "alternate" and round_index % 2:
        return indices[::-1]
    return indices


def run_rounds(
    contenders: Sequence[Contender],
    measure: Callable[[Contender], Sample],
    rounds: int = DEFAULT_ROUNDS,
    *,
    order: str = "rotate",
    keep_going: bool = False,
    after_round: Callable[[int], None] | None = None,
) -> Rounds[Sample]:
    """Measure every contender once per round, ``rounds`` times, interleaved.

    ``measure(contender)`` times one unit of work and returns what it measured (a rate, a
    duration, a dict of both). An exception from it propagates unless ``keep_going``: then it
    is recorded in :attr:`Rounds.errors` and that contender sits out the remaining rounds, so
    one option that breaks does not cost the others their measurement. ``after_round(r)`` is
    called after each round (progress lines).
    """
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"`rounds` must be an int >= 1; got {rounds!r}.")
    result: Rounds[Sample] = Rounds([[] for _ in contenders], [None] * len(contenders))
    for round_index in range(rounds):
        for index in round_order(len(contenders), round_index, order):
            if result.errors[index] is not None:
                continue
            try:
                sample = measure(contenders[index])
            except Exception as error:
                if not keep_going:
                    raise
                result.errors[index] = error
                continue
            result.samples[index].append(sample)
        if after_round is not None:
            after_round(round_index)
    return result


def summarize_throughputs(rates: Sequence[float]) -> dict[str, object]:
    """Median, min, max, best-of and spread of throughputs (higher is better).

    ``best`` equals ``max``: the round least disturbed by other load. ``spread`` is
    ``max / min``, how far apart the rounds were.
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

    Taking the ratio within a round, before summarizing, cancels the machine's speed drift
    between rounds: both sides of a ratio ran moments apart.
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
