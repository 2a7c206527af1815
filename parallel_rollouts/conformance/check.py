"""``check_env``: run every conformance check on one env target and gather the report."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ConfigurationError
from .aliasing import NO_ALIASING, check_no_aliasing
from .autoreset import AUTORESET, check_autoreset_mode
from .determinism import SAME_SEED, SAME_SEED_SPAWNED, check_in_process, check_spawned
from .global_random import NO_GLOBAL_RANDOM, check_no_global_random
from .pickling import check_factory_pickles, rebuild_in_spawned_process
from .report import CheckResult, CheckStatus, ConformanceReport, Timing
from .spaces_check import ACTION_SAMPLING, SPACES_HONOURED, check_action_sampling, check_spaces, check_storable
from .target import EnvTarget, build_env, resolve_target
from .trajectory import Trajectory

__all__ = ["check_env"]


def check_env(
    env_fn_or_id: Any,
    *,
    seed: int = 0,
    max_steps: int = 1000,
    episodes: int = 2,
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
    max_steps, episodes:
        Each run stops after ``episodes`` episodes have ended or ``max_steps`` steps.
    spawn_timeout:
        Seconds the freshly spawned process may take to build the env and run it.
    env_kwargs, wrappers:
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
    mode is the one it implements. An error the env raises during a check fails
    that check; an error of the factory itself here propagates.

    Raises
    ------
    ConfigurationError
        When ``env_fn_or_id`` names no env, or a check's limits are invalid.
    """
    for name, value in (("max_steps", max_steps), ("episodes", episodes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigurationError(f"`{name}` must be an int >= 1; got {value!r}.")
    if not isinstance(spawn_timeout, (int, float)) or spawn_timeout <= 0:
        raise ConfigurationError(f"`spawn_timeout` must be a positive number of seconds; got {spawn_timeout!r}.")
    target = resolve_target(env_fn_or_id, env_kwargs, wrappers)
    # The checks run the env under pinned global random states (and a bad env draws from them):
    # the caller's states are put back afterwards.
    numpy_state, python_state = np.random.get_state(), random.getstate()
    try:
        return _run_checks(target, seed, max_steps, episodes, spawn_timeout)
    finally:
        np.random.set_state(numpy_state)
        random.setstate(python_state)


def _run_checks(target: EnvTarget, seed: int, max_steps: int, episodes: int, spawn_timeout: float) -> ConformanceReport:
    factory = target.factory
    report = ConformanceReport(target.description)
    results = report.results
    limits = (seed, max_steps, episodes)

    env, vector = build_env(factory)
    try:
        storable, layout = check_storable(env, vector)
        results.append(storable)
        results.append(check_factory_pickles(factory))
        rebuilt, spawned = rebuild_in_spawned_process(factory, env, vector, *limits, spawn_timeout)
        results.append(rebuilt)
        results.append(_guarded(ACTION_SAMPLING, check_action_sampling, env, seed))
        if vector:
            results.append(_guarded(AUTORESET, check_autoreset_mode, env, *limits))
    finally:
        env.close()
    runs: list[Trajectory] = []
    if layout is not None:
        # The whole step budget, however many episodes end: it also times the env's calls.
        honoured = _guarded(SPACES_HONOURED, check_spaces, factory, vector, layout, seed, max_steps, max_steps)
        results.append(honoured[0] if isinstance(honoured, tuple) else honoured)
        runs += [honoured[1]] if isinstance(honoured, tuple) else []
    same_seed = _guarded(SAME_SEED, check_in_process, factory, vector, *limits)
    if isinstance(same_seed, tuple):
        same_seed, seeded_runs = same_seed
        runs += seeded_runs
    results.append(same_seed)
    if same_seed.status is CheckStatus.FAIL:
        results.append(CheckResult(SAME_SEED_SPAWNED, CheckStatus.WARN,
                                   "not judged: not deterministic in this process (see above)"))
    else:
        results.append(check_spawned(seeded_runs[0], spawned))
    results.append(_guarded(NO_ALIASING, check_no_aliasing, factory, vector, *limits))
    results.append(_guarded(NO_GLOBAL_RANDOM, check_no_global_random, factory, vector, *limits))
    report.timing = _timing(runs)
    return report


def _guarded(name: str, check: Callable, *arguments: Any) -> Any:
    """Run one check; an exception the env raises during it fails that check instead of ending the rest."""
    try:
        return check(*arguments)
    except Exception as error:
        return CheckResult(
            name,
            CheckStatus.FAIL,
            f"the env raised {type(error).__name__} during this check: {error}",
            "an env must survive seeded resets and random actions from its action space, episode ends included",
        )


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
