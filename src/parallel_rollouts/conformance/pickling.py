"""Checks that the factory travels to a spawned process and builds the same env there.

The async backend's workers and Ray's actors start as fresh processes and get
the factory by ``cloudpickle``: a lambda is fine, but whatever it captures must
pickle, and whatever it needs (an env id registered by a package, a module on
the path) must be found again in the new process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cloudpickle

from ..data.spaces import _same_space
from .guard import _ENV_FIX, explain_failure, reset_failure_fix, reset_failure_reason, specific_fix
from .report import CheckResult, CheckStatus
from .spawned import SpawnedFailure, run_spawned
from .target import build_env, spaces_of
from .trajectory import ResetCall, Trajectory, raised_in_reset, run_trajectory

__all__ = ["PICKLES", "REBUILDS", "SpawnedRun", "check_factory_pickles", "rebuild_in_spawned_process"]

PICKLES = "factory pickles"
REBUILDS = "rebuilds in a spawned process"


@dataclass(frozen=True)
class SpawnedRun:
    """What the spawned process reported: its env's spaces and its seeded trajectory."""

    observation_space: Any
    action_space: Any
    vector: bool
    trajectory: Trajectory


def check_factory_pickles(factory: Callable) -> CheckResult:
    try:
        payload = cloudpickle.dumps(factory)
    except Exception as error:
        return CheckResult(
            PICKLES,
            CheckStatus.FAIL,
            f"cloudpickle cannot pickle the factory: {type(error).__name__}: {error}",
            "make the factory a top-level function or a functools.partial of one, and build unpicklable "
            "things (locks, open files, sockets, simulator handles) inside it rather than capturing them",
        )
    return CheckResult(PICKLES, CheckStatus.PASS, f"cloudpickle pickles it ({len(payload):,} bytes)")


@dataclass(frozen=True)
class _EnvRaised:
    """In the spawned process the env was built, then raised: said there, as its traceback does not travel."""

    reason: str
    #: The fix for what was raised, if its type has one of its own (``SystemExit``...).
    specific_fix: str | None
    #: The reset call it was raised in, if it was.
    reset: ResetCall | None

    @classmethod
    def of(cls, error: BaseException) -> _EnvRaised:
        reset = raised_in_reset(error)
        reason = reset_failure_reason(error, reset) if reset is not None else explain_failure(error, "the env")[0]
        return cls(reason, specific_fix(error), reset)


def _rebuild_and_run(factory: Callable, seed: int, max_steps: int, episodes: int) -> SpawnedRun | _EnvRaised:
    """In the spawned process: build the env, run the reference trajectory, close it.

    What the factory raises propagates (the parent reports that the env could not be rebuilt);
    what the env raises once built comes back as an :class:`_EnvRaised`.
    """
    env, vector = build_env(factory)
    try:
        observation_space, action_space = spaces_of(env, vector)
        trajectory = run_trajectory(env, seed, max_steps, episodes, vector)
    except BaseException as error:  # whatever the env raised, the parent reports
        return _EnvRaised.of(error)
    finally:
        env.close()
    trajectory.step_seconds, trajectory.reset_seconds = [], []  # only the digests travel back
    return SpawnedRun(observation_space, action_space, vector, trajectory)


def rebuild_in_spawned_process(
    factory: Callable,
    spaces: tuple[Any, Any],
    vector: bool,
    seed: int,
    max_steps: int,
    episodes: int,
    timeout: float,
    reset_by_hand: Callable[[ResetCall], str] | None = None,
) -> tuple[CheckResult, SpawnedRun | None]:
    """Build the env in a fresh spawned process; compare its spaces with ``spaces`` (observation, action) from here.

    ``reset_by_hand(call)`` says how to make a reset call by hand (for the fix when the env's reset
    raised there).
    """
    try:
        reply = run_spawned(_rebuild_and_run, (factory, seed, max_steps, episodes), timeout)
    except Exception as error:
        return CheckResult(REBUILDS, CheckStatus.FAIL, f"not run: the factory does not pickle ({error})",
                           "see the check above"), None
    if isinstance(reply, _EnvRaised):
        # Built there: what the factory needs was found. The env itself raised as it ran.
        if reply.reset is not None:
            fix = reset_failure_fix(reply.specific_fix, reply.reset, reset_by_hand)
        else:
            fix = reply.specific_fix or _ENV_FIX
        return CheckResult(REBUILDS, CheckStatus.FAIL, f"in a fresh spawned process: {reply.reason}", fix), None
    if isinstance(reply, SpawnedFailure):
        last_line = reply.message.splitlines()[0] if reply.message else reply.kind
        fix = (
            "a factory must work in a process that imported nothing of yours: import inside it what registers "
            "the env (e.g. `import ale_py` before gymnasium.make('ALE/...')), pass the id as 'package:EnvId', "
            "or make the factory importable (a module on the path, not a notebook cell)"
        )
        if reply.kind == "died":
            fix += (
                "; a script that calls check_env at its top level is run again by that process, which stops "
                "(its message names the missing `if __name__ == \"__main__\":`)"
            )
        if reply.kind == "timeout":
            fix = "make building, resetting and stepping the env finish in a fresh process, or raise spawn_timeout"
        return CheckResult(REBUILDS, CheckStatus.FAIL, f"in a fresh spawned process: {last_line}", fix), None
    observation_space, action_space = spaces
    for role, here, there in (
        ("observation", observation_space, reply.observation_space),
        ("action", action_space, reply.action_space),
    ):
        if not _same_space(here, there):
            return CheckResult(
                REBUILDS,
                CheckStatus.FAIL,
                f"the env built in a spawned process declares the {role} space {there!r}, this process's {here!r}",
                "spaces must not depend on the process (module-level state, environment variables, what "
                "was imported before the factory ran)",
            ), reply
    if reply.vector != vector:
        return CheckResult(REBUILDS, CheckStatus.FAIL, "the factory returns a vector env in one process and a "
                           "single env in the other", "return the same kind of env everywhere"), reply
    return CheckResult(REBUILDS, CheckStatus.PASS, "built, reset and stepped in a fresh spawned process; "
                       "same spaces"), reply
