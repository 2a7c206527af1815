"""What ``check_env`` returns: one result per check and the timings, printable as a table."""

from __future__ import annotations

import enum
import re
import textwrap
from dataclasses import dataclass, field

__all__ = ["CheckResult", "CheckStatus", "ConformanceReport", "Timing", "counted"]


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``"1 check"``, ``"2 checks"``: the count and the noun, plural unless the count is 1."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


class CheckStatus(str, enum.Enum):
    """How a check ended. ``FAIL`` means the env breaks something the collector relies on."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class CheckResult:
    """One check: its name, how it ended, one line saying why, and how to fix it (empty on a pass)."""

    name: str
    status: CheckStatus
    reason: str
    fix: str = ""


@dataclass(frozen=True)
class Timing:
    """Wall-clock cost of the env's own calls, measured in this process (reported, never judged)."""

    step_mean_s: float
    step_p99_s: float
    steps: int
    reset_mean_s: float
    reset_p99_s: float
    resets: int

    def describe(self) -> str:
        return (
            f"step: mean {_duration(self.step_mean_s)}, p99 {_duration(self.step_p99_s)} over "
            f"{counted(self.steps, 'step')}; reset: mean {_duration(self.reset_mean_s)}, "
            f"p99 {_duration(self.reset_p99_s)} over {counted(self.resets, 'reset')}"
        )


def _wrap(text: str, width: int) -> list[str]:
    """``textwrap.wrap``, never breaking a `quoted` span or a long word (a command or a path stays whole, to copy)."""
    kept = re.sub(r"`[^`]*`", lambda span: span.group().replace(" ", "\0").replace("-", "\1"), text)
    lines = textwrap.wrap(kept, width, break_long_words=False)
    return [line.replace("\0", " ").replace("\1", "-") for line in lines]


def _duration(seconds: float) -> str:
    if seconds >= 1.0:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


@dataclass
class ConformanceReport:
    """Every check's result for one env target, and the timing of its calls.

    ``ok`` is true when no check failed (warnings allowed). ``str(report)`` is
    the table ``python -m parallel_rollouts check`` prints.
    """

    target: str
    results: list[CheckResult] = field(default_factory=list)
    timing: Timing | None = None

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def failures(self) -> list[CheckResult]:
        return [result for result in self.results if result.status is CheckStatus.FAIL]

    @property
    def warnings(self) -> list[CheckResult]:
        return [result for result in self.results if result.status is CheckStatus.WARN]

    def result(self, name: str) -> CheckResult:
        """The result of the check called ``name``; ``KeyError`` naming the checks run otherwise."""
        for result in self.results:
            if result.name == name:
                return result
        raise KeyError(f"no check named {name!r}; this report has {[r.name for r in self.results]!r}")

    def format(self, width: int = 100) -> str:
        name_width = max([len(result.name) for result in self.results] + [5])
        lines = [f"Conformance of {self.target}", ""]
        indent = " " * (name_width + 10)
        fixed_in: dict[str, str] = {}  # each fix printed, and the check it was printed under
        for result in self.results:
            head = f"  {result.name.ljust(name_width)}  {result.status.value.upper():<4}  "
            body = _wrap(result.reason, width - len(head)) or [""]
            lines.append(head + body[0])
            lines.extend(indent + line for line in body[1:])
            if result.fix:
                # A fix said once is not said again (an env that raises in every run fails several checks).
                said = fixed_in.setdefault(result.fix, result.name)
                text = result.fix if said == result.name else f"as for '{said}' above"
                fix = _wrap("fix: " + text, width - len(indent))
                lines.extend(indent + line for line in fix)
        if self.timing is not None:
            lines += ["", f"  timing  {self.timing.describe()}"]
        failed, warned = len(self.failures), len(self.warnings)
        verdict = "OK" if self.ok else "FAILED"
        lines += ["", f"{verdict}: {counted(len(self.results), 'check')}, {failed} failed, {warned} warned"]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()

    def to_dict(self) -> dict:
        """Plain data (for JSON): the target, each check, the timing."""
        return {
            "target": self.target,
            "ok": self.ok,
            "checks": [
                {"name": r.name, "status": r.status.value, "reason": r.reason, "fix": r.fix} for r in self.results
            ],
            "timing": None if self.timing is None else dict(vars(self.timing)),
        }
