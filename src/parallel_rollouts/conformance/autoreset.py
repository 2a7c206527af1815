"""For a vector env: the autoreset mode it declares is the one it implements.

The collector reads a vector env's steps under its declared
``metadata["autoreset_mode"]``; read under the wrong mode, terminal observations,
episode lengths and reset rows come out wrong. This steps the vector env with
seeded random actions and runs the collector's own detector
(:func:`~parallel_rollouts.groups.vector_source.autoreset_mismatch`) on every step.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from ..errors import SpaceError
from ..groups.vector_source import autoreset_mismatch, autoreset_mode_of, misdeclared_autoreset
from .report import CheckResult, CheckStatus, counted
from .trajectory import reset_env

__all__ = ["AUTORESET", "check_autoreset_mode"]

AUTORESET = "autoreset mode as declared"


def check_autoreset_mode(env: Any, seed: int, max_steps: int, episodes: int) -> CheckResult:
    """Step ``env`` (a vector env, already built) until ``episodes`` episodes ended and two more steps ran."""
    try:
        mode = autoreset_mode_of(env)
    except SpaceError as error:
        return CheckResult(AUTORESET, CheckStatus.FAIL, str(error), "declare a gymnasium.vector.AutoresetMode")
    env.action_space.seed(seed)
    reset_env(env, seed)
    ended_before = np.zeros(int(env.num_envs), dtype=bool)
    ends = 0
    steps_after = 0
    for t in range(max_steps):
        _observation, _reward, terminated, truncated, info = env.step(env.action_space.sample())
        ended = np.asarray(terminated, dtype=bool) | np.asarray(truncated, dtype=bool)
        mismatch = autoreset_mismatch(mode, t, ended, ended_before, info)
        if mismatch is not None:
            return CheckResult(
                AUTORESET,
                CheckStatus.FAIL,
                str(misdeclared_autoreset(env, 0, *mismatch)),
                f"set metadata['autoreset_mode'] = gymnasium.vector.AutoresetMode.{mismatch[0]} on the vector env",
            )
        if mode is AutoresetMode.DISABLED and ended.any():
            reset_env(env, options={"reset_mask": ended})
        ends += int(ended.sum())
        ended_before = ended
        if ends >= episodes:
            steps_after += 1
            if steps_after > 2:  # the steps after an end are where a mode gives itself away
                break
    if ends == 0:
        return CheckResult(
            AUTORESET,
            CheckStatus.WARN,
            f"declares {mode.name}; no episode ended within {max_steps} steps, so the autoreset was not observed",
            "raise max_steps (--max-steps) so that episodes end within the check",
        )
    return CheckResult(AUTORESET, CheckStatus.PASS, f"declares {mode.name} and behaves so over {counted(ends, 'episode end')}")
