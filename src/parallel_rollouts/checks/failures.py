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

It also builds the errors for a worker process or Ray actor that is lost (:func:`worker_died`,
:func:`timed_out`) and decides, for the async backend and Ray alike, when losses are more than
the restarts left (:func:`losses_beyond_restarts`, :func:`restarts_exhausted`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..errors import EnvFailure, StepTimeoutError, WorkerDiedError, WorkerError

__all__ = [
    "losses_beyond_restarts",
    "merged_failure",
    "restarts_exhausted",
    "timed_out",
    "worker_died",
]


def worker_died(
    who: str, env_indices: Iterable[int], how: str, when: str, *, phase: str = "worker",
    failures: Sequence[EnvFailure] | None = None,
) -> WorkerDiedError:
    """The error for a worker process or Ray actor that is gone: ``"{who} {how} {when}"``.

    ``who`` names it and its envs. ``failures``: each env's failure where the cause is known
    (a Ray actor's death); by default ``how`` for each env in ``phase`` (a process's exit
    code or signal is all there is).
    """
    if failures is None:
        failures = [EnvFailure(env, phase, "WorkerDiedError", how, "") for env in env_indices]
    return WorkerDiedError(f"{who} {how} {when}", tuple(failures))


def timed_out(
    who: str, deadline: str, env_indices: Iterable[int], *, suspects: str = "its envs", outcome: str
) -> StepTimeoutError:
    """The error for workers or actors that did not finish within ``deadline``; ``outcome`` says
    what became of them and of the collector."""
    return StepTimeoutError(
        f"{who} did not finish {deadline}; {suspects} may hang. {outcome}",
        tuple(EnvFailure(env, "step", "StepTimeoutError", "timed out", "") for env in env_indices),
    )


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


def losses_beyond_restarts(
    losses: Sequence[WorkerError], deaths: Sequence[WorkerError], max_restarts: int, restarts_left: int
) -> BaseException | None:
    """The error to raise for workers (or actors) lost at once, or ``None`` when each can be replaced.

    ``deaths``: every loss over the owner's life, ``losses`` included. Without restarts the
    losses themselves (several: merged); once the restarts are spent, :func:`restarts_exhausted`.
    """
    if not losses:
        return None
    if max_restarts == 0:
        return merged_failure(losses)
    if len(losses) > restarts_left:
        return restarts_exhausted(deaths, max_restarts)
    return None
