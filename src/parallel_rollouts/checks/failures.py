"""How the errors of several envs, groups or workers in one call become the one error raised.

Every place that gathers errors from parts that ran side by side (the groups of a
sync collector, the workers of a pool at start-up and at each exchange) merges
them here, under one rule:

- an error that is not a :class:`~parallel_rollouts.errors.WorkerError` (a bug,
  a broken protocol) is raised first, as it is: it must never hide behind env
  failures;
- otherwise every env failure is reported together, in one ``WorkerError`` of
  the parts' common type (``WorkerDiedError`` when every part died), so that one
  message lists each failing env with its traceback.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import WorkerDiedError, WorkerError

__all__ = ["merged_failure", "restarts_exhausted"]


def merged_failure(errors: Sequence[BaseException]) -> BaseException | None:
    """The one error to raise for ``errors`` (``None`` when there is none)."""
    if not errors:
        return None
    for error in errors:
        if not isinstance(error, WorkerError):
            return error
    failures = [failure for error in errors for failure in error.failures]
    if len(errors) == 1 or not failures:
        return errors[0]
    kinds = {type(error) for error in errors}
    kind = kinds.pop() if len(kinds) == 1 else WorkerError
    return kind.from_failures(failures)


def restarts_exhausted(deaths: Sequence[WorkerError], max_restarts: int) -> WorkerDiedError:
    """The error once workers died (or hung) more often than ``max_restarts`` allows: one line per
    death over the collector's life, in order, and every failure (with its crash traceback)."""
    lines = []
    for number, death in enumerate(deaths, start=1):
        first = death.failures[0] if death.failures else None
        where = f" in `{first.phase}`" if first is not None else ""
        lines.append(f"  {number}. {str(death.args[0]).splitlines()[0]}{where}")
    return WorkerDiedError(
        f"workers were lost {len(deaths)} times, more than max_restarts={max_restarts} allows; each loss, "
        "in order:\n" + "\n".join(lines),
        tuple(failure for death in deaths for failure in death.failures),
    )
