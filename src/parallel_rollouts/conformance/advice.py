"""What ``advise`` returns: each option's measured throughput, the recommendation and its near ties."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .policy_target import POLICY_FLAG
from .report import counted

__all__ = ["NEAR_TIE", "Advice", "Option", "OptionResult"]

#: An option faster than the recommended one in some round, and at least this fraction of its
#: speed in the median round, is a near tie: the trials cannot tell the two apart.
NEAR_TIE = 0.9


@dataclass(frozen=True)
class Option:
    """One way to collect: a backend, where the policy runs, how many workers, and the env source."""

    name: str
    backend: str
    policy_placement: str
    num_workers: int | None
    env_fns: Any = field(repr=False, compare=False)
    source: str = "env factories"
    pipelined: bool = False
    #: The Python that builds this option's collector, as the user would write it.
    code: str = field(default="", compare=False)
    #: Whether the batch holds rows that are no transition (a vector env's next-step autoreset), to
    #: be masked with ``batch.valid``.
    needs_valid_mask: bool = field(default=False, compare=False)

    def collector_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        if self.backend == "async":
            if self.num_workers is not None:  # None: the default split (see main_process_envs)
                kwargs["num_workers"] = self.num_workers
            kwargs["policy_placement"] = self.policy_placement
            if self.pipelined:
                kwargs["pipelined"] = True
        return kwargs

    @property
    def label(self) -> str:
        return self.name if self.source == "env factories" else f"{self.name}, {self.source}"

    def describe(self) -> str:
        """The arguments, and the env source when it is not the env factories themselves."""
        if self.source == "env factories":
            return self.as_arguments()
        return f"{self.as_arguments()}, the env's vector implementation as the source"

    def as_arguments(self) -> str:
        """The collector arguments that select this option."""
        parts = [f'backend="{self.backend}"']
        if self.backend == "async":
            if self.policy_placement == "workers":
                parts.append('policy_placement="workers"')
            if self.pipelined:
                parts.append("pipelined=True")
            if self.num_workers is not None:
                parts.append(f"num_workers={self.num_workers}")
        return ", ".join(parts)


@dataclass(frozen=True)
class OptionResult:
    """One option's measurements: valid transitions per second in each round, in round order."""

    option: Option
    rates: list[float]
    startup_seconds: float
    collects: int
    error: str | None = None
    #: False when the option cannot apply to what was given (rollout workers with a policy that does
    #: not pickle): it is listed with its reason and does not hold the recommendation back.
    applicable: bool = True

    @property
    def measured(self) -> bool:
        return self.error is None and bool(self.rates)

    @property
    def median(self) -> float:
        return float(np.median(self.rates))


@dataclass
class Advice:
    """The advisor's measurements and recommendation for one env, ``num_envs`` and horizon.

    ``recommended`` is the measured option that was fastest relative to the
    others round by round (:meth:`paired_score`), and ``None`` when an option
    that applies could not be measured (:attr:`unmeasured`): a comparison that
    lacks an option could pick a slower one;
    ``ratios_to_recommended(result)`` gives another option's speed relative to it
    in each round; ``near_ties`` lists the options within the noise of it: faster
    in at least one round, and at least ``NEAR_TIE`` of its speed in the median
    round. ``print(advice)`` prints the table.
    """

    target: str
    num_envs: int
    horizon: int
    usable_cores: int
    rounds: int
    trial_seconds: float
    policy: str
    env_step_seconds: float
    results: list[OptionResult]
    #: Whether no policy was given, so that every option was timed with random actions.
    random_actions: bool = False

    @property
    def measured(self) -> list[OptionResult]:
        return [result for result in self.results if result.measured]

    @property
    def unmeasured(self) -> list[OptionResult]:
        """The options that apply but could not be measured (an error, or no round finished)."""
        return [result for result in self.results if result.applicable and not result.measured]

    @property
    def complete(self) -> bool:
        """Whether every option that applies was measured, so that a recommendation can be made."""
        return bool(self.measured) and not self.unmeasured

    @property
    def recommended(self) -> OptionResult | None:
        """The option fastest relative to the others in the same rounds (see :meth:`paired_score`).

        ``None`` unless :attr:`complete`.
        """
        if not self.complete:
            return None
        return max(self.measured, key=self.paired_score)

    def paired_score(self, result: OptionResult) -> float:
        """Median over rounds of ``result``'s rate divided by the first measured option's rate in that round.

        Options are compared within a round, where they ran seconds apart under the
        same load, rather than by their medians across rounds, which load that
        comes and goes between rounds can reorder.
        """
        reference = self.measured[0]
        rounds = min(len(result.rates), len(reference.rates))
        return float(np.median(np.asarray(result.rates[:rounds]) / np.asarray(reference.rates[:rounds])))

    def ratios_to_recommended(self, result: OptionResult) -> np.ndarray:
        best = self.recommended
        if best is None:
            raise ValueError("no option is recommended: see `unmeasured`.")
        rounds = min(len(result.rates), len(best.rates))
        return np.asarray(result.rates[:rounds]) / np.asarray(best.rates[:rounds])

    @property
    def near_ties(self) -> list[OptionResult]:
        best = self.recommended
        if best is None:
            return []
        return [
            result
            for result in self.measured
            if result is not best
            and self.ratios_to_recommended(result).max(initial=0.0) >= 1.0
            and np.median(self.ratios_to_recommended(result)) >= NEAR_TIE
        ]

    def format(self) -> str:
        step = self.env_step_seconds
        step_text = f"{step * 1e6:.1f} us" if step < 1e-3 else f"{step * 1e3:.2f} ms"
        lines = [
            f"Backend advice for {self.target}: {counted(self.num_envs, 'env')}, horizon {self.horizon}, "
            f"{counted(self.usable_cores, 'usable core')}",
            f"  policy: {self.policy}",
            *self._random_actions_note(),
            f"  one env step here: {step_text} (mean)",
            f"  measured: {counted(self.rounds, 'interleaved round')}, about {self.trial_seconds:g} s per option per round; "
            "valid transitions/s",
            "",
        ]
        label_width = max(len(result.option.label) for result in self.results)
        header = f"  {'option'.ljust(label_width)}  workers     median       min-max          per round vs best"
        lines.append(header)
        best = self.recommended
        for result in self.results:
            workers = "-" if result.option.num_workers is None else str(result.option.num_workers)
            head = f"  {result.option.label.ljust(label_width)}  {workers:>7}"
            if not result.measured:
                what = "not measured" if result.applicable else "does not apply"
                lines.append(f"{head}  {what}: {result.error or 'no round finished'}")
                continue
            low, high = min(result.rates), max(result.rates)
            if result is best:
                versus = "recommended"
            elif best is None:
                versus = "-"
            else:
                ratios = self.ratios_to_recommended(result)
                versus = f"{np.median(ratios):.2f}x [{ratios.min():.2f}, {ratios.max():.2f}]"
            lines.append(f"{head}  {result.median:>9,.0f}  {low:>8,.0f}-{high:<8,.0f}  {versus}")
        lines.append("")
        if best is None:
            lines.append(self._no_recommendation())
            return "\n".join(lines)
        lines.append(f"Recommendation: {best.option.as_arguments()}  ({best.option.label})")
        if best.option.code:
            lines.append("  in code (`policy` is yours, or None for random actions):")
            lines.extend(f"    {line}".rstrip() for line in best.option.code.splitlines())
        if best.option.needs_valid_mask:
            lines.append(
                "  The batch then holds the vector env's reset steps (next-step autoreset), which are no "
                "transitions: weight the loss by `batch.valid` (e.g. `loss[batch.valid].mean()`)."
            )
        ties = self.near_ties
        if ties:
            names = "; ".join(
                f"{tie.option.label} ({tie.option.describe()}) faster in "
                f"{int((self.ratios_to_recommended(tie) >= 1.0).sum())} of {len(tie.rates)} rounds"
                for tie in ties
            )
            lines.append(f"  near tie: {names}. Either is fine; run the thorough mode to separate them.")
        else:
            runner_up = max((r for r in self.measured if r is not best), key=lambda r: r.median, default=None)
            if runner_up is not None:
                ratios = self.ratios_to_recommended(runner_up)
                wins = int((ratios >= 1.0).sum())
                lines.append(
                    f"  next best: {runner_up.option.label} ({runner_up.option.describe()}) at "
                    f"{np.median(ratios):.2f}x in the median round ({ratios.min():.2f}x-{ratios.max():.2f}x, "
                    f"faster in {wins} of {len(ratios)} rounds)."
                )
        return "\n".join(lines)

    def _random_actions_note(self) -> list[str]:
        if not self.random_actions:
            return []
        # Said where the table starts: a policy's cost per call changes which option wins.
        note = (
            "This advice is for random actions. Your policy's cost per call changes the answer (with a PyTorch "
            f"policy, an option that wins here can lose): time yours with {POLICY_FLAG}."
        )
        return textwrap.wrap(note, width=100, initial_indent="  ", subsequent_indent="  ", break_on_hyphens=False)

    def _no_recommendation(self) -> str:
        if not self.measured:
            return "No recommendation: no option could be measured; see the errors above."
        labels = ", ".join(result.option.label for result in self.unmeasured)
        return (
            f"No recommendation: {len(self.unmeasured)} of {len(self.results)} options could not be measured "
            f"({labels}), and a comparison without them could pick a slower one. Fix what stopped them (the "
            "errors above) and run again."
        )

    def __str__(self) -> str:
        return self.format()

    def to_dict(self) -> dict[str, Any]:
        """Plain data (for JSON): settings, each option's rates, the recommendation."""
        best = self.recommended
        return {
            "target": self.target,
            "num_envs": self.num_envs,
            "horizon": self.horizon,
            "usable_cores": self.usable_cores,
            "rounds": self.rounds,
            "trial_seconds": self.trial_seconds,
            "policy": self.policy,
            "random_actions": self.random_actions,
            "env_step_seconds": self.env_step_seconds,
            "options": [
                {
                    "label": result.option.label,
                    "arguments": result.option.as_arguments(),
                    "rates": list(result.rates),
                    "startup_seconds": result.startup_seconds,
                    "collects": result.collects,
                    "error": result.error,
                    "applicable": result.applicable,
                    "code": result.option.code,
                }
                for result in self.results
            ],
            "complete": self.complete,
            "recommended": None if best is None else best.option.label,
            "recommended_arguments": None if best is None else best.option.as_arguments(),
            "recommended_code": None if best is None else best.option.code,
            "recommended_needs_valid_mask": None if best is None else best.option.needs_valid_mask,
            "near_ties": [tie.option.label for tie in self.near_ties],
        }
