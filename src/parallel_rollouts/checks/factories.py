"""What an env factory must return: the one refusal of anything that is not an env.

Every place that calls a user's factory (the groups of every backend, Ray actors, the
vector env and Stable-Baselines3 front doors, the conformance checker) refuses a non-env
with this message, so the same mistake reads the same from each front door.
"""

from __future__ import annotations

from typing import Any

from ..errors import SpaceError

__all__ = ["not_an_env"]


def not_an_env(factory: str, returned: Any, *, vector_envs: bool) -> SpaceError:
    """The error for ``factory`` (``"env_fns[3]"``) having returned ``returned``, which is not an env.

    ``vector_envs``: whether the caller also takes a factory returning a Gymnasium vector env
    or a PettingZoo ``ParallelEnv`` (the collector does).
    """
    expected = (
        "a gymnasium.Env, a gymnasium.vector.VectorEnv or a PettingZoo ParallelEnv"
        if vector_envs
        else "a gymnasium.Env (single envs only here)"
    )
    if not vector_envs and hasattr(returned, "possible_agents"):
        return SpaceError(
            f"{factory} returned the multi-agent env {type(returned).__name__}, not {expected}. Multi-agent "
            "(PettingZoo parallel) envs are taken by ParallelRolloutCollector, make_collector and ParallelVectorEnv, "
            "one column per agent (see docs/multi-agent.md)."
        )
    return SpaceError(
        f"{factory} returned {type(returned).__name__}, not {expected}; an env factory must return one "
        "(wrap an old Gym env with shimmy first)."
    )
