"""Argument checks of the row code (``rows.py``), so that its two builds accept and reject exactly the same inputs.

The compiled build runs with bounds checks compiled out: it and its kernels trust
the arrays they were built with. These checks, run once when a writer or recorder is built, make
that trust safe: every array has the dtype the kernels assume, and every index
the kernels can reach lies inside every array they touch.

Every refusal of either build comes from here, the type checks of the
arguments included, so that both raise the same exception with the same
message for the same bad input. The row code tests only the common case
itself (an ``int`` in range, an exact ``list``) and hands anything else to the
function here that decides it.
"""

from __future__ import annotations

import numbers
import operator
from typing import Any

import numpy as np

__all__ = [
    "bounds_operands",
    "check_counted",
    "check_done_columns",
    "check_observation_storage",
    "check_row_stepper_arguments",
    "check_step_lists",
    "check_step_storage",
    "check_stepper_arguments",
    "check_vector_row_arguments",
    "count_argument",
    "env_offset_argument",
    "index_argument",
    "refuse_full_buffers",
    "refuse_returning_hook",
    "refuse_vector_row",
    "require_instance",
    "require_instances",
    "require_list",
    "require_tuple",
    "seconds_argument",
]

#: The largest index either core takes: the compiled one keeps indices as C ``Py_ssize_t``.
MAX_INDEX = 2**63 - 1


def _integer(value: Any, field: str) -> int:
    """``value`` as a Python int (``operator.index``: ints, bools, NumPy integers), else TypeError."""
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"`{field}` must be an integer; got {type(value).__name__} {value!r}.") from None


def index_argument(value: Any, stop: int, field: str) -> int:
    """``value`` as an index in ``[0, stop)``: TypeError for a non-integer, IndexError outside.

    ``field`` names the index in the message ("time step", "row", "column").
    """
    index = _integer(value, field)
    if not 0 <= index < stop:
        raise IndexError(f"{field} {index} is outside [0, {stop}).")
    return index


def count_argument(value: Any, stop: int) -> int:
    """``count`` of ``scatter_final``: an integer in ``[0, stop]``."""
    count = _integer(value, "count")
    if not 0 <= count <= stop:
        raise ValueError(f"count {count} is outside [0, {stop}].")
    return count


def env_offset_argument(value: Any) -> int:
    """``env_offset`` of a ``StepRecorder``: the global index of its first env, a non-negative integer."""
    offset = _integer(value, "env_offset")
    if not 0 <= offset <= MAX_INDEX:
        raise ValueError(f"`env_offset` must be in [0, {MAX_INDEX}]; got {offset!r}.")
    return offset


def refuse_full_buffers(capacity: int) -> None:
    """Raise: this step's episodes do not fit in the ``capacity`` slots of the completed-episode buffers."""
    raise ValueError(f"completed-episode buffers are full ({capacity} slots).")


def refuse_vector_row(num_envs: int) -> None:
    """Raise: a stored vector-env row to book is not its rewards and flags as the storage holds them."""
    raise TypeError(
        f"`rewards` must be a contiguous float64 array of shape ({num_envs},) and `terminations` and "
        f"`truncations` contiguous bool arrays of that shape (the values stored in the row)."
    )


def refuse_returning_hook(name: str) -> None:
    """Raise: ``hooks.<name>`` returned, where it must raise."""
    raise RuntimeError(f"`hooks.{name}` returned; it must raise.")


def seconds_argument(value: Any) -> float:
    """``seconds`` a vector env's ``step`` took: a real number (int, float, NumPy scalar)."""
    if not isinstance(value, numbers.Real):
        raise TypeError(f"`seconds` must be a real number; got {type(value).__name__} {value!r}.")
    return float(value)


def require_list(value: Any, field: str) -> list:
    """An exact ``list`` (not a tuple, an array or a subclass): the cores index it as one."""
    if type(value) is not list:
        raise TypeError(f"`{field}` must be a list; got {type(value).__name__}.")
    return value


def require_tuple(value: Any, field: str) -> tuple:
    """An exact ``tuple``."""
    if type(value) is not tuple:
        raise TypeError(f"`{field}` must be a tuple; got {type(value).__name__}.")
    return value


def require_instance(value: Any, kind: type, field: str) -> Any:
    """An instance of ``kind`` (the calling core's own class)."""
    if not isinstance(value, kind):
        raise TypeError(f"`{field}` must be an instance of {kind.__name__}; got {type(value).__name__}.")
    return value


def require_instances(values: list, kind: type, field: str) -> None:
    """A list of instances of ``kind``."""
    require_list(values, field)
    for value in values:
        if not isinstance(value, kind):
            raise TypeError(f"`{field}` must hold {kind.__name__} objects; got {type(value).__name__}.")


def bounds_operands(values: Any, low: Any, high: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``find_out_of_bounds``'s operands checked: ``values`` as ``[rows, elements]``, flat float64 bounds.

    Raises ValueError for values without a row axis or bounds of another length than a row,
    TypeError for a dtype no bounds check exists for (only bool, integers and floats have one).
    """
    array = np.asarray(values)
    if array.ndim == 0:
        raise ValueError("`values` must have a leading row axis.")
    rows = array.shape[0]
    elements = int(np.prod(array.shape[1:], dtype=np.int64))
    flat = array.reshape(rows, elements)
    low_flat = np.ascontiguousarray(low, dtype=np.float64).reshape(-1)
    high_flat = np.ascontiguousarray(high, dtype=np.float64).reshape(-1)
    if low_flat.shape[0] != elements or high_flat.shape[0] != elements:
        raise ValueError(
            f"bounds cover {low_flat.shape[0]}/{high_flat.shape[0]} elements; each row has {elements}."
        )
    if flat.dtype.kind not in "biuf":
        raise TypeError(f"unsupported dtype {flat.dtype} for a bounds check.")
    return flat, low_flat, high_flat


def _require_array(value: Any, field: str, dtype: type, ndim: int, writeable: bool = True) -> np.ndarray:
    if type(value) is not np.ndarray:
        raise TypeError(f"`{field}` must be a numpy.ndarray; got {type(value).__name__}.")
    if value.dtype != np.dtype(dtype):
        raise ValueError(f"`{field}` must have dtype {np.dtype(dtype)}; got {value.dtype}.")
    if value.ndim != ndim:
        raise ValueError(f"`{field}` must have {ndim} dimension(s); got shape {value.shape!r}.")
    if writeable and not value.flags.writeable:
        raise ValueError(f"`{field}` must be writeable.")
    return value


def _check_leaf_contiguous(storage: np.ndarray, field: str) -> None:
    """Raise unless the axes after ``[rows, env]`` of ``storage`` are C-contiguous."""
    expected_stride = storage.itemsize
    for axis in range(storage.ndim - 1, 1, -1):
        if storage.size and storage.shape[axis] > 1 and storage.strides[axis] != expected_stride:
            raise ValueError(
                f"`{field}` must store each env's row contiguously; got strides {storage.strides!r}."
            )
        expected_stride *= storage.shape[axis]


def check_observation_storage(observations: Any, final_observations: Any) -> None:
    """Storage for one observation leaf: ``[rows, env, ...]`` and ``[rows - 1 or fewer, env, ...]``."""
    for field, array in (("observations", observations), ("final_observations", final_observations)):
        if type(array) is not np.ndarray:
            raise TypeError(f"`{field}` must be a numpy.ndarray; got {type(array).__name__}.")
        if array.ndim < 2:
            raise ValueError(
                f"`{field}` must have at least 2 dimensions [rows, envs, ...]; got shape {array.shape!r}."
            )
        if not array.flags.writeable:
            raise ValueError(f"`{field}` must be writeable.")
    if observations.dtype != final_observations.dtype:
        raise ValueError(
            f"`observations` and `final_observations` must share a dtype; got "
            f"{observations.dtype!r} and {final_observations.dtype!r}."
        )
    if observations.shape[1:] != final_observations.shape[1:]:
        raise ValueError(
            f"`observations` and `final_observations` must agree past the time axis; got "
            f"shapes {observations.shape!r} and {final_observations.shape!r}."
        )
    # scatter_final(t) reads observations[t + 1] for every t < len(final_observations).
    if final_observations.shape[0] > observations.shape[0] - 1 and final_observations.shape[0] > 0:
        raise ValueError(
            f"`final_observations` has {final_observations.shape[0]} rows; `observations` must have "
            f"at least one more, got {observations.shape[0]}."
        )
    _check_leaf_contiguous(observations, "observations")
    _check_leaf_contiguous(final_observations, "final_observations")


def check_step_storage(
    rewards: Any,
    terminations: Any,
    truncations: Any,
    step_episode_seeds: Any,
    running_returns: Any,
    running_lengths: Any,
    running_seeds: Any,
    completed_returns: Any,
    completed_lengths: Any,
    completed_env_indices: Any,
    completed_end_steps: Any,
    completed_seeds: Any,
    done_columns: Any,
) -> None:
    """The arrays a step recorder writes: ``[T, N]`` rows, ``[N]`` books, equal-length episode buffers."""
    rewards = _require_array(rewards, "rewards", np.float64, 2)
    steps = rewards.shape
    for field, value, dtype in (
        ("terminations", terminations, np.bool_),
        ("truncations", truncations, np.bool_),
        ("step_episode_seeds", step_episode_seeds, np.int64),
    ):
        if _require_array(value, field, dtype, 2).shape != steps:
            raise ValueError(f"`{field}` has shape {value.shape!r}; `rewards` has {steps!r}.")
    for field, value, dtype in (
        ("running_returns", running_returns, np.float64),
        ("running_lengths", running_lengths, np.int64),
        ("running_seeds", running_seeds, np.int64),
    ):
        if _require_array(value, field, dtype, 1).shape[0] != steps[1]:
            raise ValueError(f"`{field}` covers {value.shape[0]} envs; `rewards` covers {steps[1]}.")
    capacity = _require_array(completed_returns, "completed_returns", np.float64, 1).shape[0]
    for field, value in (
        ("completed_lengths", completed_lengths),
        ("completed_env_indices", completed_env_indices),
        ("completed_end_steps", completed_end_steps),
        ("completed_seeds", completed_seeds),
    ):
        if _require_array(value, field, np.int64, 1).shape[0] != capacity:
            raise ValueError(f"`{field}` has {value.shape[0]} slots; `completed_returns` has {capacity}.")
    check_done_columns(done_columns, steps[1])


def check_done_columns(done_columns: Any, num_envs: int) -> None:
    """``done_columns``: a writeable int64 vector with room for every env."""
    _require_array(done_columns, "done_columns", np.int64, 1)
    if done_columns.shape[0] < num_envs:
        raise ValueError(
            f"`done_columns` has room for {done_columns.shape[0]} envs; expected {num_envs}."
        )


_BOOL = np.dtype(np.bool_)


def check_counted(counted: Any, num_envs: int) -> None:
    """``counted``: a bool vector of one entry per env (only read)."""
    # Checked on every row a source books under its mask: the common answer first, in a few compares.
    if type(counted) is np.ndarray and counted.dtype == _BOOL and counted.shape == (num_envs,):
        return
    _require_array(counted, "counted", np.bool_, 1, writeable=False)
    if counted.shape[0] != num_envs:
        raise ValueError(f"`counted` has {counted.shape[0]} entries; expected {num_envs}.")


def check_step_lists(num_envs: int, **lists: Any) -> None:
    """One step's per-env inputs: lists (not tuples or arrays) of one entry per env."""
    for field, values in lists.items():
        if type(values) is not list:
            raise TypeError(f"`{field}` must be a list; got {type(values).__name__}.")
        if len(values) != num_envs:
            raise ValueError(f"`{field}` has {len(values)} entries; expected {num_envs}.")


def check_stepper_arguments(
    envs: list,
    writer_shapes: list[tuple[int, int]],
    recorder_shape: tuple[int, int],
    flatten: Any,
    info_keys: tuple,
    info_storage: list,
    step_seconds: Any = None,
) -> None:
    """An env stepper's parts agree: one writer per leaf over ``horizon + 1`` rows of the same envs."""
    horizon, num_envs = recorder_shape
    if len(envs) != num_envs:
        raise ValueError(f"`envs` has {len(envs)} entries; the recorder covers {num_envs} envs.")
    if not writer_shapes:
        raise ValueError("`writers` must hold one ObservationWriter per observation leaf; got none.")
    for index, (rows, writer_envs) in enumerate(writer_shapes):
        if writer_envs != num_envs or rows < horizon + 1:
            raise ValueError(
                f"`writers[{index}]` covers {rows} rows of {writer_envs} envs; expected at least "
                f"{horizon + 1} rows of {num_envs}."
            )
    if flatten is None and len(writer_shapes) != 1:
        raise ValueError(f"`flatten` is needed to split observations over {len(writer_shapes)} leaves.")
    if flatten is not None and not callable(flatten):
        raise TypeError(f"`flatten` must be callable or None; got {flatten!r}.")
    if not all(isinstance(key, str) for key in info_keys) or len(info_storage) != len(info_keys):
        raise ValueError("`info_keys` must be strings, with one `info_storage` array each.")
    for key, array in zip(info_keys, info_storage):
        if _require_array(array, f"info_storage[{key!r}]", np.float64, 2).shape != (horizon, num_envs):
            raise ValueError(f"`info_storage[{key!r}]` has shape {array.shape!r}; expected {(horizon, num_envs)!r}.")
    if step_seconds is not None:
        seconds = _require_array(step_seconds, "step_seconds", np.float64, 1)
        if seconds.shape != (num_envs,) or not seconds.flags.c_contiguous:
            raise ValueError(f"`step_seconds` must be a contiguous [{num_envs}] float64 array; got shape {seconds.shape!r}.")


ROW_STEPPER_HOOKS = ("step_failed", "rows_outside", "finals_outside", "reset_unwritable", "reset_failed")


def check_row_stepper_arguments(
    step_shape: tuple[int, int],
    action_leaves: Any,
    split_nested: Any,
    seed_table: Any,
    running_seeds: Any,
    checked_leaves: Any,
    observation_leaves: list[np.ndarray],
    hooks: Any,
    reset_seconds: Any = None,
) -> None:
    """What ``RowStepper`` needs, checked once: every later step trusts it."""
    horizon, num_envs = step_shape
    if reset_seconds is not None:
        seconds = _require_array(reset_seconds, "reset_seconds", np.float64, 1)
        if seconds.shape != (num_envs,) or not seconds.flags.c_contiguous:
            raise ValueError(f"`reset_seconds` must be a contiguous [{num_envs}] float64 array; got shape {seconds.shape!r}.")
    if type(action_leaves) is not list or not action_leaves:
        raise TypeError(f"`action_leaves` must be a non-empty list of arrays; got {action_leaves!r}.")
    for index, leaf in enumerate(action_leaves):
        if type(leaf) is not np.ndarray or leaf.ndim < 2 or leaf.shape[0] < horizon or leaf.shape[1] != num_envs:
            raise ValueError(
                f"`action_leaves[{index}]` must be an array [>= {horizon} rows, {num_envs} envs, ...]; got "
                f"{getattr(leaf, 'shape', type(leaf).__name__)!r}."
            )
    if split_nested is None:
        if len(action_leaves) != 1:
            raise ValueError(f"{len(action_leaves)} action leaves need `split_nested`; got None.")
    elif not callable(split_nested):
        raise TypeError(f"`split_nested` must be None or callable; got {type(split_nested).__name__}.")
    if seed_table is not None:  # None: resets without a seed
        _check_seed_table(seed_table, num_envs)
    if _require_array(running_seeds, "running_seeds", np.int64, 1).shape != (num_envs,):
        raise ValueError(f"`running_seeds` must have shape ({num_envs},); got {running_seeds.shape!r}.")
    _check_checked_leaves(checked_leaves, observation_leaves)
    missing = [name for name in ROW_STEPPER_HOOKS if not callable(getattr(hooks, name, None))]
    if missing:
        raise TypeError(f"`hooks` lacks the methods {missing!r}.")


def _check_checked_leaves(checked_leaves: Any, observation_leaves: list[np.ndarray]) -> None:
    """``(leaf_index, low, high)`` entries: flat float64 bounds of each checked leaf's row."""
    if type(checked_leaves) is not list:
        raise TypeError(f"`checked_leaves` must be a list; got {type(checked_leaves).__name__}.")
    for entry in checked_leaves:
        if type(entry) is not tuple or len(entry) != 3 or not isinstance(entry[0], int):
            raise TypeError(f"`checked_leaves` entries must be (leaf_index, low, high); got {entry!r}.")
        leaf_index, low, high = entry
        if not 0 <= leaf_index < len(observation_leaves):
            raise IndexError(f"checked leaf {leaf_index} is outside [0, {len(observation_leaves)}).")
        elements = int(np.prod(observation_leaves[leaf_index].shape[2:]))
        for field, bounds in (("low", low), ("high", high)):
            if _require_array(bounds, field, np.float64, 1, writeable=False).shape != (elements,) or not bounds.flags.c_contiguous:
                raise ValueError(
                    f"`{field}` of checked leaf {leaf_index} must be C-contiguous float64 of {elements} elements; "
                    f"got shape {bounds.shape!r}."
                )
        if observation_leaves[leaf_index].dtype.kind not in "biuf":
            raise TypeError(f"checked leaf {leaf_index} has dtype {observation_leaves[leaf_index].dtype}; no bounds check for it.")


VECTOR_AUTORESET_MODES = ("NextStep", "SameStep", "Disabled")


def check_vector_row_arguments(
    step_shape: tuple[int, int],
    observation_leaves: list[np.ndarray],
    final_rows: list[int],
    checked_leaves: Any,
    reset_steps: Any,
    counted: Any,
    step_seconds: Any,
    autoreset_mode: Any,
) -> None:
    """What ``VectorRowRecorder`` needs, checked once: every later row trusts it."""
    horizon, num_envs = step_shape
    if not observation_leaves:
        raise ValueError("`writers` must hold one ObservationWriter per observation leaf; got none.")
    for index, (leaf, finals) in enumerate(zip(observation_leaves, final_rows)):
        if leaf.shape[0] < horizon + 1 or leaf.shape[1] != num_envs or finals < horizon:
            raise ValueError(
                f"writer {index} covers {leaf.shape[0]} rows ({finals} final rows) of {leaf.shape[1]} envs; "
                f"the recorder needs {horizon + 1} rows ({horizon} final rows) of {num_envs} envs."
            )
    _check_checked_leaves(checked_leaves, observation_leaves)
    steps = _require_array(reset_steps, "reset_steps", np.bool_, 2)
    if steps.shape[0] < horizon or steps.shape[1] != num_envs:
        raise ValueError(f"`reset_steps` must have shape [>= {horizon}, {num_envs}]; got {steps.shape!r}.")
    flags = _require_array(counted, "counted", np.bool_, 1)
    if flags.shape != (num_envs,) or not flags.flags.c_contiguous:
        raise ValueError(f"`counted` must be a contiguous [{num_envs}] bool array; got shape {flags.shape!r}.")
    if step_seconds is not None and _require_array(step_seconds, "step_seconds", np.float64, 1).shape != (num_envs,):
        raise ValueError(f"`step_seconds` must have shape ({num_envs},); got {step_seconds.shape!r}.")
    if autoreset_mode not in VECTOR_AUTORESET_MODES:
        raise ValueError(f"`autoreset_mode` must be one of {VECTOR_AUTORESET_MODES!r}; got {autoreset_mode!r}.")


def _check_seed_table(seed_table: Any, num_envs: int) -> None:
    seeds = getattr(seed_table, "seeds", None)
    _require_array(seeds, "seed_table.seeds", np.int64, 2)
    if seeds.shape[0] != num_envs or seeds.shape[1] < 1 or not seeds.flags.c_contiguous:
        raise ValueError(f"`seed_table.seeds` must be a C-contiguous [{num_envs}, block] array; got {seeds.shape!r}.")
    for field in ("blocks", "episodes_started"):
        array = _require_array(getattr(seed_table, field, None), f"seed_table.{field}", np.int64, 1)
        if array.shape != (num_envs,):
            raise ValueError(f"`seed_table.{field}` must have shape ({num_envs},); got {array.shape!r}.")
    if not callable(getattr(seed_table, "fill", None)):
        raise TypeError("`seed_table` must have a `fill(column, block)` method.")
