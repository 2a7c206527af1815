"""Envs stepped the way Gymnasium's vector envs step them, for :class:`~parallel_rollouts.ParallelVectorEnv`.

A :class:`GymnasiumGroup` owns a contiguous run of single envs and writes one
vector step into row 0 of a one-step rollout storage (a column slice of it, in
shared memory when it runs inside an async worker). It follows
``gymnasium.vector.SyncVectorEnv`` step for step: the autoreset mode decides
what a step after an episode's end does, autoresets call ``reset()`` without a
seed, and the env infos are reported as ``(env_index, info)`` events in env
order, so that the main process merges them with ``VectorEnv._add_info`` in
the same order ``SyncVectorEnv`` does. A step whose envs all returned empty
infos reports ``None``: nothing is pickled on the fast path.

The per-env loop of a step (the autoreset modes included) and the storing of
rewards and end flags are the core's :class:`GymnasiumRowStepper`
(``core/rows.py``, compiled with the rest of the row code); the group builds
the failure report, stores the observations, and chooses, for ``SAME_STEP``,
where each terminal observation goes.

In ``SAME_STEP`` mode the terminal observation of an env whose episode ended
travels like the observations, through row 0 of the storage's
``final_observations``, whenever it is an array of the space's own dtype and
shape (a single-leaf space): its :class:`FinalEvent` then carries only a non-empty final
info, or is left out, and :func:`with_final_observations` puts the
``{"final_obs", "final_info"}`` event back in the main process. Episode ends then
cost no pickling either; any other terminal observation is sent in its event.

The storage's actions are typed (:mod:`~parallel_rollouts.data.typed_actions`):
each env receives a row of the array the caller passed, with the caller's
dtype, as ``SyncVectorEnv`` hands it out.

Requests other than a step arrive as tuples through :meth:`GymnasiumGroup.handle`:
``("reset", seeds, options, reset_mask)``, ``("call", name, args, kwargs)``,
``("set_attr", name, values)``, each with whole-vector arguments that the group
slices to its own envs.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import Env
from gymnasium.vector import AutoresetMode

from ..checks.factories import not_an_env
from ..checks.rounding import RoundingNotices
from ..errors import ObservationError, SpaceError, WorkerError
from ..config.layout import RolloutLayout
from ..data.spaces import SpaceLayout
from ..data.storage import RolloutStorage
from ..data.typed_actions import TypedActionReader
from .agents import is_parallel_env
from .gymnasium_base import GymnasiumGroupBase
from .requests import RaisedByEnv, answer_each
from .single_envs import describe_failure

__all__ = ["FinalEvent", "GymnasiumGroup", "build_gymnasium_group", "with_final_observations"]

InfoEvents = list  # [(global env index, info dict), ...] in env order


@dataclass(frozen=True)
class FinalEvent:
    """How an env's episode ended (``SAME_STEP``), as the group reports it: the final info, and
    the terminal observation unless ``stored`` (it is then in ``final_observations`` row 0)."""

    info: dict
    observation: Any = None
    stored: bool = False


def with_final_observations(
    events: InfoEvents | None, ended: list[int], final_leaves: list[np.ndarray], layout: SpaceLayout
) -> InfoEvents | None:
    """``events`` with the ``(index, {"final_obs", "final_info"})`` event of every env in ``ended``
    (global indices, increasing) first among that env's events: built from its :class:`FinalEvent`,
    or, where the group sent none (nothing to say but the stored observation), from
    ``final_leaves`` (row 0 of ``final_observations``, one array per leaf; copied) and an empty
    final info. Every other event (a reset info) stays as it was, in env order."""
    if not ended:
        return events
    restored: InfoEvents = []
    pending = iter(events or ())
    event = next(pending, None)
    for index in ended:
        while event is not None and event[0] < index:
            restored.append(event)
            event = next(pending, None)
        final = FinalEvent({}, stored=True)  # none sent: the observation is stored, the info empty
        if event is not None and event[0] == index and isinstance(event[1], FinalEvent):
            final = event[1]
            event = next(pending, None)
        final_info, observation = final.info, final.observation
        if final.stored:
            # Only an array is stored: `leaf[index, ...]` keeps a 0-d one an array, not a NumPy scalar.
            observation = layout.unflatten([leaf[index, ...].copy() for leaf in final_leaves])
        restored.append((index, {"final_obs": observation, "final_info": final_info}))
    while event is not None:
        restored.append(event)
        event = next(pending, None)
    return restored or None


def build_gymnasium_group(
    envs: Sequence[Env],
    env_offset: int,
    layout: RolloutLayout,
    autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP,
):
    """What an async worker calls to host the group (picklable with ``functools.partial``):
    a :class:`GymnasiumGroup` of single envs, or an
    :class:`~parallel_rollouts.groups.gymnasium_agents.AgentGymnasiumGroup` of multi-agent envs."""
    if envs and is_parallel_env(envs[0]):
        from .gymnasium_agents import AgentGymnasiumGroup

        return AgentGymnasiumGroup(envs, env_offset, layout, autoreset_mode)
    return GymnasiumGroup(envs, env_offset, layout, autoreset_mode)


class GymnasiumGroup(GymnasiumGroupBase):
    def __init__(
        self, envs: Sequence[Env], env_offset: int, layout: RolloutLayout, autoreset_mode: AutoresetMode
    ) -> None:
        for column, env in enumerate(envs):
            if not isinstance(env, Env):
                raise not_an_env(f"env_fns[{env_offset + column}]", env, vector_envs=False)
        self.envs = list(envs)
        self.env_offset = env_offset
        self.num_envs = len(self.envs)
        self.autoreset_mode = autoreset_mode
        self._observation_layout = layout.observation_layout
        self._action_layout = layout.action_layout
        self._core = layout.core
        self._autoreset = np.zeros(self.num_envs, dtype=bool)
        self._all_columns = list(range(self.num_envs))
        # A terminal observation that is an array of exactly this (single leaf's) dtype and shape
        # is stored, not sent: see with_final_observations.
        leaf = layout.observation_layout.leaves[0]
        self._final_shape = None if layout.observation_layout.is_nested else (leaf.dtype, leaf.shape)
        self._storage: RolloutStorage | None = None
        self._writers: list = []
        self._rounding = RoundingNotices(layout.observation_layout, env_offset)
        self._actions: TypedActionReader | None = None
        self._row_stepper = None  # the core's GymnasiumRowStepper, once begin() has the storage

    # -- the group interface an async worker serves ------------------------------------------

    def reset_all(self) -> None:
        """Nothing: Gymnasium envs stay unreset until the user calls ``reset()``."""

    def begin(self, storage: RolloutStorage) -> None:
        self._storage = storage
        self._writers = [
            self._core.ObservationWriter(observations, final, self._rounding.writer_hook(leaf_index))
            for leaf_index, (observations, final) in enumerate(zip(storage.observations, storage.final_observations))
        ]
        self._actions = TypedActionReader(self._action_layout, [leaf[0] for leaf in storage.actions])
        # The flags are bool storage; the core writes them as bytes through uint8 views.
        self._row_stepper = self._core.GymnasiumRowStepper(
            self.envs, self.autoreset_mode.value, self.env_offset, _weak_store_final(self), storage.rewards[0],
            storage.terminations[0].view(np.uint8), storage.truncations[0].view(np.uint8),
            self._autoreset.view(np.uint8),
        )

    def step(self, t: int, columns: Sequence[int] | None = None) -> InfoEvents | None:
        """Step every env (or those of ``columns``, this group's own column numbers) with ``storage.actions[0]``; write their columns of row 0; return the info events."""
        row_stepper = self._row_stepper
        # In column order: a row written whole takes its columns in order.
        stepped = self._all_columns if columns is None else sorted(columns)
        events = row_stepper.step(self._split_actions(self._actions.read()), stepped)
        failures = row_stepper.failures
        if failures:
            raise WorkerError.from_failures(
                [describe_failure(self.env_offset + column, "step", error) for column, error in failures]
            ) from failures[0][1]
        self._write_observations(stepped, row_stepper.observations)
        if not row_stepper.store_row():
            self._store_converted(stepped, columns is None)
        if self._rounding.pending:  # the step is complete: a warning made an error interrupts nothing
            self._rounding.say()
        return events

    # -- requests other than a step (:meth:`GymnasiumGroupBase.handle` dispatches them) --------

    def reset(self, seeds: Sequence, options: dict | None, reset_mask: np.ndarray | None) -> InfoEvents | None:
        """Reset every env (or those in the whole-vector ``reset_mask``) with the whole-vector ``seeds``."""
        seeds = self._mine(seeds)
        mask = np.ones(self.num_envs, dtype=bool) if reset_mask is None else np.asarray(self._mine(reset_mask), dtype=bool)
        columns = np.flatnonzero(mask).tolist()
        events: InfoEvents = []
        observations = []
        failures = []
        for column in columns:
            try:
                observation, info = self.envs[column].reset(seed=seeds[column], options=options)
            except Exception as error:
                failures.append((describe_failure(self.env_offset + column, "reset", error), error))
                continue
            observations.append(observation)
            if info:
                events.append((self.env_offset + column, info))
        if failures:
            raise WorkerError.from_failures([failure for failure, _ in failures]) from failures[0][1]
        self._write_observations(columns, observations)
        storage = self._storage
        storage.terminations[0, columns] = False
        storage.truncations[0, columns] = False
        self._autoreset[columns] = False
        if self._rounding.pending:
            self._rounding.say()
        return events or None

    def call(self, name: str, args: tuple, kwargs: dict) -> list | RaisedByEnv:
        def answer(env):
            attribute = env.get_wrapper_attr(name)
            return attribute(*args, **kwargs) if callable(attribute) else attribute

        return answer_each(self.envs, self._env_indices, f"call({name!r})", answer)

    def set_attr(self, name: str, values: Sequence) -> RaisedByEnv | None:
        answered = answer_each(
            list(zip(self.envs, self._mine(values))), self._env_indices, f"set_attr({name!r})",
            lambda setting: setting[0].set_wrapper_attr(name, setting[1]),
        )
        return answered if isinstance(answered, RaisedByEnv) else None

    @property
    def _env_indices(self) -> range:
        return range(self.env_offset, self.env_offset + self.num_envs)

    # -- helpers ---------------------------------------------------------------------------

    def _store_converted(self, stepped: list[int], whole_row: bool) -> None:
        """Store the last step's rewards and end flags by NumPy's conversion rules (some reward is not
        a ``float`` or some flag not a ``bool``), and set the autoreset state of their envs."""
        row_stepper, storage = self._row_stepper, self._storage
        rewards, terminations, truncations = (
            row_stepper.rewards_now, row_stepper.terminations_now, row_stepper.truncations_now
        )
        if whole_row:
            storage.rewards[0] = rewards
            storage.terminations[0] = terminations
            storage.truncations[0] = truncations
            np.logical_or(storage.terminations[0], storage.truncations[0], out=self._autoreset)
        else:
            storage.rewards[0][stepped] = rewards
            storage.terminations[0][stepped] = terminations
            storage.truncations[0][stepped] = truncations
            self._autoreset[stepped] = np.logical_or(terminations, truncations)

    def _store_final(self, column: int, observation: Any, info: dict, events: InfoEvents) -> None:
        """``SAME_STEP``: keep the terminal observation of env ``column`` (stored in row 0 of
        ``final_observations`` when it fits exactly, else sent) and its final info, as a
        :class:`FinalEvent` in ``events`` (none when stored with an empty info)."""
        if self._stores_final(observation):
            self._storage.final_observations[0][0, column] = observation
            if info:
                events.append((self.env_offset + column, FinalEvent(info, stored=True)))
        else:
            events.append((self.env_offset + column, FinalEvent(info, observation)))

    def _stores_final(self, observation: Any) -> bool:
        """Whether a terminal observation goes through ``final_observations`` (exactly storable)."""
        final = self._final_shape
        return (
            final is not None and type(observation) is np.ndarray and observation.dtype == final[0]
            and observation.dtype.isnative and observation.shape == final[1]
        )

    def _write_observations(self, columns: list[int], observations: list) -> None:
        layout = self._observation_layout
        if not layout.is_nested and len(columns) == self.num_envs:
            # The whole row at once (the compiled core's fast path); a bad shape is named below.
            bad = self._writers[0].write_rows(0, observations)
            if bad < 0:
                return
            columns, observations = columns[bad:], observations[bad:]
        for column, observation in zip(columns, observations):
            try:
                values = layout.flatten(observation)
            except SpaceError as error:
                raise ObservationError(
                    f"env {self.env_offset + column} returned an observation that does not match: {error}"
                ) from None
            for leaf_index, (writer, value) in enumerate(zip(self._writers, values)):
                if not writer.write_row(0, column, value):
                    leaf = layout.leaves[leaf_index]
                    got = np.asarray(value)
                    raise ObservationError(
                        f"env {self.env_offset + column} returned an observation of shape {got.shape!r}; "
                        f"its observation space {leaf.space!r} expects shape {leaf.shape!r}."
                    )


def _weak_store_final(group: GymnasiumGroup):
    """``group._store_final`` without a reference to ``group``: the group holds its row stepper,
    so a bound method there would make a cycle, and a vector env dropped without ``close()``
    would keep its envs and storage (a mapped shared segment, for the main process's share of
    an ``async`` one) until the next garbage collection. Called only when an episode ends in
    ``SAME_STEP`` mode."""
    group_ref = weakref.ref(group)

    def store_final(column, observation, info, events):
        return group_ref()._store_final(column, observation, info, events)

    return store_final
