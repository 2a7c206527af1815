"""Run each in-process check so that it always ends in a result: within a time limit, whatever the env raises.

Whatever the env (or its factory) raises during a check fails that check with the
error and where it was raised, ``SystemExit``, ``KeyboardInterrupt`` and other
``BaseException`` subclasses included, and the other checks still run. A check
that does not finish within the time limit fails too, naming where it was
stopped; the in-process checks after it are not run, since an env that hung once
will most likely hang again. Two things still end ``check_env``: the user's
Ctrl-C (see :mod:`.interrupts`), and an exception raised by a timer the caller
armed before (see :mod:`.watchdog`).

When the env's ``reset`` raises, the check fails saying so (the exception, where it
was raised, and the call to make by hand to see its traceback), and the checks after
it that reset the env are reported as not run: each would fail the same way.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gymnasium.error import UnregisteredEnv

from .interrupts import UserInterrupts
from .report import CheckResult, CheckStatus
from .trajectory import ResetCall, raised_in_reset
from .watchdog import Deadline, deadline

__all__ = [
    "CheckGuard", "Guarded", "explain_failure", "explain_reset_failure", "reset_failure_fix", "reset_failure_reason",
    "specific_fix",
]

#: One line per check as it starts (``INFO``); the command line shows them on stderr.
logger = logging.getLogger("parallel_rollouts.conformance")

_ENV_FIX = (
    "a factory must build the env without arguments, and the env must survive seeded resets and random "
    "actions from its action space, episode ends included"
)
_TIMEOUT_FIX = (
    "make reset, step and close return in bounded time (an env that waits on a server, a lock or a pipe should "
    "time out itself); if the env is only slow, raise the limit (--timeout, check_env(timeout=...)) or lower "
    "--max-steps"
)
_FIXES: tuple[tuple[type[BaseException], str], ...] = (
    (SystemExit, "an env must not call sys.exit() or exit(): raise an exception instead, which a collector "
                 "reports with the env's index"),
    (KeyboardInterrupt, "an env must not raise KeyboardInterrupt, which reads as the user stopping the run: "
                        "raise another exception"),
    (UnregisteredEnv, "import the package that registers the env inside the factory (e.g. `import ale_py` "
                      "before gymnasium.make('ALE/...')), or pass the id as 'package:EnvId'"),
)
_WATCHDOG_FILE = os.path.join(os.path.dirname(__file__), "watchdog.py")


@dataclass(frozen=True)
class Guarded:
    """What a guarded call gave: its value, or the result to report instead of the check's own."""

    value: Any = None
    instead: CheckResult | None = None


class CheckGuard:
    """Runs the in-process checks of one ``check_env`` call, each within ``timeout`` seconds.

    ``reset_by_hand(call)`` says how to make that reset call by hand on an env from the
    factory (a command line, or what to write), for the fix of a reset that raised.
    """

    def __init__(
        self, timeout: float, interrupts: UserInterrupts, reset_by_hand: Callable[[ResetCall], str] | None = None
    ) -> None:
        self.timeout = timeout
        self.interrupts = interrupts
        self.reset_by_hand = reset_by_hand or _reset_by_hand
        #: The check that ran out of time first, if one did: the in-process checks after it are not run.
        self.timed_out_in: str | None = None
        #: The check in which the env's reset raised first, if it did: the checks after it that reset
        #: the env are not run.
        self.reset_failed_in: str | None = None

    def run(
        self,
        name: str,
        function: Callable,
        *arguments: Any,
        cleanup: bool = False,
        culprit: str = "the env",
        resets: bool = False,
    ) -> Guarded:
        """``function(*arguments)`` as the check called ``name``; ``culprit`` is who raised, in the reason.

        A ``cleanup`` (closing an env) runs even after a check timed out, and its own
        timeout does not stop the checks after it. A check that ``resets`` the env is not
        run once the env's reset has raised.
        """
        if not cleanup and self.stopped(resets) is not None:
            return Guarded(instead=self.not_run(name, resets))
        if not cleanup:
            self.progress(name)
        error: BaseException | None = None
        value = None
        limit: Deadline | None = None
        try:
            with deadline(self.timeout) as limit:
                value = function(*arguments)
        except BaseException as raised:
            error = raised
        if self.interrupts.requested:  # the user's Ctrl-C, even one the env caught and dropped
            raise error if isinstance(error, KeyboardInterrupt) else KeyboardInterrupt()
        if limit is not None and limit.foreign_error is not None:
            raise limit.foreign_error
        if limit is not None and limit.expired:
            if not cleanup:
                self.timed_out_in = name
            where = _where_raised(error) if error is not None else "the check's own code"
            return Guarded(instead=CheckResult(
                name, CheckStatus.FAIL, f"did not finish within {self.timeout:g} s: stopped in {where}", _TIMEOUT_FIX
            ))
        if error is not None:
            reset = raised_in_reset(error)
            if reset is not None:
                if not cleanup and self.reset_failed_in is None:
                    self.reset_failed_in = name
                raised, fix = explain_reset_failure(error, reset, self.reset_by_hand)
            else:
                raised, fix = explain_failure(error, culprit, " during this check")
            return Guarded(instead=CheckResult(name, CheckStatus.FAIL, raised, fix))
        return Guarded(value)

    def stopped(self, resets: bool = True) -> str | None:
        """Why a check (one that ``resets`` the env, or not) is not run now; None when it is run."""
        if self.timed_out_in is not None:
            return f"the env did not finish '{self.timed_out_in}' within {self.timeout:g} s (see above)"
        if resets and self.reset_failed_in is not None:
            return f"it resets the env, and the env's reset raised in '{self.reset_failed_in}' (see above)"
        return None

    def not_run(self, name: str, resets: bool = True) -> CheckResult:
        """The result of a check not run because of an earlier one (a warning saying which); logged."""
        logger.info("check: %s (not run)", name)
        return CheckResult(name, CheckStatus.WARN, f"not run: {self.stopped(resets)}")

    @staticmethod
    def progress(name: str) -> None:
        """The progress line of a check as it starts."""
        logger.info("check: %s", name)


def explain_failure(error: BaseException, culprit: str, when: str = "") -> tuple[str, str]:
    """``"<culprit> raised <error><when>, in <where>"`` and how to fix it, for what the factory or the env raised."""
    return f"{culprit} raised {_describe(error)}{when}, in {_where_raised(error)}", specific_fix(error) or _ENV_FIX


def specific_fix(error: BaseException) -> str | None:
    """The fix for an error of this type (``SystemExit``, ``KeyboardInterrupt``, an unregistered id), if it has one."""
    return next((fix for kind, fix in _FIXES if isinstance(error, kind)), None)


def explain_reset_failure(
    error: BaseException, call: ResetCall, by_hand: Callable[[ResetCall], str]
) -> tuple[str, str]:
    """:func:`reset_failure_reason` and :func:`reset_failure_fix` of what the env's reset raised."""
    return reset_failure_reason(error, call), reset_failure_fix(specific_fix(error), call, by_hand)


def reset_failure_reason(error: BaseException, call: ResetCall) -> str:
    """``"the env's reset(seed=0) raised <error>, in <where>"``."""
    return f"the env's {call.describe()} raised {_describe(error)}, in {_where_raised(error)}"


def reset_failure_fix(specific: str | None, call: ResetCall, by_hand: Callable[[ResetCall], str] | None) -> str:
    """How to fix a reset that raised: the error type's own fix, if it has one, and how to see the traceback."""
    see = f"{(by_hand or _reset_by_hand)(call)} to see the whole traceback"
    if specific is not None:
        return f"{specific}; {see}"
    return f"the env was built, but its {call.describe()} raised: {see}, and fix reset"


def _reset_by_hand(call: ResetCall) -> str:
    return f"build an env with the factory and call `env.{call.describe()}` by hand"


def _describe(error: BaseException) -> str:
    """``SystemExit(0)``, ``KeyboardInterrupt``, ``ValueError('bad action')``: the type, and the message if any."""
    if isinstance(error, SystemExit):
        return f"SystemExit({error.code!r})"
    message = str(error)
    return f"{type(error).__name__}({message!r})" if message else type(error).__name__


def _where_raised(error: BaseException) -> str:
    """The innermost frame of the error's traceback (the watchdog's own left out): ``module.function, line N``."""
    innermost = None
    traceback = error.__traceback__
    while traceback is not None:
        if traceback.tb_frame.f_code.co_filename != _WATCHDOG_FILE:
            innermost = traceback
        traceback = traceback.tb_next
    if innermost is None:
        return "an unknown place"
    code = innermost.tb_frame.f_code
    module = innermost.tb_frame.f_globals.get("__name__", "?")
    return f"{module}.{getattr(code, 'co_qualname', code.co_name)}, line {innermost.tb_lineno}"
