"""NumPy references of the typed kernels in ``_kernels.pyx``: same classes, same methods, same results.

The row code in ``rows.py`` calls these when it runs in the interpreter
(``core="python"``), and the tests hold each compiled kernel to its reference
here, dtype by dtype. They are written for clarity, with whole-array NumPy
operations where the compiled ones loop in C; like those, they decide nothing a
user sees (every check and message belongs to the row code or ``arguments``).
"""

from __future__ import annotations

from time import perf_counter

import numpy as np

from .arguments import bounds_operands

__all__ = ["Clock", "EpisodeBooks", "LeafBounds", "RowBytes", "VectorRowBooks", "find_out_of_bounds"]


class Clock:
    """A monotonic clock in seconds."""

    def now(self) -> float:
        return perf_counter()


def _is_exact(array, dtype: np.dtype, shape: tuple) -> bool:
    return type(array) is np.ndarray and array.dtype == dtype and array.dtype.isnative and array.shape == shape


class RowBytes:
    """The rows of one observation leaf and its ``final_observations`` (checked storage)."""

    def __init__(self, observations: np.ndarray, final_observations: np.ndarray) -> None:
        self.observations = observations
        self.final_observations = final_observations
        self.row_nbytes = int(np.prod(observations.shape[2:], dtype=np.int64)) * observations.itemsize
        self.num_envs = observations.shape[1]
        self.num_final_rows = final_observations.shape[0]
        self._row_shape = tuple(observations.shape[2:])

    def copy_exact(self, row: int, column: int, source) -> bool:
        """Copy an exact row (the storage's dtype, native order, the leaf's shape, C-contiguous); else False."""
        if not (_is_exact(source, self.observations.dtype, self._row_shape) and source.flags.c_contiguous):
            return False
        self.observations[row, column] = source
        return True

    def is_exact_block(self, source) -> bool:
        """An array ``[num_envs, *leaf]`` of the storage's dtype in native byte order (any strides)."""
        return _is_exact(source, self.observations.dtype, (self.num_envs,) + self._row_shape)

    def store_block(self, row: int, block: np.ndarray) -> int:
        self.observations[row] = block
        return 0

    def scatter(self, t: int, columns: np.ndarray, count: int) -> int:
        """Copy ``observations[t + 1, c]`` into ``final_observations[t, c]`` for ``c`` in ``columns[:count]``."""
        chosen = np.asarray(columns[:count])
        self.final_observations[t, chosen] = self.observations[t + 1, chosen]
        return 0


def _has_typed_kernel(dtype: np.dtype) -> bool:
    """Whether the compiled bounds check has a kernel for ``dtype``: native bool, 1-8 byte integers,
    float32 or float64 (not a long double, even where it has 8 bytes)."""
    if not dtype.isnative:
        return False
    if dtype.kind == "b":
        return True
    if dtype.kind in "iu":
        return dtype.itemsize in (1, 2, 4, 8)
    return dtype.type in (np.float32, np.float64)


class LeafBounds:
    """The bounds of one observation leaf and the check of its rows in place."""

    def __init__(self, rows: RowBytes, low: np.ndarray, high: np.ndarray) -> None:
        if not isinstance(rows, RowBytes):
            raise TypeError(f"`rows` must be a RowBytes; got {type(rows).__name__}.")
        self._rows = rows
        self._low = low
        self._high = high
        self.typed = _has_typed_kernel(rows.observations.dtype)

    def row_outside(self, row: int) -> bool:
        """Whether any env's values in ``observations[row]`` lie outside the bounds."""
        return find_out_of_bounds(self._rows.observations[row], self._low, self._high) >= 0

    def finals_outside(self, t: int, columns: np.ndarray, count: int) -> bool:
        """Whether any terminal observation ``final_observations[t, columns[:count]]`` lies outside."""
        chosen = np.asarray(columns[:count])
        return find_out_of_bounds(self._rows.final_observations[t][chosen], self._low, self._high) >= 0


class EpisodeBooks:
    """One step's rewards and end flags written, and the episode books kept (checked storage).

    A record returns how many episodes ended (their columns at the front of
    ``done_columns``), or -1, writing nothing, when the completed-episode
    buffers have no room for them.
    """

    def __init__(
        self, rewards, terminations, truncations, step_episode_seeds, running_returns, running_lengths,
        running_seeds, completed_returns, completed_lengths, completed_env_indices, completed_end_steps,
        completed_seeds, done_columns, env_offset: int,
    ) -> None:
        self._rewards = rewards
        self._terminations = terminations
        self._truncations = truncations
        self._step_episode_seeds = step_episode_seeds
        self._running_returns = running_returns
        self._running_lengths = running_lengths
        self._running_seeds = running_seeds
        self._completed = (completed_returns, completed_lengths, completed_env_indices, completed_end_steps, completed_seeds)
        self._done_columns = done_columns
        self._env_offset = env_offset
        self.num_envs = rewards.shape[1]
        self.completed_count = 0
        self.capacity = completed_returns.shape[0]
        self.rewards_now = np.zeros(self.num_envs, dtype=np.float64)
        self.flags_now = np.zeros(self.num_envs, dtype=np.uint8)

    def _room_for(self, ended: np.ndarray) -> bool:
        return self.completed_count + int(np.count_nonzero(ended)) <= self.capacity

    def _end_episodes(self, t: int, ended: np.ndarray) -> int:
        """Book the episodes of the columns where ``ended`` is True, in column order; return how many."""
        columns = np.flatnonzero(ended)
        n_done = columns.shape[0]
        start, stop = self.completed_count, self.completed_count + n_done
        returns, lengths, env_indices, end_steps, seeds = self._completed
        returns[start:stop] = self._running_returns[columns]
        lengths[start:stop] = self._running_lengths[columns]
        env_indices[start:stop] = self._env_offset + columns
        end_steps[start:stop] = t
        seeds[start:stop] = self._running_seeds[columns]
        self.completed_count = stop
        self._running_returns[columns] = 0.0
        self._running_lengths[columns] = 0
        self._done_columns[:n_done] = columns
        return n_done

    def record_scratch(self, t: int) -> int:
        """Record step ``t`` from ``rewards_now`` and ``flags_now`` (bit 1: terminated, bit 2: truncated)."""
        terminated = (self.flags_now & 1) != 0
        truncated = (self.flags_now & 2) != 0
        if not self._room_for(terminated | truncated):
            return -1
        self._rewards[t] = self.rewards_now
        self._terminations[t] = terminated
        self._truncations[t] = truncated
        self._step_episode_seeds[t] = self._running_seeds
        self._running_returns += self.rewards_now
        self._running_lengths += 1
        return self._end_episodes(t, terminated | truncated)

    def record_rows(self, t: int, counted) -> int:
        """Record step ``t`` from the rewards and flags already in row ``t``; a column where
        ``counted`` (``None``: all, or bool ``[num_envs]``) is False adds neither reward nor length."""
        if counted is not None and not (
            type(counted) is np.ndarray and counted.shape == (self.num_envs,) and counted.dtype == np.bool_
        ):
            raise TypeError(_bad_mask(counted, self.num_envs))
        ended = (self._terminations[t].view(np.uint8) != 0) | (self._truncations[t].view(np.uint8) != 0)
        if not self._room_for(ended):
            return -1
        self._step_episode_seeds[t] = self._running_seeds
        if counted is None:
            self._running_returns += self._rewards[t]
            self._running_lengths += 1
        else:
            counted = counted.view(np.uint8) != 0
            self._running_returns[counted] += self._rewards[t][counted]
            self._running_lengths += counted
        return self._end_episodes(t, ended)

    def forget_seeds(self, count: int) -> int:
        """The seeds of the next episodes of ``done_columns[:count]`` are unknown (-1)."""
        self._running_seeds[self._done_columns[:count]] = -1
        return 0


def _bad_mask(counted, num_envs: int) -> str:
    """The message for a row mask that is not a bool ``[num_envs]`` array."""
    return (
        f"`counted` must be None or a bool array of shape ({num_envs},); got "
        f"{type(counted).__name__} {getattr(counted, 'dtype', '')} {getattr(counted, 'shape', '')}".rstrip() + "."
    )


def _is_vector(values, length: int, dtype) -> bool:
    """A C-contiguous native 1-D array of ``length`` entries of ``dtype``."""
    return (
        type(values) is np.ndarray
        and values.shape == (length,)
        and values.dtype == dtype
        and values.dtype.isnative
        and values.flags.c_contiguous
    )


class VectorRowBooks:
    """The books of the rows a vector env returns, written straight from its arrays.

    ``counted`` is the source's mask of the row being booked, owned by the caller:
    a column where it is False took a step that belongs to no episode, is marked
    in ``reset_steps`` and adds neither reward nor length.
    """

    def __init__(self, books: EpisodeBooks, reset_steps, counted, step_seconds) -> None:
        if not isinstance(books, EpisodeBooks):
            raise TypeError(f"`books` must be an EpisodeBooks; got {type(books).__name__}.")
        self._books = books
        self._reset_steps = reset_steps
        self._counted = counted
        self._step_seconds = step_seconds
        self._num_envs = books.num_envs

    def reward_kind(self, rewards, terminations, truncations) -> int:
        """1 (float64 rewards) or 2 (float32) when both flags are contiguous native bool vectors and
        the rewards such a float vector, one entry per env; 0 otherwise."""
        n = self._num_envs
        if not (_is_vector(terminations, n, np.bool_) and _is_vector(truncations, n, np.bool_)):
            return 0
        if _is_vector(rewards, n, np.float64):
            return 1
        return 2 if _is_vector(rewards, n, np.float32) else 0

    @staticmethod
    def _ended(terminations, truncations) -> np.ndarray:
        # As NumPy's own True: a bool array may hold another nonzero byte (a view of uint8 data).
        return (terminations.view(np.uint8) != 0) | (truncations.view(np.uint8) != 0)

    def ended_uncounted(self, terminations, truncations) -> bool:
        """Whether a column reports an end in a row the mask does not count."""
        return bool((self._ended(terminations, truncations) & ~(self._counted.view(np.uint8) != 0)).any())

    def room_for(self, terminations, truncations) -> bool:
        """Whether the completed-episode buffers hold this row's ended episodes."""
        return self._books._room_for(self._ended(terminations, truncations))

    def book(self, t: int, rewards, terminations, truncations, share: float) -> int:
        """Write row ``t``'s rewards, flags, seeds and ``reset_steps``, add ``share`` seconds to each
        env, and book the ended episodes; return how many ended."""
        books = self._books
        ended = self._ended(terminations, truncations)
        books._rewards[t] = rewards
        books._terminations[t] = terminations.view(np.uint8) != 0
        books._truncations[t] = truncations.view(np.uint8) != 0
        books._step_episode_seeds[t] = books._running_seeds
        counted = self._counted.view(np.uint8) != 0
        self._reset_steps[t] = ~counted
        books._running_returns[counted] += books._rewards[t][counted]
        books._running_lengths += counted
        if self._step_seconds is not None:
            self._step_seconds += share
        return books._end_episodes(t, ended)

    def count_unended(self, terminations, truncations) -> int:
        """Set the mask to the columns whose flags report no end (flags checked by ``reward_kind``)."""
        self._counted[:] = ~self._ended(terminations, truncations)
        return 0


def find_out_of_bounds(values, low, high) -> int:
    """Index of the first row of ``values`` with an element outside ``[low, high]``, or -1.

    ``values`` has shape ``[rows, *leaf_shape]`` and any integer, float or bool
    dtype; ``low`` and ``high`` are the leaf's inclusive bounds as flat float64
    arrays of ``prod(leaf_shape)`` elements. Comparisons are made in float64.
    NaN is outside any bounds.
    """
    flat, low_flat, high_flat = bounds_operands(values, low, high)
    if flat.size == 0:
        return -1
    as_double = flat.astype(np.float64)
    inside = (as_double >= low_flat) & (as_double <= high_flat)
    outside_rows = np.flatnonzero(~inside.all(axis=1))
    return int(outside_rows[0]) if outside_rows.size else -1
