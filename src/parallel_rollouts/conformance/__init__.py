"""Know an env before the run: conformance checks (``check_env``) and a backend advisor (``advise``).

One module per family of checks: ``pickling`` (the factory in a spawned
process), ``spaces_check``, ``determinism``, ``aliasing``, ``global_random``,
``autoreset`` (vector envs), ``closing`` (``close()`` and leftover child
processes); ``report`` holds the results, ``check`` runs them all, ``guard``
runs each within its time limit (``watchdog``) and turns what the env raises
into a failed check, telling the user's Ctrl-C apart (``interrupts``);
``main_guard`` finds a script that would be run again by the processes the
checks spawn (no ``if __name__ == "__main__":``);
``advisor`` times the backends, ``cli`` is the command line.
"""

from .advice import Advice, Option, OptionResult
from .advisor import advise
from .check import check_env
from .report import CheckResult, CheckStatus, ConformanceReport, Timing

__all__ = [
    "Advice",
    "CheckResult",
    "CheckStatus",
    "ConformanceReport",
    "Option",
    "OptionResult",
    "Timing",
    "advise",
    "check_env",
]
