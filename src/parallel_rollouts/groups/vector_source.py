"""A Gymnasium ``VectorEnv`` as a source of rollouts, stepped like an :class:`EnvGroup`.

A :class:`VectorEnvGroup` owns one vector env of ``n`` sub-envs (global indices
``env_offset .. env_offset + n - 1``) and implements the groups' one interface
(:class:`~parallel_rollouts.groups.base.RolloutGroup`): ``reset_all``, then per
rollout ``begin(storage)``, ``step(t)`` for each row, ``finish()`` (or
``abandon(t)``), and ``close()``. Every backend that hosts groups (serial,
sync, each async worker) therefore runs it unchanged. One call of the vector
env's ``step`` steps all ``n`` sub-envs; what it returned is stored, checked and
booked by one call of the core's ``VectorRowRecorder`` when every value can be
stored as it is, and by the general path below (the conversion rule, warnings,
errors naming the sub-env) otherwise, so the cost per step does not grow with a
Python loop over sub-envs.

How each autoreset mode (``metadata["autoreset_mode"]``) maps onto the batch:

``SAME_STEP``
    The vector env resets an ended sub-env within the step and returns the
    terminal observation in ``info["final_obs"]``; it goes to
    ``final_observations[t]``. Row ``t + 1`` holds the new episode's first
    observation, exactly as for env factories.
``DISABLED``
    Nothing resets on its own: after a step in which episodes ended, the group
    calls ``reset(seed=[...], options={"reset_mask": ended})`` with each ended
    sub-env's next episode seed, as :class:`EnvGroup` does for single envs.
``NEXT_STEP``
    The step after an episode's end resets that sub-env and ignores its action.
    That row is kept in the batch and marked by ``reset_steps[t, env]`` (the
    batch's ``valid`` is its negation): its observation is the terminal one, its
    reward is the vector env's (zero), and it counts in no episode's return or
    length.

Seeds: the first reset passes one episode seed per sub-env
(``reset(seed=[...])``). The sub-envs a vector env resets on its own draw from
their own generators, so episodes begun by ``NEXT_STEP`` or ``SAME_STEP``
autoresets are recorded with seed ``-1`` (unknown). A vector env whose
``reset`` takes only one int seed (``CartPoleVectorEnv``) is reset with one
seed derived from the root seed, and every episode is recorded with ``-1``;
the batch is still reproducible from the collector's seed. With
``episode_seeds="first"`` only that first reset is seeded; ``DISABLED`` resets
after it pass no seed.
"""

from __future__ import annotations

from time import perf_counter
from typing import Any

import numpy as np
from gymnasium import Env, Space
from gymnasium.vector import AutoresetMode, VectorEnv

from ..checks.conversion import convert_row, store_rows
from ..checks.env_returns import info_number
from ..errors import ObservationError, SpaceError, WorkerError
from ..config.layout import RolloutLayout
from ..checks.observations import ObservationChecker
from ..checks.rounding import RoundingNotices
from ..config.seeding import EpisodeSeeds
from ..data.spaces import SpaceLayout, check_env_spaces
from ..data.storage import RolloutStorage
from .single_envs import describe_failure, unstorable_observation
from .source_group import UNKNOWN_SEED, SourceGroup

__all__ = [
    "UNKNOWN_SEED",
    "VectorEnvGroup",
    "autoreset_mismatch",
    "autoreset_mode_of",
    "is_vector_env",
    "misdeclared_autoreset",
]

def is_vector_env(value: Any) -> bool:
    """True for a Gymnasium ``VectorEnv`` (or a wrapper of one), not for a single ``Env``."""
    return isinstance(value, VectorEnv) or (
        not isinstance(value, Env)
        and hasattr(value, "num_envs")
        and hasattr(value, "single_observation_space")
        and hasattr(value, "single_action_space")
    )


def autoreset_mode_of(vector_env: Any) -> AutoresetMode:
    """The vector env's declared autoreset mode; Gymnasium's default ``NEXT_STEP`` when it declares none."""
    mode = getattr(vector_env, "metadata", {}).get("autoreset_mode", AutoresetMode.NEXT_STEP)
    if isinstance(mode, AutoresetMode):
        return mode
    try:
        return AutoresetMode(mode)
    except ValueError:
        names = [member.value for member in AutoresetMode]
        raise SpaceError(
            f"{_describe(vector_env)} declares metadata['autoreset_mode']={mode!r}; expected a "
            f"gymnasium.vector.AutoresetMode or one of {names!r}."
        ) from None


def _describe(vector_env: Any) -> str:
    return f"the vector env {type(vector_env).__name__}"


def autoreset_mismatch(
    mode: AutoresetMode, t: int, ended: np.ndarray, ended_before: np.ndarray, info: Any, env_offset: int = 0
) -> tuple[str, str] | None:
    """Evidence that one step of a vector env contradicts its declared autoreset ``mode``, or None.

    Returns ``(mode it behaves as, what was seen)``. ``ended`` marks the sub-envs
    whose episode ended at step ``t``, ``ended_before`` those whose episode ended
    at the step before; ``env_offset`` is the global index of sub-env 0.

    Two behaviours give a mode away. A vector env that resets within the step
    puts the terminal observations in ``info["final_obs"]`` (SAME_STEP). A
    NEXT_STEP vector env spends the step after an episode's end on the reset,
    which never ends an episode; one that reports an end there did not reset.
    This is the one detector: the collector runs it on every step of a
    vector-env source, and ``check_env`` on a vector env under test.
    """
    if mode is not AutoresetMode.SAME_STEP and isinstance(info, dict) and "final_obs" in info:
        mask = np.asarray(info.get("_final_obs", ended), dtype=bool)
        columns = np.flatnonzero(mask) if mask.shape == ended.shape else np.flatnonzero(ended)
        return (
            "SAME_STEP",
            f"at step t={t} its info holds 'final_obs' for the sub-env(s) "
            f"{(env_offset + columns).tolist()!r}: it resets an ended sub-env within the step, so the "
            "observation it returned there is already the next episode's first",
        )
    if mode is AutoresetMode.NEXT_STEP:
        not_reset = ended & ended_before
        if not_reset.any():
            columns = np.flatnonzero(not_reset)
            return (
                "DISABLED",
                f"at step t={t} the sub-env(s) {(env_offset + columns).tolist()!r}, whose episodes ended "
                "at the step before, reported terminated or truncated again: a NEXT_STEP vector env resets "
                "them in this step, which ends no episode, so they were not reset",
            )
    return None


def misdeclared_autoreset(vector_env: Any, env_offset: int, seen: str, evidence: str) -> ObservationError:
    """The error for a vector env that behaves as autoreset mode ``seen`` but declares another."""
    declared = getattr(vector_env, "metadata", {}).get("autoreset_mode")
    said = (
        "declares no metadata['autoreset_mode'] (read as NEXT_STEP, Gymnasium's default)"
        if declared is None
        else f"declares autoreset_mode {autoreset_mode_of(vector_env).name}"
    )
    last = env_offset + int(vector_env.num_envs) - 1
    return ObservationError(
        f"{_describe(vector_env)} (envs {env_offset}..{last}) {said}, but it behaves as {seen}: "
        f"{evidence}. Reading it under the declared mode would store wrong terminal observations, episode "
        "lengths and reset rows. Declare the mode it implements: set metadata['autoreset_mode'] = "
        "gymnasium.vector.AutoresetMode.<MODE> on the vector env (or its class)."
    )


def check_vector_env(vector_env: Any, where: str) -> int:
    """Check what can be checked before the first reset; return ``num_envs``.

    ``where`` names the vector env in messages (e.g. ``"env_fns[1]"``).
    """
    if getattr(vector_env, "closed", False):
        raise SpaceError(f"{where} ({type(vector_env).__name__}) is closed; pass an open vector env or a factory of one.")
    num_envs = getattr(vector_env, "num_envs", None)
    if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
        raise SpaceError(f"{where} ({type(vector_env).__name__}) has num_envs={num_envs!r}; expected an int >= 1.")
    num_envs = int(num_envs)
    for role in ("observation", "action"):
        single = getattr(vector_env, f"single_{role}_space")
        batched = getattr(vector_env, f"{role}_space", None)
        if batched is None or batched is single or _same(batched, single):
            # EnvPool declares its single spaces as the batched ones too.
            continue
        single_leaves = SpaceLayout(single, role).leaves
        try:
            batched_leaves = SpaceLayout(batched, role).leaves
        except SpaceError:
            batched_leaves = ()
        expected = [((num_envs,) + leaf.shape, leaf.dtype) for leaf in single_leaves]
        got = [(leaf.shape, leaf.dtype) for leaf in batched_leaves]
        if got != expected:
            raise SpaceError(
                f"{where} ({type(vector_env).__name__}, num_envs={num_envs}) declares the {role}_space "
                f"{batched!r}, which does not batch its single_{role}_space {single!r} {num_envs} times "
                f"(expected leaf shapes and dtypes {expected!r}, got {got!r}). Check that num_envs and "
                "the spaces agree."
            )
    return num_envs


def _same(first: Space, second: Space) -> bool:
    try:
        return bool(first == second)
    except ValueError:
        return False


class VectorEnvGroup(SourceGroup):
    """One vector env, stepped into a column slice of rollout storage.

    Parameters are those of :class:`~parallel_rollouts.groups.single_envs.EnvGroup`,
    except that ``vector_env`` replaces the list of envs.
    """

    def __init__(self, vector_env: Any, env_offset: int, layout: RolloutLayout, incarnation: int = 0) -> None:
        where = f"the vector env at env {env_offset}"
        n = check_vector_env(vector_env, where)
        # Every sub-env shares the single spaces: one check names the vector env's first env.
        check_env_spaces(
            env_offset,
            vector_env.single_observation_space,
            vector_env.single_action_space,
            layout.observation_space,
            layout.action_space,
        )
        observation_layout = layout.observation_layout
        self.source = self.vector_env = vector_env
        self.env_offset = env_offset
        self.num_envs = n
        self.autoreset_mode = autoreset_mode_of(vector_env)
        self._observation_layout = observation_layout
        self._action_layout = layout.action_layout
        self._info_keys = layout.info_keys
        self._core = layout.core
        self._checker = ObservationChecker(observation_layout, layout.core, layout.observation_check, env_offset)
        self._rounding = RoundingNotices(observation_layout, env_offset)
        self._episode_seeds = [EpisodeSeeds(layout.root_seed, env_offset + column, incarnation) for column in range(n)]
        self._reseed = layout.episode_seeds == "every"
        self._episodes_started = np.zeros(n, dtype=np.int64)
        # None until the first reset shows whether reset(seed=[...]) is accepted.
        self._per_env_seeds: bool | None = None
        self._init_books()
        # NEXT_STEP: False for the sub-envs whose episode ended at the previous step,
        # so that this step is their reset step and counts in no episode. It outlives
        # a rollout, like the observations.
        self._counted = np.ones(n, dtype=bool)
        self._current_observations = observation_layout.allocate((1, n), np.zeros)
        self._rows = None
        self._final_writers: list = []

    @property
    def episodes_started(self) -> list[int]:
        """Episodes each sub-env has started with a seed of ours (its next seeded reset uses this number)."""
        return self._episodes_started.tolist()

    # -- resets ----------------------------------------------------------------------------

    def _next_seeds(self, columns: np.ndarray) -> list[int]:
        seeds = [self._episode_seeds[c].seed_of(int(self._episodes_started[c])) for c in columns.tolist()]
        self._episodes_started[columns] += 1
        return seeds

    def _reset(self, mask: np.ndarray | None) -> Any:
        """Reset every sub-env (``mask`` None) or those in ``mask``, seeding them when the env allows."""
        columns = np.arange(self.num_envs) if mask is None else np.flatnonzero(mask)
        started = perf_counter()
        try:
            return self._reset_columns(mask, columns)
        finally:
            if self._storage is not None and columns.size:  # within a rollout: its timing counts the reset
                self._storage.env_reset_seconds[0, columns] += (perf_counter() - started) / columns.size

    def _reset_columns(self, mask: np.ndarray | None, columns: np.ndarray) -> Any:
        options = None if mask is None else {"reset_mask": mask.copy()}
        env = self.vector_env
        # episode_seeds="first": only the first reset is seeded; later ones continue each sub-env's generator.
        seeded = mask is None or self._reseed
        try:
            if seeded and self._per_env_seeds is not False:
                seeds = self._next_seeds(columns)
                full = [None] * self.num_envs
                for column, seed in zip(columns.tolist(), seeds):
                    full[column] = seed
                try:
                    observations, _info = env.reset(seed=full, options=options)
                    self._per_env_seeds = True
                    self._running_seeds[columns] = seeds
                    return observations
                except Exception:
                    if self._per_env_seeds:
                        raise
                    # The first reset refused a seed list. Vector envs signal that with
                    # various exception types (Gymnasium's own Error, TypeError, errors from
                    # C++ bindings), so any of them means: one int seed only (e.g.
                    # CartPoleVectorEnv). Seed the whole vector env once from the root seed;
                    # no sub-env has a seed of its own. A reset that fails for another reason
                    # fails again below and is reported.
                    self._per_env_seeds = False
                    self._episodes_started[columns] -= 1
                    observations, _info = env.reset(seed=seeds[0], options=options)
                    self._running_seeds[columns] = UNKNOWN_SEED
                    return observations
            observations, _info = env.reset(options=options)
            self._running_seeds[columns] = UNKNOWN_SEED
            return observations
        except (ObservationError, SpaceError):
            raise
        except Exception as error:
            raise self._failure("reset" if mask is None else "autoreset", error) from error

    def reset_all(self) -> None:
        """First reset of every sub-env."""
        observations = self._reset(None)
        self._counted[:] = True
        describe = lambda column: "an observation from its first `reset` (observations row t=0)"  # noqa: E731
        leaves = self._leaves_of(observations, "reset observation")
        self._store_observations([current[0] for current in self._current_observations], leaves, None, describe)
        self._checker.check([leaf[0] for leaf in self._current_observations], None, describe)
        self._rounding.say()

    # -- one rollout -----------------------------------------------------------------------

    def _begin_rows(self, storage: RolloutStorage) -> None:
        """The compiled row of this rollout, over the episode books the rollout began."""
        # Terminal rows are copied by the compiled kernel the per-env groups use.
        self._final_writers = [
            self._core.ObservationWriter(observations, finals)
            for observations, finals in zip(storage.observations, storage.final_observations)
        ]
        # The common row (arrays the storage takes as they are, values inside the space) in one compiled call.
        self._rows = self._core.VectorRowRecorder(
            self._recorder, self._final_writers, self._checker.checked_leaves(), storage.reset_steps,
            self._counted, storage.env_step_seconds[0], self.autoreset_mode.value,
        )

    def _end_rollout(self) -> None:
        self._rows, self._final_writers = None, []
        super()._end_rollout()

    def _hosting(self) -> str:
        return f"{_describe(self.vector_env)} hosting envs {self.env_offset}..{self.env_offset + self.num_envs - 1}"

    def _step_row(self, t: int) -> None:
        storage = self._storage
        # A copy: the env may keep or change what it is given, and the storage row is the batch's.
        if self._action_layout.is_nested:
            actions = self._action_layout.unflatten([leaf[t].copy() for leaf in storage.actions])
        else:
            actions = storage.actions[0][t].copy()
        try:
            started = perf_counter()
            observations, rewards, terminations, truncations, info = self.vector_env.step(actions)
        except Exception as error:
            raise self._failure("step", error) from error
        seconds = perf_counter() - started
        mode = self.autoreset_mode
        if mode is not AutoresetMode.SAME_STEP and isinstance(info, dict) and "final_obs" in info:
            # A misdeclared mode: the general path names it.
            return self._step_general(t, observations, rewards, terminations, truncations, info, seconds)
        leaves = self._fast_leaves(observations) if self._observation_layout.is_nested else [observations]
        if leaves is None:
            return self._step_general(t, observations, rewards, terminations, truncations, info, seconds)
        n_done = self._rows.record(t, rewards, terminations, truncations, leaves, seconds)
        if n_done < 0:
            return self._step_general(t, observations, rewards, terminations, truncations, info, seconds)
        if self._info_keys or (n_done and self.autoreset_mode is not AutoresetMode.NEXT_STEP):
            # The row was checked in place, and so were the terminal rows the books copied from it.
            self._after_row(t, n_done, info, terminations | truncations, checked=True)
        return None

    def _fast_leaves(self, observations: Any) -> list | None:
        """A nested observation as one array per leaf for the compiled row, or None for the general path."""
        try:
            return list(self._observation_layout.flatten(observations))
        except Exception:
            return None

    def _step_general(
        self, t: int, observations: Any, rewards: Any, terminations: Any, truncations: Any, info: Any, seconds: float
    ) -> None:
        """One row under the general rules: conversions, warnings, and the errors that name the culprit."""
        storage = self._storage
        # Rewards and flags go straight into their rows (under the conversion rule), read back from there.
        stored_rewards = self._store_per_env(rewards, storage.rewards[t], "rewards")
        terminated = self._store_per_env(terminations, storage.terminations[t], "terminations")
        truncated = self._store_per_env(truncations, storage.truncations[t], "truncations")
        ended = terminated | truncated
        self._verify_autoreset(t, ended, info)
        describe_row = lambda column: f"an observation at step t={t} (observations row t={t + 1})"  # noqa: E731
        self._store_observations(
            [leaf[t + 1] for leaf in storage.observations], self._leaves_of(observations, "observation"), None, describe_row
        )
        # The books of the stored row, kept as for a row the fast path takes (copies: the call
        # writes the rows it is given).
        n_done = self._rows.book(t, stored_rewards.copy(), terminated.copy(), truncated.copy(), seconds)
        self._after_row(t, n_done, info, ended, checked=False)

    def _after_row(self, t: int, n_done: int, info: Any, ended: np.ndarray, checked: bool) -> None:
        """After a booked row: its infos, then the ended sub-envs by the autoreset mode. ``checked``:
        row ``t + 1`` and the terminal rows copied from it were checked against the space already."""
        mode = self.autoreset_mode
        storage = self._storage
        if self._info_keys:
            # NEXT_STEP: the reset steps (which may lack an info key) are the row's marks.
            counted = ~storage.reset_steps[t] if mode is AutoresetMode.NEXT_STEP else None
            self._store_infos(t, info, ended, counted)
        columns = self._done_columns[:n_done].copy()
        if n_done and mode is AutoresetMode.SAME_STEP:
            # The terminal observations are the info's; the books forgot the next episodes' seeds.
            self._store_same_step_finals(t, columns, info)
            self._check_finals(t, columns)
        elif n_done and mode is AutoresetMode.DISABLED:
            # The books copied the terminal observations from row t + 1; we reset the sub-envs.
            if not checked:
                self._check_finals(t, columns)
            self._reset_ended(t, columns, ended)
        # (NEXT_STEP: the terminal observations are row t + 1's own values; the vector env resets
        # the sub-envs at their next step, with seeds of its own.)
        if not checked or (n_done and mode is AutoresetMode.DISABLED):
            self._checker.check([leaf[t + 1] for leaf in storage.observations], None, lambda column: (
                f"an observation at step t={t} (observations row t={t + 1})"
            ))

    def _check_finals(self, t: int, columns: np.ndarray) -> None:
        self._checker.check(
            [leaf[t, columns] for leaf in self._storage.final_observations],
            columns,
            lambda column: f"a terminal observation at step t={t} (final_observations row t={t})",
        )

    def _reset_ended(self, t: int, columns: np.ndarray, ended: np.ndarray) -> None:
        """DISABLED: reset the sub-envs whose episode ended at step ``t`` and store their first observations."""
        storage = self._storage
        reset_observations = self._leaves_of(self._reset(ended), "reset observation")
        describe = lambda column: (  # noqa: E731
            f"an observation from the reset after its episode ended at step t={t} (observations row t={t + 1})"
        )
        blocks = [np.empty((columns.size,) + leaf.shape, leaf.dtype) for leaf in self._observation_layout.leaves]
        self._store_observations(blocks, [values[columns] for values in reset_observations], columns, describe)
        for leaf_storage, block in zip(storage.observations, blocks):
            leaf_storage[t + 1, columns] = block

    def _store_same_step_finals(self, t: int, columns: np.ndarray, info: Any) -> None:
        final = info.get("final_obs") if isinstance(info, dict) else None
        if final is None:
            raise ObservationError(
                f"{_describe(self.vector_env)} (envs {self.env_offset}..{self.env_offset + self.num_envs - 1}) "
                f"declares autoreset_mode SAME_STEP but its step info has no 'final_obs' for the ended "
                f"env(s) {(self.env_offset + columns).tolist()!r}; a SAME_STEP vector env must return the "
                "terminal observations there."
            )
        layout = self._observation_layout
        what = f"a terminal observation (info['final_obs']) at step t={t} (final_observations row t={t})"
        for column in columns.tolist():
            try:
                values = layout.flatten(final[column])
            except (SpaceError, IndexError, TypeError) as error:
                raise ObservationError(
                    f"env {self.env_offset + column} returned {what} that does not match the observation "
                    f"space: {error}"
                ) from None
            converted = self._converted_column(column, values, what)
            for finals, array in zip(self._storage.final_observations, converted):
                finals[t, column] = array

    # -- conversions and checks ------------------------------------------------------------

    def _store_per_env(self, values: Any, row: np.ndarray, name: str) -> np.ndarray:
        """Write one value per sub-env into ``row`` under the conversion rule; return ``row``.

        Rewards take any real number (as a single env's reward does); flags take
        bools, or the integers 0 and 1. Anything else (strings, a flag of 0.25)
        is refused, naming the sub-env.
        """
        if type(values) is np.ndarray and values.shape == row.shape and _takes_as_is(values.dtype, row.dtype):
            # The common case: an array whose every value the row's dtype holds unchanged.
            row[...] = values
            return row
        refused = store_rows(row, values)
        if refused < 0:
            return row
        array = _as_array(values)
        if array is None or array.shape != row.shape:
            got = f"shape {array.shape!r}" if array is not None else f"{type(values).__name__} {values!r}"
            reason = ValueError(
                f"{_describe(self.vector_env)} returned {name} as {got}; its num_envs={self.num_envs} needs "
                f"one {row.dtype} per sub-env, shape ({self.num_envs},)."
            )
        else:
            expected = "a bool (or the integer 0 or 1)" if row.dtype == np.bool_ else "a real number"
            if row.dtype == np.bool_ and array.dtype.kind == "f":
                # Every float is refused for a flag; name the first that is not even 0 or 1.
                odd = np.flatnonzero((array != 0) & (array != 1))
                refused = int(odd[0]) if odd.size else refused
            value = array[refused]
            value = value.item() if isinstance(value, np.generic) else value
            reason = TypeError(
                f"{_describe(self.vector_env)} returned {name}[{refused}] = {value!r} ({array.dtype}); "
                f"each entry of {name} must be {expected}, stored as {row.dtype} without change."
            )
        raise WorkerError.from_failures([describe_failure(self.env_offset + refused, "step", reason)])

    def _store_observations(self, targets: list, leaves: list, columns: np.ndarray | None, describe) -> None:
        """Store ``leaves[i]`` (``[k, *leaf]``) into ``targets[i]`` under the conversion rule.

        Row ``k`` belongs to group column ``columns[k]`` (``None``: column ``k``).
        Every leaf is checked before any is written, so a refused value leaves the
        targets as they were.
        """
        if all(
            values.shape == target.shape and values.dtype == target.dtype for target, values in zip(targets, leaves)
        ):
            # The common case: arrays of the storage's own dtype, stored as they are.
            for target, values in zip(targets, leaves):
                target[...] = values
            return
        layout = self._observation_layout
        for leaf_index, (target, values) in enumerate(zip(targets, leaves)):
            if convert_row(values, target.shape, target.dtype) is None:
                scratch = np.empty_like(target)
                row = max(store_rows(scratch, values), 0)
                column = row if columns is None else int(columns[row])
                raise unstorable_observation(layout, leaf_index, self.env_offset + column, values[row], describe(column))
        for leaf_index, (target, values) in enumerate(zip(targets, leaves)):
            if values.dtype != target.dtype:
                # One dtype for the whole vector env: told once for all its sub-envs.
                self._rounding.converted(leaf_index, 0, values.dtype, columns=self.num_envs)
            store_rows(target, values)

    def _verify_autoreset(self, t: int, ended: np.ndarray, info: Any) -> None:
        """Check the step against the declared autoreset mode; a mismatch is an ``ObservationError``."""
        mismatch = autoreset_mismatch(self.autoreset_mode, t, ended, ~self._counted, info, self.env_offset)
        if mismatch is not None:
            raise misdeclared_autoreset(self.vector_env, self.env_offset, *mismatch)

    def _leaves_of(self, observations: Any, what: str) -> list[np.ndarray]:
        """The batched observation as one ``[n, *leaf_shape]`` array per leaf, shapes checked."""
        layout = self._observation_layout
        try:
            values = layout.flatten(observations)
        except SpaceError as error:
            raise ObservationError(
                f"{_describe(self.vector_env)} (envs {self.env_offset}..{self.env_offset + self.num_envs - 1}) "
                f"returned a {what} that does not match: {error}"
            ) from None
        arrays = []
        for leaf_index, value in enumerate(values):
            array = np.asarray(value)
            expected = (self.num_envs,) + layout.leaves[leaf_index].shape
            if array.shape != expected:
                leaf = layout.leaves[leaf_index]
                where = f" at {leaf.name}" if layout.is_nested else ""
                raise ObservationError(
                    f"{_describe(self.vector_env)} (envs {self.env_offset}..{self.env_offset + self.num_envs - 1}) "
                    f"returned a {what}{where} of shape {array.shape!r}; with num_envs={self.num_envs} and the "
                    f"single observation space {leaf.space!r} it must have shape {expected!r}."
                )
            arrays.append(array)
        return arrays

    def _store_infos(self, t: int, info: Any, ended: np.ndarray, counted: np.ndarray | None) -> None:
        """Fill ``infos[key][t]``; a reset step may lack a key (it stays NaN), a counted step may not.

        ``counted`` is None when every step counts (no reset steps).
        """
        if not self._info_keys:
            return
        storage = self._storage
        final_info = info.get("final_info") if isinstance(info, dict) else None
        for key in self._info_keys:
            row = storage.infos[key][t]
            row[:] = np.nan
            present = self._fill_info(row, info, key, np.ones(self.num_envs, dtype=bool))
            if self.autoreset_mode is AutoresetMode.SAME_STEP and isinstance(final_info, dict):
                # The ended step's own info moved into final_info when the sub-env reset.
                present |= self._fill_info(row, final_info, key, ended)
            missing = np.flatnonzero(~present if counted is None else counted & ~present)
            if missing.size:
                column = int(missing[0])
                keys = sorted(k for k in info if not str(k).startswith("_")) if isinstance(info, dict) else info
                raise WorkerError.from_failures(
                    [
                        describe_failure(
                            self.env_offset + column,
                            "info",
                            KeyError(
                                f"info has no key {key!r} for this env (keys: {keys!r}); info_keys must name "
                                "scalar entries present on every step"
                            ),
                        )
                    ]
                )

    def _fill_info(self, row: np.ndarray, info: Any, key: str, where: np.ndarray) -> np.ndarray:
        """Store ``info[key]`` (one entry per sub-env) where its ``_key`` mask and ``where`` say; return that mask.

        The entries follow the rule of single envs (:func:`~parallel_rollouts.checks.env_returns.info_number`):
        numbers only, the same error naming the key and the sub-env.
        """
        if not isinstance(info, dict) or key not in info:
            return np.zeros(self.num_envs, dtype=bool)
        mask = np.asarray(info.get(f"_{key}", np.ones(self.num_envs, dtype=bool)), dtype=bool) & where
        values = _as_array(info[key])
        if values is None or values.shape != (self.num_envs,):
            got = f"shape {values.shape!r}" if values is not None else f"{type(info[key]).__name__}"
            raise WorkerError.from_failures(
                [
                    describe_failure(
                        self.env_offset,
                        "info",
                        TypeError(
                            f"info[{key!r}] of {_describe(self.vector_env)} has {got}; expected one number per "
                            f"sub-env, shape ({self.num_envs},)."
                        ),
                    )
                ]
            )
        if values.dtype.kind in "biuf":
            row[mask] = values[mask]
            return mask
        # Object arrays (mixed entries) and anything else: each entry the env reported, one by one.
        for column in np.flatnonzero(mask).tolist():
            try:
                row[column] = info_number(values[column], key)
            except (TypeError, ValueError) as error:
                raise WorkerError.from_failures([describe_failure(self.env_offset + column, "info", error)]) from None
        return mask


def _as_array(values: Any) -> np.ndarray | None:
    try:
        return np.asarray(values)
    except (TypeError, ValueError):
        return None


def _takes_as_is(source: np.dtype, target: np.dtype) -> bool:
    """Whether every value of ``source`` is stored unchanged as ``target`` (so no value needs a look):
    a safe cast, or float into float (rounding only, as the conversion rule allows)."""
    return source == target or np.can_cast(source, target, casting="safe") or (source.kind == target.kind == "f")
