"""Columns and envs: which env (and, for a multi-agent env, which agent) each batch column holds.

A batch is ``[time, column, ...]``. A single env, and each sub-env of a Gymnasium vector env, is
one column: there a column *is* an env, and the names that say "env" (``num_envs``,
``episode_env_indices``, ``lost_env_indices``) are right. A PettingZoo env spans one column per
agent: there those names would count or index columns while saying envs, so reading them warns
and names the column names (``num_columns``, ``episode_columns``, ``lost_columns``) and the map
from a column to its env and agent (``column_envs``, ``column_agents``). They keep the values
they always had: code written for one kind of source reads the same numbers.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

__all__ = ["column_env_indices", "warn_env_name_holds_columns"]


def column_env_indices(column_envs: Sequence[int], num_columns: int) -> np.ndarray:
    """``[N]`` int64: the env (numbered from 0) of each column. ``column_envs`` is the layout's map,
    empty when no env is multi-agent: each column is then its own env."""
    if len(column_envs):
        return np.asarray(column_envs, dtype=np.int64)
    return np.arange(num_columns, dtype=np.int64)


def warn_env_name_holds_columns(owner: str, old: str, new: str, column_envs: np.ndarray, stacklevel: int = 3) -> None:
    """Say, for a source of multi-agent envs, that ``owner.old`` holds columns and is read as ``owner.new``."""
    num_columns = len(column_envs)
    num_envs = int(column_envs[-1]) + 1 if num_columns else 0
    holds = "counts columns" if old.startswith("num_") else "holds column indices"
    warnings.warn(
        f"`{owner}.{old}` {holds}, not envs, with multi-agent envs ({num_columns} columns here: one per agent of "
        f"{num_envs} env{'' if num_envs == 1 else 's'}); reading it under that name is deprecated. Read `{owner}.{new}`, which holds the same "
        f"values, and `{owner}.column_envs` / `{owner}.column_agents` for each column's env and agent.",
        FutureWarning,
        stacklevel=stacklevel,
    )
