"""What ``check_env`` returns: one result per check and the timings, printable as a table."""

from __future__ import annotations

import enum
import textwrap
from dataclasses import dataclass, field

__all__ = ["CheckResult", "CheckStatus", "ConformanceReport", "Timing"]


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
            f"step: mean {_duration(self.step_mean_s)}, p99 {_duration(self.step_p99_s)} over {self.steps} steps; "
            f"reset: mean {_duration(self.reset_mean_s)}, p99 {_duration(self.reset_p99_s)} over {self.resets} resets"
        )


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
        for result in self.results:
            head = f"  {result.name.ljust(name_width)}  {result.status.value.upper():<4}  "
            body = textwrap.wrap(result.reason, width - len(head)) or [""]
            lines.append(head + body[0])
            lines.extend(indent + line for line in body[1:])
            if result.fix:
                fix = textwrap.wrap("fix: " + result.fix, width - len(indent))
                lines.extend(indent + line for line in fix)
        if self.timing is not None:
            lines += ["", f"  timing  {self.timing.describe()}"]
        failed, warned = len(self.failures), len(self.warnings)
        verdict = "OK" if self.ok else "FAILED"
        lines += ["", f"{verdict}: {len(self.results)} checks, {failed} failed, {warned} warned"]
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
