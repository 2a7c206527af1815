"""Signs of life while a collector makes its envs, and the batch's memory said before it is allocated.

Making many envs, or slow ones, can take minutes before the first batch. The
collector logs (``logging``, logger ``"parallel_rollouts"``, level ``INFO``) a
line when it starts making many envs, a line every few seconds while it makes
them in this process (``"serial"``, ``"sync"``: "made 120,000 of 1,000,000
envs"; worker processes make theirs out of sight), and one when they are all
made, if that took a while.

Before any env is made, a collector whose batch could exceed the available
memory whatever its spaces (``num_envs x horizon`` rows of the fixed per-row
fields alone) makes one env here to read its spaces, and warns
(:mod:`.memory`) when the batch would not fit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from ..data.spaces import SpaceLayout
from ..data.storage import storage_bytes
from .memory import available_memory, warn_if_batch_too_large

__all__ = ["BuildProgress", "check_memory_before_building"]

logger = logging.getLogger("parallel_rollouts")

#: From this many factories the start of the build is announced.
MANY_ENVS = 1000
#: Seconds between progress lines, and the build time past which its end is announced.
REPORT_EVERY_SECONDS = 5.0
#: A batch whose fixed per-row fields alone take this fraction of the available memory gets its
#: spaces read from one env made up front.
PROBE_FRACTION = 0.125
#: The smallest space a leaf can have: one byte.
_SMALLEST = spaces.Box(0, 1, shape=(), dtype=np.uint8)


class BuildProgress:
    """Logs the making of a collector's envs: its start, a line every ``interval`` seconds, its end.

    When the envs are made in this process (``counted``), a daemon thread writes
    the periodic lines, so that they come whatever the build is doing (making
    envs, their first resets); it ends with :meth:`done`, which the collector
    calls on every exit path. Worker processes make theirs out of sight: their
    build gets the first and last lines only.
    """

    def __init__(self, total: int, where: str, counted: bool, interval: float | None = None) -> None:
        self.total = total
        self.where = where
        self.counted = counted
        self.made = 0
        self.interval = REPORT_EVERY_SECONDS if interval is None else interval
        self._start = time.monotonic()
        self._finished = threading.Event()
        if total >= MANY_ENVS:
            logger.info("making %s envs %s", f"{total:,}", where)
        # Only while envs are made in this process: a thread alive when workers are forked
        # (``context="fork"``) is what ``fork()`` warns against.
        self._ticker: threading.Thread | None = None
        if counted:
            self._ticker = threading.Thread(target=self._tick, name="parallel-rollouts-build-progress", daemon=True)
            self._ticker.start()

    def wrap(self, env_fns: Sequence[Callable[[], Any]]) -> list[Callable[[], Any]]:
        """Factories that count what they make here; each pickles as the factory it wraps."""
        return [_CountingFactory(env_fn, self) for env_fn in env_fns]

    def made_one(self) -> None:
        self.made += 1

    def _tick(self) -> None:
        while not self._finished.wait(self.interval):
            elapsed = time.monotonic() - self._start
            if self.made < self.total:
                logger.info("made %s of %s envs (%.0f s)", f"{self.made:,}", f"{self.total:,}", elapsed)
            else:
                logger.info("made all %s envs; starting them (%.0f s)", f"{self.total:,}", elapsed)

    def done(self, succeeded: bool = True) -> None:
        """Stop the periodic lines; log the time taken if the build was long or large."""
        self._finished.set()
        if self._ticker is not None:
            self._ticker.join(timeout=self.interval)
        elapsed = time.monotonic() - self._start
        if succeeded and (self.total >= MANY_ENVS or elapsed >= self.interval):
            logger.info("made %s envs %s in %.1f s", f"{self.total:,}", self.where, elapsed)


class _CountingFactory:
    """``env_fn``, counted by a :class:`BuildProgress`."""

    def __init__(self, env_fn: Callable[[], Any], progress: BuildProgress) -> None:
        self.env_fn = env_fn
        self.progress = progress

    def __call__(self) -> Any:
        env = self.env_fn()
        self.progress.made_one()
        return env

    def __reduce__(self) -> tuple:
        # Copies sent elsewhere (and pickled factories) are the user's factory itself.
        return _unwrapped, (self.env_fn,)

    def __repr__(self) -> str:
        return repr(self.env_fn)


def _unwrapped(env_fn: Callable[[], Any]) -> Callable[[], Any]:
    return env_fn


def check_memory_before_building(
    env_fns: Sequence[Callable[[], Any]], horizon: int, info_keys: tuple[str, ...], given_vector_env: Any = None
) -> bool:
    """Warn when one batch would not fit in memory, making at most one env; return whether it warned.

    ``given_vector_env`` is a vector env instance passed to the collector: its spaces are read
    without making anything. Otherwise one env is made only for ``MANY_ENVS`` factories or more, or
    when the batch's fixed per-row fields alone would take ``PROBE_FRACTION`` of the available memory. A factory that fails here is left
    for the collector to report.
    """
    available = available_memory()
    if available is None:
        return False
    if given_vector_env is not None:
        return _warn_for(given_vector_env, True, 1, horizon, info_keys, available)
    # The fixed per-row fields, with the smallest observation and action there are.
    fixed, _ = storage_bytes(
        SpaceLayout(_SMALLEST, "observation"), SpaceLayout(_SMALLEST, "action"), horizon, len(env_fns), info_keys
    )
    if len(env_fns) < MANY_ENVS and fixed < PROBE_FRACTION * available:
        return False
    logger.info("making one env to size the batch of %s envs", f"{len(env_fns):,}")
    try:
        env = env_fns[0]()
    except Exception:
        return False
    try:
        vector = hasattr(env, "single_observation_space") and hasattr(env, "num_envs")
        return _warn_for(env, vector, len(env_fns), horizon, info_keys, available)
    finally:
        try:
            env.close()
        except Exception:
            logger.debug("closing the env made to size the batch failed", exc_info=True)


def _warn_for(env: Any, vector: bool, factories: int, horizon: int, info_keys: tuple[str, ...], available: int) -> bool:
    try:
        if vector:
            spaces = env.single_observation_space, env.single_action_space
            num_envs = int(env.num_envs) * factories
        elif hasattr(env, "possible_agents") and callable(getattr(env, "observation_space", None)):
            # A multi-agent env: one column per agent (their shared spaces are checked later).
            agents = list(env.possible_agents)
            spaces = env.observation_space(agents[0]), env.action_space(agents[0])
            num_envs = len(agents) * factories
        else:
            spaces = env.observation_space, env.action_space
            num_envs = factories
        observation_layout = SpaceLayout(spaces[0], "observation")
        action_layout = SpaceLayout(spaces[1], "action")
    except Exception:  # spaces the collector refuses: it says why
        return False
    return warn_if_batch_too_large(
        observation_layout, action_layout, horizon, num_envs, info_keys, available, stacklevel=4
    )
