"""Spaces: storable by the collector, honoured by every observation, and action sampling seeded.

The collector stores each observation into fixed-shape arrays laid out from the
declared observation space: an entry with the wrong shape is an error there,
another dtype is converted or refused by the conversion rule
(:data:`~parallel_rollouts.checks.conversion.CONVERSION_RULE`, the words this
check reports), NaN and values outside an integer space are errors, and finite
floats outside a ``Box``'s bounds are warned about (real envs overshoot them). This check reads a run's observations the same way
and says, for the first offence of each kind, where it was.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium import spaces

from ..checks.conversion import CONVERSION_RULE, conversion_effect, convert_row, explain_rejected_row
from ..errors import SpaceError
from ..data.spaces import SpaceLayout
from .report import CheckResult, CheckStatus, counted
from .target import build_env, spaces_of
from .trajectory import Trajectory, leaves_of, run_trajectory

__all__ = ["ACTION_SAMPLING", "SPACES_HONOURED", "STORABLE", "check_action_sampling", "check_spaces", "check_storable"]

STORABLE = "spaces storable"
SPACES_HONOURED = "observations in space"
ACTION_SAMPLING = "action sampling seeded"


def check_storable(env: Any, vector: bool) -> tuple[CheckResult, SpaceLayout | None]:
    observation_space, action_space = spaces_of(env, vector)
    try:
        layout = SpaceLayout(observation_space, "observation")
        SpaceLayout(action_space, "action")
    except SpaceError as error:
        return CheckResult(STORABLE, CheckStatus.FAIL, str(error).rstrip("."),
                           "change the space or wrap the env as the message says"), None
    return CheckResult(STORABLE, CheckStatus.PASS, f"observation: {counted(len(layout.leaves), 'fixed-shape leaf array')}; action: storable"), layout


class _Offences:
    """The first offence of each kind seen in a run's observations."""

    def __init__(self, layout: SpaceLayout, rows: int | None) -> None:
        self.layout = layout
        self.rows = rows  # a vector env's num_envs: each leaf has a leading row axis
        self.fail: list[str] = []
        self.warn: list[str] = []
        self.checked = 0
        self._seen: set[tuple] = set()

    def _say(self, kinds: list[str], text: str, kind: tuple = ()) -> None:
        """Keep ``text`` if it is the first offence of its ``kind`` (by default, the text itself)."""
        key = kind or (text,)
        if key not in self._seen and len(kinds) < 3:
            self._seen.add(key)
            kinds.append(text)

    def __call__(self, kind: str, observation: Any, rest: tuple) -> None:
        where = f"the {'first reset' if self.checked == 0 else f'{kind} at call {self.checked}'}"
        self.checked += 1
        try:
            values = self.layout.flatten(observation)
        except SpaceError as error:
            self._say(self.fail, f"{where}: {error}", ("structure",))
            return
        for leaf_index, value in enumerate(values):
            self._leaf(leaf_index, value, where)
        if rest:
            reward = np.asarray(rest[0])
            if reward.dtype.kind not in "biuf" or (self.rows is None and reward.shape != ()):
                self._say(self.fail, f"{where}: the reward {rest[0]!r} is not a real number", ("reward",))
            for name, flag in (("terminated", rest[1]), ("truncated", rest[2])):
                flags = np.asarray(flag)
                if flags.dtype != np.bool_ and not (flags.dtype.kind in "iu" and np.isin(flags, (0, 1)).all()):
                    self._say(self.fail, f"{where}: {name} is {flag!r}, not a bool", (name,))

    def _leaf(self, leaf_index: int, value: Any, where: str) -> None:
        leaf = self.layout.leaves[leaf_index]
        name = "" if leaf.name == "<root>" else f" at {leaf.name}"
        array = np.asarray(value)
        expected = leaf.shape if self.rows is None else (self.rows,) + leaf.shape
        if array.shape != expected:
            self._say(self.fail, f"{where}: observation{name} has shape {array.shape}, the space declares {expected}",
                      ("shape", leaf_index))
            return
        if array.dtype.kind not in "biuf":
            self._say(self.fail, f"{where}: observation{name} has dtype {array.dtype}, not a number", ("kind", leaf_index))
            return
        if array.dtype != leaf.dtype:
            # The collector's own rule decides: what it refuses fails, what it converts warns.
            if convert_row(array, expected, leaf.dtype) is None:
                self._say(self.fail, f"{where}: observation{name} cannot be stored: got "
                          f"{explain_rejected_row(array, expected, leaf.dtype)}", ("dtype", leaf_index))
                return
            self._say(self.warn, f"observation{name} has dtype {array.dtype}, the space declares {leaf.dtype}: "
                      f"{conversion_effect(array.dtype, leaf.dtype)}", ("dtype", leaf_index))
        if array.dtype.kind == "f" and np.isnan(array).any():
            self._say(self.fail, f"{where}: observation{name} holds NaN", ("nan", leaf_index))
            return
        low, high = self.layout.bounds(leaf_index)
        flat = array.reshape(-1 if self.rows is None else (self.rows, -1)).astype(np.float64)
        outside = (flat < low) | (flat > high)
        if outside.any():
            first = tuple(np.argwhere(outside)[0])
            got = array.reshape(flat.shape)[first].item()
            text = f"{where}: observation{name} holds {got!r} outside the declared bounds"
            float_box = isinstance(leaf.space, spaces.Box) and leaf.dtype.kind == "f"
            self._say(self.warn if float_box else self.fail, text, ("bounds", leaf_index))


def check_spaces(
    factory: Callable, vector: bool, layout: SpaceLayout, seed: int, max_steps: int, episodes: int
) -> tuple[CheckResult, Trajectory]:
    env, _ = build_env(factory)
    offences = _Offences(layout, int(env.num_envs) if vector else None)
    try:
        trajectory = run_trajectory(env, seed, max_steps, episodes, vector, observe=offences)
    finally:
        env.close()
    seen = counted(offences.checked, "observation")
    if offences.fail:
        return CheckResult(
            SPACES_HONOURED,
            CheckStatus.FAIL,
            "; ".join(offences.fail) + (f" (also: {'; '.join(offences.warn)})" if offences.warn else ""),
            "return observations of the declared shape and dtype, inside the space, never NaN; or declare the "
            "space the env really has",
        ), trajectory
    if offences.warn:
        return CheckResult(
            SPACES_HONOURED,
            CheckStatus.WARN,
            f"{'; '.join(offences.warn)} (of {seen}; {CONVERSION_RULE}; it also warns once per env and leaf about "
            "float bounds)",
            "declare the bounds and dtype the env really returns",
        ), trajectory
    return CheckResult(SPACES_HONOURED, CheckStatus.PASS, f"{seen}: shape, dtype, bounds, no NaN"), trajectory


def check_action_sampling(env: Any, seed: int, samples: int = 32) -> CheckResult:
    """Two copies of the action space seeded alike must sample alike (``policy=None`` relies on it)."""
    first, second = copy.deepcopy(env.action_space), copy.deepcopy(env.action_space)
    first.seed(seed)
    second.seed(seed)
    for index in range(samples):
        a, b = first.sample(), second.sample()
        if not all(np.array_equal(x, y) for x, y in zip(leaves_of(a), leaves_of(b))):
            return CheckResult(
                ACTION_SAMPLING,
                CheckStatus.FAIL,
                f"two copies of the action space, both seeded with {seed}, sampled differently at sample {index}",
                "draw samples from self.np_random in the space's sample() (a gymnasium.Space subclass does)",
            )
    return CheckResult(ACTION_SAMPLING, CheckStatus.PASS, f"{samples} samples identical for the same seed")
