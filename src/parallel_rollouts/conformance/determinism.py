"""Same seed, same trajectory: in this process, on a reused env, and in a freshly spawned process.

Every backend reseeds each episode with a seed derived from the collector's
root seed; the batch is reproducible, and identical across backends, only if
``reset(seed=s)`` and the actions determine everything the env returns.
"""

from __future__ import annotations

from collections.abc import Callable

from .pickling import SpawnedRun
from .report import CheckResult, CheckStatus, counted
from .target import build_env
from .trajectory import Trajectory, first_difference, run_trajectory

__all__ = ["SAME_SEED", "SAME_SEED_SPAWNED", "check_in_process", "check_spawned"]

SAME_SEED = "same seed, same trajectory"
SAME_SEED_SPAWNED = "same trajectory in a spawned process"

_SEED_FIX = (
    "draw every random number from generators seeded in reset(seed=...) (call super().reset(seed=seed) "
    "and use self.np_random; seed any simulator or inner env from it), never from an unseeded generator"
)


def _where(index: int) -> str:
    return "at the first reset" if index == 0 else f"after {index} calls (reset included)"


def _coverage(trajectory: Trajectory) -> str:
    return f"{counted(trajectory.steps, 'step')}, {counted(trajectory.episodes_ended, 'episode end')}"


def check_in_process(
    factory: Callable, vector: bool, seed: int, max_steps: int, episodes: int
) -> tuple[CheckResult, list[Trajectory]]:
    """Two fresh envs and one reused env, all reset with ``seed``; return the result and the runs."""
    first_env, _ = build_env(factory)
    try:
        reference = run_trajectory(first_env, seed, max_steps, episodes, vector)
        again = run_trajectory(first_env, seed, max_steps, episodes, vector)
    finally:
        first_env.close()
    second_env, _ = build_env(factory)
    try:
        fresh = run_trajectory(second_env, seed, max_steps, episodes, vector)
    finally:
        second_env.close()
    runs = [reference, again, fresh]
    # The seed must give the reference trajectory to a fresh env, then to the env that already ran.
    comparisons = (
        (fresh, f"two envs from the factory, reset with seed={seed} and given the same actions, differ", _SEED_FIX),
        (
            again,
            f"reset(seed={seed}) on an env that has already run does not restart its trajectory: it differs",
            "reseed every random source on each reset(seed=...) that passes a seed, not only on the first",
        ),
    )
    for run, failure, fix in comparisons:
        difference = first_difference(reference, run)
        if difference is not None:
            return CheckResult(SAME_SEED, CheckStatus.FAIL, f"{failure} {_where(difference)}", fix), runs
    if reference.episodes_ended == 0:
        return CheckResult(
            SAME_SEED,
            CheckStatus.WARN,
            f"identical over {counted(reference.steps, 'step')}, but no episode ended, so resets after an episode were not "
            "compared",
            "raise max_steps (--max-steps) so that episodes end within the check",
        ), runs
    return CheckResult(
        SAME_SEED, CheckStatus.PASS, f"3 runs identical over {_coverage(reference)}"
    ), runs


def check_spawned(reference: Trajectory, spawned: SpawnedRun | None) -> CheckResult:
    if spawned is None:
        return CheckResult(SAME_SEED_SPAWNED, CheckStatus.WARN,
                           "not compared: the env was not rebuilt in a spawned process (see above)")
    difference = first_difference(reference, spawned.trajectory)
    if difference is not None:
        return CheckResult(
            SAME_SEED_SPAWNED,
            CheckStatus.FAIL,
            f"the env built in a fresh spawned process, reset with the same seed and given the same actions, "
            f"differs from this process's {_where(difference)}: it depends on the process (its id, hash "
            "randomization of str/set order, global random state, module-level state)",
            "derive everything from reset(seed=...) and the actions; sort sets and dicts built from strings "
            "before iterating them",
        )
    return CheckResult(
        SAME_SEED_SPAWNED, CheckStatus.PASS, f"identical to this process's over {_coverage(reference)}"
    )
