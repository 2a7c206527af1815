"""``check_env``: run every conformance check on one env target and gather the report."""

from __future__ import annotations

import random
import shlex
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from ..errors import ConfigurationError
from .aliasing import NO_ALIASING, check_no_aliasing
from .autoreset import AUTORESET, check_autoreset_mode
from .children import running_children
from .closing import CLOSES, check_closes
from .determinism import SAME_SEED, SAME_SEED_SPAWNED, check_in_process, check_spawned
from .global_random import NO_GLOBAL_RANDOM, check_no_global_random
from .guard import CheckGuard, Guarded
from .interrupts import watch_user_interrupts
from .main_guard import UnguardedCall, refuse_in_spawned_import, unguarded_call
from .pickling import PICKLES, REBUILDS, check_factory_pickles, rebuild_in_spawned_process
from .report import CheckResult, CheckStatus, ConformanceReport, Timing
from .spaces_check import (
    ACTION_SAMPLING, SPACES_HONOURED, STORABLE, check_action_sampling, check_spaces, check_storable,
)
from .target import EnvTarget, _call_in_module, as_env, resolve_target, spaces_of
from .trajectory import ResetCall, Trajectory

__all__ = ["BUILDS", "check_env"]

BUILDS = "factory builds an env"


def check_env(
    env_fn_or_id: Any,
    *,
    seed: int = 0,
    max_steps: int = 1000,
    episodes: int = 2,
    timeout: float = 60.0,
    spawn_timeout: float = 120.0,
    env_kwargs: Mapping[str, Any] | None = None,
    wrappers: Sequence[Callable] = (),
) -> ConformanceReport:
    """Check that an env meets what parallel collection relies on; return the report.

    Parameters
    ----------
    env_fn_or_id:
        An env factory (a zero-argument callable returning a ``gymnasium.Env`` or a
        Gymnasium ``VectorEnv``), a registered env id (``"CartPole-v1"``,
        ``"ale_py:ALE/Pong-v5"``), an ``EnvSpec``, or ``"module:factory"``.
    seed:
        The reset seed of every run (episode ``k`` of a run is reset with ``seed + k``).
    max_steps:
        Each run stops after ``max_steps`` steps, or sooner once ``episodes`` episodes
        have ended.
    episodes:
        Each run stops after ``episodes`` episodes have ended, or sooner after
        ``max_steps`` steps.
    timeout:
        Seconds each check may run the env in this process (building it, its runs,
        closing it). Enforced with ``SIGALRM``, so only when ``check_env`` is called
        in the main thread on a POSIX system; elsewhere the checks run unbounded.
    spawn_timeout:
        Seconds the freshly spawned process may take to build the env and run it.
    env_kwargs:
        For an env id, as for :func:`~parallel_rollouts.make_collector`.
    wrappers:
        For an env id, as for :func:`~parallel_rollouts.make_collector`.

    Returns
    -------
    ConformanceReport
        One :class:`CheckResult` per check (``pass``, ``warn`` or ``fail``, a reason
        and how to fix it) and the measured step and reset times; ``report.ok`` is
        false when a check failed. ``print(report)`` prints the table.

    The checks: the factory pickles and rebuilds the env in a spawned process with
    the same spaces; the spaces are storable and every observation of a run is
    inside them (shape, dtype, bounds, NaN), rewards are numbers and flags bools;
    action sampling is reproducible from a seed; the same seed and actions give the
    same trajectory on two fresh envs, on a reused env and in a spawned process,
    over episodes that end; no observation is changed after it was returned; no
    draw from ``np.random`` or ``random``; for a vector env, the declared autoreset
    mode is the one it implements; ``close()`` returns and leaves no child process
    of the env running (a warning naming their pids).

    Whatever the factory or the env raises fails the check it was raised in, with
    the error and where it was raised (``SystemExit``, ``KeyboardInterrupt`` and
    other ``BaseException`` subclasses included), and the other checks still run,
    except that once the env's ``reset`` has raised, the checks after it that reset
    the env are not run (warnings saying so; each would fail the same way); a
    check that runs past ``timeout`` fails, and the in-process checks after it are
    not run. When the factory itself fails, the report holds only that failure
    (check :data:`BUILDS`). A Ctrl-C (``SIGINT``) during the checks still raises
    ``KeyboardInterrupt`` here: a ``KeyboardInterrupt`` counts as the env's only
    when no ``SIGINT`` arrived.

    Raises
    ------
    ConfigurationError
        When ``env_fn_or_id`` names no env (a module that cannot be imported, a name
        it does not have, an unregistered id), the factory returns something that is
        not an env, or a check's limits are invalid.
    KeyboardInterrupt
        When the user interrupted the checks.

    Each check is logged as it starts (or as not run) on the
    ``"parallel_rollouts.conformance"`` logger at ``INFO`` (the command line shows
    these lines on stderr).

    A script that calls ``check_env`` at its top level without
    ``if __name__ == "__main__":`` would be run again by the spawned process that
    imports it: the in-process checks still run, and the spawned ones fail naming
    the missing guard, with no process started.
    """
    refuse_in_spawned_import("check_env")
    unguarded = unguarded_call(skip_frames=2)
    for name, value in (("max_steps", max_steps), ("episodes", episodes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigurationError(f"`{name}` must be an int >= 1; got {value!r}.")
    for name, value in (("timeout", timeout), ("spawn_timeout", spawn_timeout)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ConfigurationError(f"`{name}` must be a positive number of seconds; got {value!r}.")
    target = resolve_target(env_fn_or_id, env_kwargs, wrappers)
    children_before = running_children()
    # The checks run the env under pinned global random states (and a bad env draws from them):
    # the caller's states are put back afterwards.
    numpy_state, python_state = np.random.get_state(), random.getstate()
    try:
        with watch_user_interrupts() as interrupts:
            guard = CheckGuard(float(timeout), interrupts, partial(_reset_by_hand, target))
            return _run_checks(target, guard, children_before, seed, max_steps, episodes, spawn_timeout, unguarded)
    finally:
        np.random.set_state(numpy_state)
        random.setstate(python_state)


def _run_checks(
    target: EnvTarget,
    guard: CheckGuard,
    children_before: Mapping[int, str],
    seed: int,
    max_steps: int,
    episodes: int,
    spawn_timeout: float,
    unguarded: UnguardedCall | None = None,
) -> ConformanceReport:
    factory = target.factory
    report = ConformanceReport(target.description)
    results = report.results
    limits = (seed, max_steps, episodes)

    built = guard.run(BUILDS, factory, culprit="the factory")
    if built.instead is not None:
        results.append(_nothing_else_ran(built.instead))
        return report
    env, vector = as_env(built.value)
    layout = None
    try:
        storable = guard.run(STORABLE, check_storable, env, vector)
        if storable.instead is None:
            storable_result, layout = storable.value
        results.append(storable.instead or storable_result)
        results.append(_result(guard.run(PICKLES, check_factory_pickles, factory)))
        results.append(_result(guard.run(ACTION_SAMPLING, check_action_sampling, env, seed)))
        if vector:
            results.append(_result(guard.run(AUTORESET, check_autoreset_mode, env, *limits, resets=True)))
        spaces = spaces_of(env, vector)
    finally:
        closed = guard.run(CLOSES, env.close, cleanup=True)
    runs: list[Trajectory] = []
    if layout is not None:
        # The whole step budget, however many episodes end: it also times the env's calls.
        honoured = guard.run(
            SPACES_HONOURED, check_spaces, factory, vector, layout, seed, max_steps, max_steps, resets=True
        )
        if honoured.instead is None:
            runs.append(honoured.value[1])
        results.append(honoured.instead or honoured.value[0])
    # After the first runs here: an env that hung in this process is not also waited for in another.
    if unguarded is not None:
        guard.progress(f"{REBUILDS} (not run)")
        rebuilt, spawned = CheckResult(
            REBUILDS, CheckStatus.FAIL, f"not run: {unguarded.explain('check_env')}", unguarded.fix()
        ), None
    elif guard.stopped() is None:
        guard.progress(REBUILDS)
        rebuilt, spawned = rebuild_in_spawned_process(
            factory, spaces, vector, *limits, spawn_timeout, guard.reset_by_hand
        )
    else:
        rebuilt, spawned = guard.not_run(REBUILDS), None
    results.append(rebuilt)
    same_seed = guard.run(SAME_SEED, check_in_process, factory, vector, *limits, resets=True)
    if same_seed.instead is not None:
        results.append(same_seed.instead)
        if guard.stopped() is not None:
            results.append(guard.not_run(SAME_SEED_SPAWNED))
        else:
            guard.progress(SAME_SEED_SPAWNED)
            results.append(CheckResult(SAME_SEED_SPAWNED, CheckStatus.WARN,
                                       "not judged: the same-seed runs here did not end (see above)"))
    else:
        same_seed_result, seeded_runs = same_seed.value
        runs += seeded_runs
        results.append(same_seed_result)
        guard.progress(SAME_SEED_SPAWNED)
        if same_seed_result.status is CheckStatus.FAIL:
            results.append(CheckResult(SAME_SEED_SPAWNED, CheckStatus.WARN,
                                       "not judged: not deterministic in this process (see above)"))
        else:
            results.append(check_spawned(seeded_runs[0], spawned))
    results.append(_result(guard.run(NO_ALIASING, check_no_aliasing, factory, vector, *limits, resets=True)))
    results.append(_result(
        guard.run(NO_GLOBAL_RANDOM, check_no_global_random, factory, vector, *limits, resets=True)
    ))
    guard.progress(CLOSES)  # judged last: the env was closed above, its children are looked for now
    results.append(check_closes(closed, children_before))
    report.timing = _timing(runs)
    return report


def _reset_by_hand(target: EnvTarget, call: ResetCall) -> str:
    """How to make ``call`` by hand on an env built as the target builds it: a command line when one can be written."""
    factory = target.factory
    statement = None
    if isinstance(factory, partial) and factory.func is _call_in_module:
        module, name = factory.args
        statement = f"import {module}; {module}.{name}().{call.describe()}"
    elif target.env_id is not None and not target.wrappers:
        kwargs = dict(target.env_kwargs or {})
        if all(isinstance(key, str) and key.isidentifier() for key in kwargs):
            arguments = "".join(f", {key}={value!r}" for key, value in kwargs.items())
            statement = f"import gymnasium; gymnasium.make({target.env_id!r}{arguments}).{call.describe()}"
    else:
        module, name = getattr(factory, "__module__", None), getattr(factory, "__qualname__", "")
        if module and module not in ("__main__", "builtins") and name.isidentifier():
            statement = f"import {module}; {module}.{name}().{call.describe()}"
    if statement is None:
        return f"build an env with the factory and call `env.{call.describe()}` by hand"
    # In double quotes when nothing in it means something there to a POSIX shell (reprs quote with ').
    quoted = f'"{statement}"' if not set('"$`\\!') & set(statement) else shlex.quote(statement)
    return f"run `python -c {quoted}`"


def _result(guarded: Guarded) -> CheckResult:
    """The result of a check that returns only its result."""
    return guarded.instead or guarded.value


def _nothing_else_ran(failure: CheckResult) -> CheckResult:
    return CheckResult(failure.name, failure.status,
                       f"{failure.reason} (the other checks need an env: none was run)", failure.fix)


def _timing(runs: list[Trajectory]) -> Timing | None:
    steps = np.array([seconds for run in runs for seconds in run.step_seconds])
    resets = np.array([seconds for run in runs for seconds in run.reset_seconds])
    if steps.size == 0 or resets.size == 0:
        return None
    return Timing(
        step_mean_s=float(steps.mean()),
        step_p99_s=float(np.percentile(steps, 99)),
        steps=int(steps.size),
        reset_mean_s=float(resets.mean()),
        reset_p99_s=float(np.percentile(resets, 99)),
        resets=int(resets.size),
    )
