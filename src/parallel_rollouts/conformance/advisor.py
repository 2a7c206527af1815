"""The backend advisor: short timed trials of each way to run ``num_envs`` envs, side by side.

For the env and ``num_envs`` given (a training choice, never changed here), each
option is a collector built once: ``sync``; ``async`` stepping per step with the
policy in this process; ``async`` with rollout workers (the policy in the
workers); with ``thorough=True`` also ``pipelined`` and other worker counts; and,
when the env has a vector implementation (its spec's ``vector_entry_point``) or
the factory returns a vector env, that vector env as the source. After warm-up
collects, every round times each option for about ``trial_seconds`` (whole
``collect()`` calls of the given horizon), the options in a rotated order, so
load on the machine falls on all of them alike. Throughput counts valid
transitions only (a next-step autoreset row is no transition).

Options are compared within each round (the ratio of their rates in that
round), where they ran seconds apart under the same load. The recommendation is
the option with the best median ratio to the first option (``sync``); every
other option's ratios to it are printed, and one that was faster in at least one
round and within ``NEAR_TIE`` of it in the median round is reported as a near
tie.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import cloudpickle
import gymnasium
import numpy as np

from ..collector import ParallelRolloutCollector
from ..errors import ConfigurationError
from ..processes.slicing import usable_cores
from .advice import Advice, Option, OptionResult
from .main_guard import UnguardedCall, refuse_in_spawned_import, unguarded_call
from .modes import QUICK, THOROUGH
from .report import counted
from .rounds import run_rounds
from ..groups.vector_source import autoreset_mode_of
from .guard import explain_failure
from .policy_target import resolve_policy
from .target import EnvTarget, _call_in_module, as_env, resolve_target

__all__ = ["advise"]

#: A line per option started and per round timed (``INFO``); the command line shows them on stderr.
logger = logging.getLogger("parallel_rollouts.conformance")


def advise(
    env_fn_or_id: Any,
    num_envs: int | None = None,
    *,
    policy: Callable[[Any], Any] | str | None = None,
    horizon: int = 128,
    thorough: bool = False,
    rounds: int | None = None,
    trial_seconds: float | None = None,
    seed: int = 0,
    env_kwargs: Mapping[str, Any] | None = None,
    wrappers: Sequence[Callable] = (),
    default_num_envs: int | None = None,
) -> Advice:
    """Time each way to collect from ``num_envs`` envs on this machine; recommend the fastest.

    Parameters
    ----------
    env_fn_or_id:
        As for :func:`check_env`. A factory returning a vector env is one source of
        its own ``num_envs`` sub-envs (``num_envs`` may then be omitted).
    num_envs:
        How many envs your training runs (not changed by the advice).
    policy:
        Your batched policy, so that its cost counts, or ``"module:factory"`` naming a
        zero-argument function in an importable module that returns it (the command
        line's ``--policy``; the factory is called once, here). ``None``: random actions,
        each env sampling its seeded action space, and the advice says so. For rollout
        workers the policy must pickle.
    horizon:
        Steps per ``collect()``: rollout workers exchange once per collect, so it matters.
    thorough:
        Quick (about a minute: 5 rounds of about 1.5 s per option) by default; ``True``
        runs 7 rounds of about 4 s and more options (pipelined, other worker counts).
    rounds:
        Overrides the mode's number of rounds (5 quick, 7 thorough).
    trial_seconds:
        Overrides the mode's seconds per option per round (1.5 quick, 4 thorough).
    seed:
        The root seed of every collector timed.
    env_kwargs:
        For an env id, as for :func:`~parallel_rollouts.make_collector`.
    wrappers:
        For an env id, as for :func:`~parallel_rollouts.make_collector`.
    default_num_envs:
        Used when ``num_envs`` is omitted for single envs (the command line passes 8).

    Returns
    -------
    Advice
        Every option's transitions/s per round, the recommendation and its near
        ties; ``print(advice)`` prints the table and the code that builds the
        recommended collector. ``advice.recommended`` is ``None`` when an option
        that applies could not be measured (``advice.unmeasured`` says which and
        why); rollout workers do not apply to a policy that does not pickle.

    Raises
    ------
    ConfigurationError
        For a target that names no env, invalid settings, a factory or env that
        raises as one step is timed (naming it, where it raised and the fix), a
        ``policy`` that names no policy (a module that cannot be imported, a name it
        lacks, a factory that takes arguments, raises or returns something not
        callable), or a call from a script's top level without
        ``if __name__ == "__main__":``.

    Progress (the plan, each option started, each round timed) is logged on the
    ``"parallel_rollouts.conformance"`` logger at ``INFO``; the command line
    shows it on stderr.
    """
    refuse_in_spawned_import("advise")
    unguarded = unguarded_call(skip_frames=2)
    if unguarded is not None:
        raise ConfigurationError(f"{unguarded.explain('advise')} Nothing was measured: {UnguardedCall.fix()}.")
    settings = dict(THOROUGH if thorough else QUICK)
    if rounds is not None:
        settings["rounds"] = rounds
    if trial_seconds is not None:
        settings["trial_seconds"] = trial_seconds
    if isinstance(settings["rounds"], bool) or not isinstance(settings["rounds"], int) or settings["rounds"] < 1:
        raise ConfigurationError(f"`rounds` must be an int >= 1; got {settings['rounds']!r}.")
    if not isinstance(settings["trial_seconds"], (int, float)) or settings["trial_seconds"] <= 0:
        raise ConfigurationError(f"`trial_seconds` must be a positive number; got {settings['trial_seconds']!r}.")
    if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1:
        raise ConfigurationError(f"`horizon` must be an int >= 1; got {horizon!r}.")
    target = resolve_target(env_fn_or_id, env_kwargs, wrappers)
    timed_policy = resolve_policy(policy)
    logger.info("advise: timing one step of %s", target.description)
    step_seconds, vector_envs, masked = _measure_step(target.factory)
    if vector_envs is not None:
        if num_envs is not None and num_envs != vector_envs:
            raise ConfigurationError(
                f"the factory returns a vector env of {vector_envs} sub-envs; `num_envs`={num_envs!r} cannot "
                "change that: omit it, or pass a factory of single envs."
            )
        num_envs = vector_envs
    elif num_envs is None:
        num_envs = default_num_envs
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ConfigurationError(f"`num_envs` must be an int >= 1 (how many envs your training runs); got {num_envs!r}.")
    cores = usable_cores()
    options = _options(target, num_envs, cores, thorough, vector_envs is not None, horizon, masked)
    results = _run_trials(options, timed_policy.policy, horizon, seed, settings)
    return Advice(
        target=target.description,
        num_envs=num_envs,
        horizon=horizon,
        usable_cores=cores,
        rounds=settings["rounds"],
        trial_seconds=float(settings["trial_seconds"]),
        policy=timed_policy.description,
        env_step_seconds=step_seconds,
        results=results,
        random_actions=timed_policy.random_actions,
    )


def _measure_step(
    factory: Callable, budget_seconds: float = 0.5, max_steps: int = 2000
) -> tuple[float, int | None, bool]:
    """Mean wall time of one env step here (a vector env's whole step); its num_envs if it is a vector env,
    and whether its batches hold reset rows (next-step autoreset) to mask with ``batch.valid``.

    What the factory or the env raises is a ``ConfigurationError`` saying so, with the fix: nothing
    can be timed without an env that steps.
    """
    try:
        made = factory()
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # SystemExit and the env's own BaseException subclasses included
        raise _cannot_time(error, "the env factory", " as the env was made") from error
    env, vector = as_env(made)
    try:
        return _time_steps(env, vector, budget_seconds, max_steps)
    except KeyboardInterrupt:
        raise
    except BaseException as error:
        raise _cannot_time(error, "the env", " as its step was timed") from error
    finally:
        env.close()


def _cannot_time(error: BaseException, culprit: str, when: str) -> ConfigurationError:
    raised, fix = explain_failure(error, culprit, when)
    return ConfigurationError(
        f"{raised}, so no option can be timed. Fix: {fix}. `check_env` (`parallel-rollouts check`) runs "
        "the env through every check and names each failure."
    )


def _time_steps(env: Any, vector: bool, budget_seconds: float, max_steps: int) -> tuple[float, int | None, bool]:
    """The mean step time, the vector env's num_envs, whether to mask: as :func:`_measure_step` returns."""
    env.action_space.seed(0)
    env.reset(seed=0)
    durations = []
    deadline = time.perf_counter() + budget_seconds
    while len(durations) < max_steps and (len(durations) < 10 or time.perf_counter() < deadline):
        action = env.action_space.sample()
        start = time.perf_counter()
        _, _, terminated, truncated, _ = env.step(action)
        durations.append(time.perf_counter() - start)
        if not vector and (terminated or truncated):
            env.reset()
    if not vector:
        return float(np.mean(durations)), None, False
    return float(np.mean(durations)), int(env.num_envs), _needs_valid_mask(env)


def _needs_valid_mask(vector_env: Any) -> bool:
    """Whether a collector over this vector env records its reset steps as rows that are not ``valid``."""
    return autoreset_mode_of(vector_env) is gymnasium.vector.AutoresetMode.NEXT_STEP


def _entry_point_needs_valid_mask(make_vec: Callable) -> bool:
    env = make_vec(num_envs=1)
    try:
        return _needs_valid_mask(env)
    finally:
        env.close()


def _options(
    target: EnvTarget, num_envs: int, cores: int, thorough: bool, vector: bool, horizon: int, masked: bool
) -> list[Option]:
    factory = target.factory
    code = partial(_collector_code, horizon=horizon)
    if vector:  # one vector env: it can run here or in one worker process
        env_fns = [factory]
        expression, imports = _callable_expression(factory)
        options = [
            Option("sync", "sync", "main", None, env_fns, "vector env"),
            Option("async, per step", "async", "main", 1, env_fns, "vector env"),
            Option("async, rollout workers", "async", "workers", 1, env_fns, "vector env"),
        ]
        return [
            dataclasses.replace(option, code=code(option, f"[{expression}]", imports=imports), needs_valid_mask=masked)
            for option in options
        ]
    env_fns = [factory] * num_envs
    workers = min(cores, num_envs)
    counts = [workers]
    if thorough:
        counts = sorted({count for count in (2, 4, 8, 16, 32, cores) if 2 <= count <= min(cores, num_envs)} | {workers})
    options = [Option("sync", "sync", "main", None, env_fns, "env factories")]
    for count in counts:
        # At the default count, per step: the default split (this process steps a share next to
        # count - 1 workers); other counts are given, so every env steps in a worker.
        per_step_workers = None if count == workers else count
        options.append(Option("async, per step", "async", "main", per_step_workers, env_fns, "env factories"))
        options.append(Option("async, rollout workers", "async", "workers", count, env_fns, "env factories"))
        if thorough and count >= 2:
            options.append(Option("async, pipelined", "async", "main", count, env_fns, "env factories", pipelined=True))
    options = [dataclasses.replace(option, code=_factories_code(target, num_envs, option, horizon)) for option in options]
    spec = target.spec
    if spec is not None and spec.vector_entry_point is not None and not target.wrappers:
        # The env's own vector implementation; per-env wrappers cannot apply to it.
        make_vec = partial(gymnasium.make_vec, spec, vectorization_mode="vector_entry_point", **target.env_kwargs)
        try:
            masked = _entry_point_needs_valid_mask(make_vec)
        except Exception:  # its collector fails the same way, and is reported as not measured
            masked = True
        sync = Option("sync", "sync", "main", None, [partial(make_vec, num_envs=num_envs)], "vector env")
        options.append(dataclasses.replace(
            sync, code=_vector_code(target, sync, num_envs, horizon), needs_valid_mask=masked
        ))
        if num_envs % workers == 0 and workers >= 2:
            per_worker = [partial(make_vec, num_envs=num_envs // workers)] * workers
            split = Option("async, rollout workers", "async", "workers", workers, per_worker, "vector envs")
            options.append(dataclasses.replace(
                split, code=_vector_code(target, split, num_envs, horizon, workers), needs_valid_mask=masked
            ))
    return options


def _collector_code(option: Option, env_fns: str, horizon: int, imports: tuple[str, ...] = ()) -> str:
    """``ParallelRolloutCollector(...)`` for this option over the env source ``env_fns`` (Python text), imports first."""
    lines = [*imports, "from parallel_rollouts import ParallelRolloutCollector"]
    lines.append(f"collector = ParallelRolloutCollector({env_fns}, policy, {option.as_arguments()}, horizon={horizon})")
    return "\n".join(lines)


def _factories_code(target: EnvTarget, num_envs: int, option: Option, horizon: int) -> str:
    """The collector over ``num_envs`` single envs: ``make_collector`` for an id, the factories otherwise."""
    if target.env_id is None:
        expression, imports = _callable_expression(target.factory)
        return _collector_code(option, f"[{expression}] * {num_envs}", horizon, imports)
    extras, imports = "", []
    if target.env_kwargs:
        extras += f", env_kwargs={dict(target.env_kwargs)!r}"
    if target.wrappers:
        names = []
        for wrapper in target.wrappers:
            name, needed = _callable_expression(wrapper)
            names.append(name)
            imports += needed
        extras += f", wrappers=[{', '.join(names)}]"
    return "\n".join([
        *imports,
        "from parallel_rollouts import make_collector",
        f"collector = make_collector({_quoted(target.env_id)}, num_envs={num_envs}, policy=policy, "
        f"{option.as_arguments()}, horizon={horizon}{extras})",
    ])


def _vector_code(target: EnvTarget, option: Option, num_envs: int, horizon: int, workers: int | None = None) -> str:
    """The collector over the env's own vector implementation: one of ``num_envs``, or one per worker."""
    kwargs = "".join(f", {key}={value!r}" for key, value in (target.env_kwargs or {}).items())
    if workers is None:
        source = f'gymnasium.make_vec({_quoted(target.env_id)}, num_envs={num_envs}, ' \
                 f'vectorization_mode="vector_entry_point"{kwargs})'
        return _collector_code(option, source, horizon, ("import gymnasium",))
    source = f'[partial(gymnasium.make_vec, {_quoted(target.env_id)}, num_envs={num_envs // workers}, ' \
             f'vectorization_mode="vector_entry_point"{kwargs})] * {workers}'
    return _collector_code(option, source, horizon, ("from functools import partial", "", "import gymnasium"))


def _quoted(text: str) -> str:
    return f'"{text}"' if '"' not in text and "\\" not in text else repr(text)


def _callable_expression(function: Any) -> tuple[str, tuple[str, ...]]:
    """How the user's code names ``function`` (``make``, ``my_envs.make``) and the imports that needs."""
    if isinstance(function, partial) and function.func is _call_in_module:
        module_name, attribute = function.args
        return f"{module_name}.{attribute}", (f"import {module_name}",)
    module = getattr(function, "__module__", None)
    name = getattr(function, "__qualname__", None)
    if name is None or isinstance(function, partial) or "<" in name:
        return "env_fn", ()  # a partial, a lambda, a callable object: the user's own expression
    if module in (None, "__main__", "__mp_main__", "builtins"):
        return name, ()
    return f"{module}.{name}", (f"import {module}",)


@dataclass
class _Trial:
    option: Option
    collector: ParallelRolloutCollector | None = None
    startup_seconds: float = 0.0
    error: str | None = None
    rates: list[float] = field(default_factory=list)
    collects: int = 0
    applicable: bool = True


def _run_trials(options: list[Option], policy: Any, horizon: int, seed: int, settings: dict) -> list[OptionResult]:
    trials = [_Trial(option) for option in options]
    unpicklable = _why_unpicklable(policy)
    logger.info(
        "advise: %s, then %s of about %g s each per option (about %.0f s)",
        counted(len(trials), "option"), counted(settings["rounds"], "round"), settings["trial_seconds"],
        len(trials) * settings["rounds"] * settings["trial_seconds"],
    )
    try:
        for number, trial in enumerate(trials, 1):
            if unpicklable is not None and trial.option.policy_placement == "workers":
                trial.error = f"the policy does not pickle, so it cannot run in worker processes ({unpicklable})"
                trial.applicable = False
                continue
            workers = "" if trial.option.num_workers is None else f", {counted(trial.option.num_workers, 'worker')}"
            logger.info("advise: starting option %d of %d: %s%s", number, len(trials), trial.option.label, workers)
            _start(trial, policy, horizon, seed, settings["warmup_collects"])
        live = [trial for trial in trials if trial.error is None]
        started = time.perf_counter()

        def round_timed(round_index: int) -> None:
            logger.info("advise: round %d of %d timed (%.0f s)", round_index + 1, settings["rounds"],
                        time.perf_counter() - started)

        measured = run_rounds(
            live, partial(_time_one, seconds=settings["trial_seconds"]), settings["rounds"], order="rotate",
            keep_going=True, after_round=round_timed,
        )
        for trial, rates, error in zip(live, measured.samples, measured.errors):
            trial.rates = rates
            if error is not None:
                trial.error = f"{type(error).__name__} during a timed collect: {error}"
    finally:
        for trial in trials:
            if trial.collector is not None:
                trial.collector.close()
    return [
        OptionResult(trial.option, trial.rates, trial.startup_seconds, trial.collects, trial.error, trial.applicable)
        for trial in trials
    ]


def _why_unpicklable(policy: Any) -> str | None:
    if policy is None:
        return None
    try:
        cloudpickle.dumps(policy)
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return None


def _start(trial: _Trial, policy: Any, horizon: int, seed: int, warmup_collects: int) -> None:
    option = trial.option
    start = time.perf_counter()
    try:
        trial.collector = ParallelRolloutCollector(
            option.env_fns, policy, option.backend, horizon, seed, **option.collector_kwargs()
        )
        for _ in range(warmup_collects):
            trial.collector.collect()
    except Exception as error:  # an option that cannot run is reported, not fatal
        trial.error = f"{type(error).__name__}: {error}"
        if trial.collector is not None:
            trial.collector.close()
            trial.collector = None
    trial.startup_seconds = time.perf_counter() - start


def _time_one(trial: _Trial, seconds: float) -> float:
    """Whole collects for about ``seconds``; return valid transitions per second."""
    transitions = 0
    start = time.perf_counter()
    while True:
        batch = trial.collector.collect()
        transitions += int(batch.valid.sum())
        trial.collects += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return transitions / elapsed
