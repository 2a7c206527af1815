"""The row code's two builds, compiled (``_core``, typed kernels) and interpreted (``rows``, NumPy
kernels): same names, same results, bit for bit."""

import inspect
import itertools
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from parallel_rollouts.core import _core as compiled
from parallel_rollouts.core import _kernels as compiled_kernels
from parallel_rollouts.core import kernels as python_kernels
from parallel_rollouts.core import rows as python_core
from parallel_rollouts.config.seeding import EpisodeSeedTable, episode_seed

DTYPES = [
    np.uint8, np.int8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64,
    np.float16, np.float32, np.float64, np.bool_,
]
CORES = [compiled, python_core]


def _outcome(call):
    """What ``call()`` did: ``("returned", value)``, or the exception's type and message."""
    try:
        return ("returned", call())
    except Exception as error:  # the outcome under test, compared whole
        return (type(error), str(error))


def _built(obj):
    """What a constructor's outcome is compared by: the class's name (the same in both cores)."""
    return type(obj).__name__


def assert_same_outcome(call_compiled, call_interpreted):
    """Both builds did the same: returned equal values, or raised the same type with the same message."""
    compiled_outcome, interpreted_outcome = _outcome(call_compiled), _outcome(call_interpreted)
    assert compiled_outcome == interpreted_outcome, f"compiled: {compiled_outcome!r}; interpreted: {interpreted_outcome!r}"
    return compiled_outcome


def assert_both_refuse(build, expected=Exception):
    """``build(core)`` raises in both cores, the same type (a subclass of ``expected``) with the same message."""
    kind, message = assert_same_outcome(lambda: _built(build(compiled)), lambda: _built(build(python_core)))
    assert kind != "returned" and issubclass(kind, expected), (kind, message)
    return kind, message


def _parameter_names(obj) -> list[str]:
    """Parameter names of a function, method or class constructor, compiled or not."""
    try:
        return [name for name in inspect.signature(obj).parameters if name != "self"]
    except (TypeError, ValueError):
        # A compiled extension type: Cython embeds "Name(arg, Py_ssize_t arg2)" in its docstring.
        first_line = obj.__doc__.splitlines()[0]
        if not first_line.startswith(f"{obj.__name__}("):
            return []  # no embedded signature: a class without __init__ takes no arguments
        inside = first_line[first_line.index("(") + 1 : first_line.rindex(")")]
        return [part.split()[-1].split("=")[0] for part in inside.split(",") if part.strip()]


def _public_methods(cls) -> set[str]:
    """Public callables of a class (a compiled class's C fields are descriptors, an interpreted one's
    are set on the instance: neither is compared here)."""
    return {name for name in dir(cls) if not name.startswith("_") and callable(getattr(cls, name))}


@pytest.mark.parametrize(
    "compiled_module, python_module", [(compiled, python_core), (compiled_kernels, python_kernels)], ids=["rows", "kernels"]
)
def test_both_builds_expose_the_same_names_and_signatures(compiled_module, python_module):
    assert sorted(python_module.__all__) == sorted(name for name in dir(compiled_module) if name in python_module.__all__)
    for name in python_module.__all__:
        python_object = getattr(python_module, name)
        compiled_object = getattr(compiled_module, name)
        assert _parameter_names(compiled_object) == _parameter_names(python_object), name
        if inspect.isclass(python_object):
            assert _public_methods(compiled_object) == _public_methods(python_object), name
            for member in sorted(_public_methods(python_object)):
                assert _parameter_names(getattr(compiled_object, member)) == _parameter_names(
                    getattr(python_object, member)
                ), f"{name}.{member}"


def test_the_signature_check_sees_a_renamed_parameter():
    def reference(self, row, sources): ...

    def renamed(self, row, values): ...

    assert _parameter_names(reference) != _parameter_names(renamed)
    assert _parameter_names(compiled.StepRecorder)[-2:] == ["done_columns", "env_offset"]


# -- ObservationWriter -----------------------------------------------------------------------

leaf_shapes = st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple)


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from(DTYPES),
    shape=leaf_shapes,
    num_envs=st.integers(1, 6),
    horizon=st.integers(1, 4),
    data=st.data(),
)
def test_observation_writer_matches_numpy_assignment(dtype, shape, num_envs, horizon, data):
    sources_per_row = [
        [data.draw(hnp.arrays(dtype, shape)) for _ in range(num_envs)] for _ in range(horizon + 1)
    ]
    done = data.draw(hnp.arrays(np.bool_, (horizon, num_envs)))
    results = []
    for core in CORES:
        observations = np.zeros((horizon + 1, num_envs) + shape, dtype=dtype)
        finals = np.zeros((horizon, num_envs) + shape, dtype=dtype)
        writer = core.ObservationWriter(observations, finals)
        assert writer.write_rows(0, sources_per_row[0]) == -1
        for t in range(horizon):
            assert writer.write_rows(t + 1, sources_per_row[t + 1]) == -1
            columns = np.flatnonzero(done[t]).astype(np.int64)
            padded = np.full(num_envs, -99, dtype=np.int64)
            padded[: columns.size] = columns
            writer.scatter_final(t, padded, columns.size)
        results.append((observations, finals))
    expected_observations = np.array(sources_per_row, dtype=dtype).reshape((horizon + 1, num_envs) + shape)
    expected_finals = np.where(done.reshape(done.shape + (1,) * len(shape)), expected_observations[1:], 0).astype(dtype)
    for observations, finals in results:
        assert np.array_equal(observations.view(np.uint8), expected_observations.view(np.uint8))
        assert np.array_equal(finals.view(np.uint8), expected_finals.view(np.uint8))


@pytest.mark.parametrize("core", CORES, ids=["compiled", "python"])
def test_observation_writer_writes_into_a_column_slice_only(core):
    whole = np.zeros((3, 5, 2), dtype=np.float32)
    finals = np.zeros((2, 5, 2), dtype=np.float32)
    writer = core.ObservationWriter(whole[:, 1:3], finals[:, 1:3])
    assert writer.write_rows(1, [np.array([1, 2], np.float32), np.array([3, 4], np.float32)]) == -1
    writer.scatter_final(0, np.array([1, 0], dtype=np.int64), 1)
    expected = np.zeros((3, 5, 2), dtype=np.float32)
    expected[1, 1], expected[1, 2] = [1, 2], [3, 4]
    np.testing.assert_array_equal(whole, expected)
    np.testing.assert_array_equal(finals[0, 2], [3, 4])
    assert finals.sum() == 7


@pytest.mark.parametrize("core", CORES, ids=["compiled", "python"])
def test_observation_writer_converts_scalars_and_other_dtypes_by_row(core):
    observations = np.zeros((2, 3), dtype=np.int64)
    writer = core.ObservationWriter(observations, np.zeros((1, 3), dtype=np.int64))
    assert writer.write_rows(1, [4, np.int32(5), np.array(6, dtype=np.uint8)]) == -1
    np.testing.assert_array_equal(observations[1], [4, 5, 6])
    floats = np.zeros((2, 2, 2), dtype=np.float32)
    writer = core.ObservationWriter(floats, np.zeros((1, 2, 2), dtype=np.float32))
    assert writer.write_rows(0, [np.array([1.5, 2.5]), np.array([3, 4], dtype=np.int64)[::1]]) == -1
    np.testing.assert_array_equal(floats[0], [[1.5, 2.5], [3, 4]])
    # A non-contiguous source goes through the conversion path.
    strided = np.arange(8, dtype=np.float32)[::2][:2]
    assert writer.write_row(1, 1, strided)
    np.testing.assert_array_equal(floats[1, 1], [0, 2])


@pytest.mark.parametrize("core", CORES, ids=["compiled", "python"])
def test_observation_writer_reports_the_first_wrong_shape_and_does_not_write_it(core):
    observations = np.zeros((2, 3, 2), dtype=np.float32)
    writer = core.ObservationWriter(observations, np.zeros((1, 3, 2), dtype=np.float32))
    ok = np.ones(2, np.float32)
    assert writer.write_rows(1, [ok, np.ones(3, np.float32), ok]) == 1
    assert not observations[1, 1:].any()
    assert writer.write_row(0, 2, np.ones((2, 1), np.float32)) is False
    assert not observations[0].any()
    with pytest.raises(ValueError, match="`sources` has 2 entries; expected 3"):
        writer.write_rows(0, [ok, ok])
    with pytest.raises(IndexError, match="row 2 is outside"):
        writer.write_rows(2, [ok, ok, ok])
    with pytest.raises(IndexError, match="done column 3 is outside"):
        writer.scatter_final(0, np.array([3], dtype=np.int64), 1)


@pytest.mark.parametrize("core", CORES, ids=["compiled", "python"])
def test_observation_writer_rejects_storage_it_cannot_write_through(core):
    transposed = np.zeros((2, 3, 4, 5), dtype=np.float32).transpose(0, 1, 3, 2)
    with pytest.raises(ValueError, match="contiguously"):
        core.ObservationWriter(transposed, np.zeros((1, 3, 5, 4), dtype=np.float32))
    with pytest.raises(ValueError, match="share a dtype"):
        core.ObservationWriter(np.zeros((2, 3)), np.zeros((1, 3), dtype=np.float32))


# -- StepRecorder ----------------------------------------------------------------------------


def _every_other_column(array):
    """``array``'s values in a view whose last axis steps over every other element."""
    spread = np.zeros(array.shape[:-1] + (2 * array.shape[-1],), array.dtype)
    view = spread[..., ::2]
    view[...] = array
    return view


def _recorder_state(core, horizon, num_envs, env_offset, strided=False):
    # strided: the rows and books are views with gaps between envs (not the storage's own layout).
    spread = _every_other_column if strided else (lambda array: array)
    state = {
        "rewards": spread(np.full((horizon, num_envs), np.nan)),
        "terminations": spread(np.zeros((horizon, num_envs), bool)),
        "truncations": spread(np.zeros((horizon, num_envs), bool)),
        "step_episode_seeds": spread(np.zeros((horizon, num_envs), np.int64)),
        "running_returns": spread(np.zeros(num_envs)),
        "running_lengths": spread(np.zeros(num_envs, np.int64)),
        "running_seeds": spread(np.arange(num_envs, dtype=np.int64) * 10),
        "completed_returns": np.zeros(horizon * num_envs),
        "completed_lengths": np.zeros(horizon * num_envs, np.int64),
        "completed_env_indices": np.zeros(horizon * num_envs, np.int64),
        "completed_end_steps": np.zeros(horizon * num_envs, np.int64),
        "completed_seeds": np.zeros(horizon * num_envs, np.int64),
        "done_columns": np.zeros(num_envs, np.int64),
    }
    recorder = core.StepRecorder(*state.values(), env_offset)
    return recorder, state


@settings(max_examples=80, deadline=None)
@given(
    horizon=st.integers(1, 8),
    num_envs=st.integers(1, 6),
    env_offset=st.integers(0, 50),
    data=st.data(),
)
def test_step_recorder_matches_a_plain_python_reference(horizon, num_envs, env_offset, data):
    rewards = data.draw(hnp.arrays(np.float64, (horizon, num_envs), elements=st.floats(-1e6, 1e6)))
    terminated = data.draw(hnp.arrays(np.bool_, (horizon, num_envs)))
    truncated = data.draw(hnp.arrays(np.bool_, (horizon, num_envs)))
    outcomes = []
    for core in CORES:
        recorder, state = _recorder_state(core, horizon, num_envs, env_offset)
        done_counts, done_lists = [], []
        done_columns = state["done_columns"]
        for t in range(horizon):
            # Rewards arrive as Python floats or NumPy scalars, flags as bools or NumPy bools.
            n_done = recorder.record_step(
                t, [float(r) for r in rewards[t]], list(terminated[t]), [bool(x) for x in truncated[t]]
            )
            done_counts.append(n_done)
            done_lists.append(done_columns[:n_done].tolist())
            for column in done_columns[:n_done]:
                state["running_seeds"][column] += 1  # what a reset would do
        outcomes.append((recorder.completed_count, done_counts, done_lists, state))

    # Plain-Python reference of the episode books.
    running_return = [0.0] * num_envs
    running_length = [0] * num_envs
    seeds = [10 * c for c in range(num_envs)]
    completed = []
    for t in range(horizon):
        for c in range(num_envs):
            running_return[c] += rewards[t, c]
            running_length[c] += 1
            if terminated[t, c] or truncated[t, c]:
                completed.append((running_return[c], running_length[c], env_offset + c, t, seeds[c]))
                running_return[c], running_length[c] = 0.0, 0
                seeds[c] += 1
    for count, done_counts, done_lists, state in outcomes:
        assert count == len(completed)
        got = list(zip(
            state["completed_returns"][:count].tolist(),
            state["completed_lengths"][:count].tolist(),
            state["completed_env_indices"][:count].tolist(),
            state["completed_end_steps"][:count].tolist(),
            state["completed_seeds"][:count].tolist(),
        ))
        assert got == completed
        np.testing.assert_array_equal(state["rewards"], rewards)
        np.testing.assert_array_equal(state["terminations"], terminated)
        np.testing.assert_array_equal(state["truncations"], truncated)
        assert state["running_returns"].tolist() == running_return
        assert state["running_lengths"].tolist() == running_length
    (c0, d0, l0, s0), (c1, d1, l1, s1) = outcomes
    assert d0 == d1 and l0 == l1
    for key in s0:
        if key != "done_columns":  # only its first n_done entries are defined
            assert np.array_equal(s0[key], s1[key], equal_nan=True), key


@pytest.mark.parametrize("core", CORES, ids=["compiled", "python"])
def test_step_recorder_records_nothing_when_a_reward_is_not_a_number(core):
    recorder, state = _recorder_state(core, 2, 2, 0)
    with pytest.raises((TypeError, ValueError)):
        recorder.record_step(0, [1.0, "oops"], [True, False], [False, False])
    assert np.isnan(state["rewards"]).all()
    assert recorder.completed_count == 0
    assert not state["running_lengths"].any()


@pytest.mark.parametrize("core", CORES, ids=["compiled", "python"])
def test_step_recorder_checks_its_inputs(core):
    recorder, _ = _recorder_state(core, 2, 2, 0)
    with pytest.raises(ValueError, match="`step_rewards` has 1 entries; expected 2"):
        recorder.record_step(0, [1.0], [False, False], [False, False])
    with pytest.raises(IndexError, match="time step 2 is outside"):
        recorder.record_step(2, [1.0, 1.0], [False, False], [False, False])


@settings(max_examples=80, deadline=None)
@given(
    horizon=st.integers(1, 8),
    num_envs=st.integers(1, 6),
    env_offset=st.integers(0, 50),
    with_mask=st.booleans(),
    data=st.data(),
)
def test_record_rows_matches_a_plain_python_reference(horizon, num_envs, env_offset, with_mask, data):
    """The whole-row books of a vector source: rows already stored, some steps not counted."""
    rewards = data.draw(hnp.arrays(np.float64, (horizon, num_envs), elements=st.floats(-1e6, 1e6)))
    terminated = data.draw(hnp.arrays(np.bool_, (horizon, num_envs)))
    truncated = data.draw(hnp.arrays(np.bool_, (horizon, num_envs)))
    counted = data.draw(hnp.arrays(np.bool_, (horizon, num_envs))) if with_mask else None
    outcomes = []
    for core in CORES:
        recorder, state = _recorder_state(core, horizon, num_envs, env_offset)
        state["rewards"][:] = rewards
        state["terminations"][:] = terminated
        state["truncations"][:] = truncated
        done_lists = []
        for t in range(horizon):
            n_done = recorder.record_rows(t, None if counted is None else counted[t].copy())
            done_lists.append(state["done_columns"][:n_done].tolist())
            for column in state["done_columns"][:n_done]:
                state["running_seeds"][column] += 1
        outcomes.append((recorder.completed_count, done_lists, state))

    running_return = [0.0] * num_envs
    running_length = [0] * num_envs
    seeds = [10 * c for c in range(num_envs)]
    completed, seed_rows = [], []
    for t in range(horizon):
        seed_rows.append(list(seeds))
        for c in range(num_envs):
            if counted is None or counted[t, c]:
                running_return[c] += rewards[t, c]
                running_length[c] += 1
            if terminated[t, c] or truncated[t, c]:
                completed.append((running_return[c], running_length[c], env_offset + c, t, seeds[c]))
                running_return[c], running_length[c] = 0.0, 0
                seeds[c] += 1
    for count, _done_lists, state in outcomes:
        assert count == len(completed)
        got = list(zip(
            state["completed_returns"][:count].tolist(),
            state["completed_lengths"][:count].tolist(),
            state["completed_env_indices"][:count].tolist(),
            state["completed_end_steps"][:count].tolist(),
            state["completed_seeds"][:count].tolist(),
        ))
        assert got == completed
        assert state["step_episode_seeds"].tolist() == seed_rows
        assert state["running_returns"].tolist() == running_return
        assert state["running_lengths"].tolist() == running_length
    assert outcomes[0][1] == outcomes[1][1]


@pytest.mark.parametrize("core", CORES, ids=["compiled", "python"])
@pytest.mark.parametrize("method", ["record_step", "record_rows"])
def test_full_completed_episode_buffers_raise_before_anything_is_recorded(core, method):
    recorder, state = _recorder_state(core, 2, 2, 0)
    # Room for one more episode, two end at once.
    for name in ("completed_returns", "completed_lengths", "completed_env_indices", "completed_end_steps", "completed_seeds"):
        state[name] = state[name][:1]
    recorder = core.StepRecorder(*state.values(), 0)
    if method == "record_step":
        call = lambda: recorder.record_step(0, [1.0, 1.0], [True, True], [False, False])  # noqa: E731
    else:
        state["rewards"][0] = 1.0
        state["terminations"][0] = True
        call = lambda: recorder.record_rows(0)  # noqa: E731
    with pytest.raises(ValueError, match=r"completed-episode buffers are full \(1 slots\)"):
        call()
    assert recorder.completed_count == 0
    assert not state["running_lengths"].any()


@pytest.mark.parametrize("core", CORES, ids=["compiled", "python"])
def test_record_rows_checks_its_inputs(core):
    recorder, _ = _recorder_state(core, 2, 2, 0)
    with pytest.raises(IndexError, match="time step 2 is outside"):
        recorder.record_rows(2)
    with pytest.raises(ValueError, match="`counted` has 3 entries; expected 2"):
        recorder.record_rows(0, np.ones(3, dtype=bool))
    with pytest.raises(ValueError, match="`counted` must have dtype bool"):
        recorder.record_rows(0, np.ones(2, dtype=np.int64))


# -- find_out_of_bounds ----------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(dtype=st.sampled_from(DTYPES), shape=leaf_shapes, rows=st.integers(0, 5), data=st.data())
def test_find_out_of_bounds_matches_a_numpy_one_liner(dtype, shape, rows, data):
    values = data.draw(hnp.arrays(dtype, (rows,) + shape))
    size = int(np.prod(shape, dtype=np.int64))
    low = data.draw(hnp.arrays(np.float64, size, elements=st.floats(-300, 300)))
    high = low + data.draw(hnp.arrays(np.float64, size, elements=st.floats(0, 300)))
    as_double = values.astype(np.float64).reshape(rows, size)
    outside = np.flatnonzero(~((as_double >= low) & (as_double <= high)).all(axis=1))
    expected = int(outside[0]) if outside.size else -1
    for core in CORES:
        assert core.find_out_of_bounds(values, low, high) == expected


_INT64_EDGES = [
    np.iinfo(np.int64).min, np.iinfo(np.int64).min + 1, -(2**53) - 1, -(2**53), -(2**53) + 1, -3, -1, 0, 1, 2, 3,
    2**53 - 1, 2**53, 2**53 + 1, 2**62, np.iinfo(np.int64).max - 1, np.iinfo(np.int64).max,
]
_INT64_BOUNDS = [-np.inf, np.inf, np.nan, -(2.0**53), 2.0**53, -(2.0**53) + 2, 2.0**53 - 2, 2.0**63, -(2.0**63),
                 -2.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 1e300]


def test_find_out_of_bounds_decides_every_edge_int64_value_against_every_edge_bound_as_float64_does():
    """Every pair of bounds of the list, against every edge value alone and amid 20 rows of a
    value inside: the compiled core's integer comparison answers as the float64 one."""
    candidates = np.array(_INT64_EDGES + list(range(-5, 6)), dtype=np.int64)
    wide_candidates = candidates.astype(np.float64)
    for lo, hi in itertools.product(_INT64_BOUNDS, repeat=2):
        low, high = np.array([lo]), np.array([hi])
        inside = candidates[(wide_candidates >= lo) & (wide_candidates <= hi)]
        for value in candidates:
            wide = np.float64(value)
            outside = not (wide >= lo and wide <= hi)
            blocks = [(np.array([value]), 0 if outside else -1)]
            if inside.size:
                block = np.full(20, inside[0], dtype=np.int64)
                block[13] = value
                blocks.append((block, 13 if outside else -1))
            for block, expected in blocks:
                for core in CORES:
                    assert core.find_out_of_bounds(block, low, high) == expected, (core.__name__, lo, hi, int(value))


@settings(max_examples=150, deadline=None)
@given(
    rows=st.integers(1, 40),
    elements=st.integers(1, 3),
    data=st.data(),
)
def test_find_out_of_bounds_decides_int64_values_as_float64_does(rows, elements, data):
    """int64 values (integer actions) are compared as integers in the compiled core: the same
    answer as the float64 comparison for values at the int64 extremes and around 2**53, where
    float64 rounds, and for bounds that are infinite, NaN, fractional or past 2**53."""
    edges = st.sampled_from(_INT64_EDGES) | st.integers(-5, 5)
    values = np.array(data.draw(st.lists(edges, min_size=rows * elements, max_size=rows * elements)), dtype=np.int64)
    values = values.reshape(rows, elements)
    low = np.array(data.draw(st.lists(st.sampled_from(_INT64_BOUNDS), min_size=elements, max_size=elements)))
    high = np.array(data.draw(st.lists(st.sampled_from(_INT64_BOUNDS), min_size=elements, max_size=elements)))
    if data.draw(st.booleans()):
        # Every value inside but one, so that a value just outside on either side is the only one.
        candidates = np.array(_INT64_EDGES + list(range(-5, 6)), dtype=np.int64)
        keep = data.draw(st.integers(0, values.size - 1))
        for k in range(elements):
            wide = candidates.astype(np.float64)
            inside = candidates[(wide >= low[k]) & (wide <= high[k])]
            if inside.size:
                values[:, k] = data.draw(st.sampled_from(inside.tolist()))
        values.flat[keep] = data.draw(edges)
    as_double = values.astype(np.float64)
    values = values if elements > 1 else values.reshape(rows)
    outside = np.flatnonzero(~((as_double >= low) & (as_double <= high)).all(axis=1))
    expected = int(outside[0]) if outside.size else -1
    for core in CORES:
        assert core.find_out_of_bounds(values, low, high) == expected, core.__name__


@pytest.mark.parametrize("core", CORES, ids=["compiled", "python"])
def test_find_out_of_bounds_needs_a_row_axis(core):
    with pytest.raises(ValueError, match="leading row axis"):
        core.find_out_of_bounds(np.float64(5.0), np.array([0.0]), np.array([1.0]))


@pytest.mark.parametrize("core", CORES, ids=["compiled", "python"])
def test_find_out_of_bounds_treats_nan_as_outside_and_rejects_other_dtypes(core):
    assert core.find_out_of_bounds(np.array([[0.5], [np.nan]]), np.array([0.0]), np.array([1.0])) == 1
    assert core.find_out_of_bounds(np.array([[0.5], [np.inf]]), np.array([-np.inf]), np.array([np.inf])) == -1
    with pytest.raises(TypeError, match="unsupported dtype"):
        core.find_out_of_bounds(np.array([["a"]]), np.array([0.0]), np.array([1.0]))
    with pytest.raises(ValueError, match="bounds cover"):
        core.find_out_of_bounds(np.zeros((2, 3)), np.zeros(2), np.ones(2))


# -- both cores accept and reject exactly the same inputs ----------------------------------


def _observation_pair(rows=3, envs=2, leaf=(2,), dtype=np.float32):
    return np.zeros((rows, envs) + leaf, dtype), np.zeros((rows - 1, envs) + leaf, dtype)


MISMATCHED_WRITER_STORAGE = {
    "final-as-long-as-observations": lambda: (np.zeros((3, 2, 2), np.float32), np.zeros((3, 2, 2), np.float32)),
    "final-wider": lambda: (np.zeros((3, 2, 2), np.float32), np.zeros((2, 3, 2), np.float32)),
    "dtype-differs": lambda: (np.zeros((3, 2, 2), np.float32), np.zeros((2, 2, 2), np.float64)),
    "one-dimensional": lambda: (np.zeros(3, np.float32), np.zeros(2, np.float32)),
    "a-list": lambda: ([[0.0, 0.0]] * 3, np.zeros((2, 2), np.float64)),
    "read-only": lambda: (np.broadcast_to(np.zeros((1, 2, 2), np.float32), (3, 2, 2)), np.zeros((2, 2, 2), np.float32)),
}


@pytest.mark.parametrize("case", sorted(MISMATCHED_WRITER_STORAGE))
def test_both_cores_refuse_the_same_inconsistent_observation_storage(case):
    assert_both_refuse(lambda core: core.ObservationWriter(*MISMATCHED_WRITER_STORAGE[case]()), (TypeError, ValueError))


def _mismatched_recorder_state(case):
    state = dict(_recorder_state(python_core, 3, 2, 0)[1])
    changes = {
        "terminations-shorter": ("terminations", np.zeros((2, 2), bool)),
        "seeds-shorter": ("step_episode_seeds", np.zeros((1, 2), np.int64)),
        "float32-rewards": ("rewards", np.zeros((3, 2), np.float32)),
        "int32-done-columns": ("done_columns", np.zeros(2, np.int32)),
        "done-columns-too-short": ("done_columns", np.zeros(1, np.int64)),
        "completed-lengths-shorter": ("completed_lengths", np.zeros(2, np.int64)),
        "completed-seeds-a-list": ("completed_seeds", [0] * 6),
        "running-returns-wider": ("running_returns", np.zeros(3)),
        "int-flags": ("truncations", np.zeros((3, 2), np.int8)),
    }
    field, value = changes[case]
    state[field] = value
    return state


@pytest.mark.parametrize(
    "case",
    [
        "terminations-shorter", "seeds-shorter", "float32-rewards", "int32-done-columns", "done-columns-too-short",
        "completed-lengths-shorter", "completed-seeds-a-list", "running-returns-wider", "int-flags",
    ],
)
def test_both_cores_refuse_the_same_inconsistent_step_storage(case):
    """With bounds checks compiled out, these would read or write outside an array."""
    assert_both_refuse(lambda core: core.StepRecorder(*_mismatched_recorder_state(case).values(), 0), (TypeError, ValueError))


@pytest.mark.parametrize(
    "arguments",
    [
        ((1.0, 1.0), [False, False], [False, False]),
        (np.array([1.0, 1.0]), [False, False], [False, False]),
        ([1.0, 1.0], None, [False, False]),
        ([1.0, 1.0, 1.0], [False, False, False], [False, False, False]),
    ],
    ids=["tuple", "ndarray", "none", "too-many"],
)
def test_both_cores_accept_only_lists_of_one_entry_per_env(arguments):
    recorders = {core: _recorder_state(core, 2, 2, 0) for core in CORES}
    assert_both_refuse(lambda core: recorders[core][0].record_step(0, *arguments), (TypeError, ValueError))
    for recorder, state in recorders.values():
        assert recorder.completed_count == 0 and np.isnan(state["rewards"]).all()


@pytest.mark.parametrize("done_columns", [np.array([0], np.int32), [0], np.array([[0]], np.int64)], ids=["int32", "list", "2d"])
def test_both_cores_refuse_done_columns_of_another_type(done_columns):
    writers = {core: core.ObservationWriter(*_observation_pair()) for core in CORES}
    assert_both_refuse(lambda core: writers[core].scatter_final(0, done_columns, 1), (TypeError, ValueError))
    assert_both_refuse(lambda core: writers[core].scatter_final(2, np.zeros(2, np.int64), 1), IndexError)


@pytest.mark.parametrize("core", CORES, ids=["compiled", "python"])
def test_write_rows_takes_a_list_only(core):
    writer = core.ObservationWriter(*_observation_pair())
    with pytest.raises(TypeError, match="`sources` must be a list; got tuple"):
        writer.write_rows(0, (np.zeros(2, np.float32), np.zeros(2, np.float32)))


# -- the conversion rule ---------------------------------------------------------------------

CONVERSIONS = [
    # (storage dtype, source, stored unchanged?)
    (np.uint8, np.full(2, 0.5, np.float32), False),  # [0, 1] frames into a uint8 space
    (np.uint8, np.array([300, 1], np.int64), False),  # would wrap to 44
    (np.uint8, np.array([-1, 1], np.int64), False),
    (np.uint8, [1.0, 2.0], False),  # Python floats
    (np.uint8, [3, 255], True),  # Python ints that fit
    (np.uint8, np.array([3, 255], np.int64), True),
    (np.uint8, np.array([True, False]), True),
    (np.int64, np.array([2**63, 0], np.uint64), False),
    (np.int8, np.array([-128, 127], np.int32), True),
    (np.float32, np.array([0.1, 1e-3], np.float64), True),  # rounding only, as in Gymnasium
    (np.float32, np.array([1, 2], np.int64), True),
    (np.float32, ["a", "b"], False),  # non-numeric
    (np.float32, np.array([None, 1.0], dtype=object), False),
    (np.float32, [[1.0], [2.0, 3.0]], False),  # ragged
    (np.bool_, np.array([0, 1], np.int64), True),
    (np.bool_, np.array([2, 1], np.int64), False),
    (np.bool_, np.array([0.0, 1.0]), False),
]


@pytest.mark.parametrize("dtype, source, accepted", CONVERSIONS)
def test_both_cores_store_a_converted_row_only_when_no_value_changes(dtype, source, accepted):
    for core in CORES:
        observations = np.zeros((2, 1, 2), dtype)
        writer = core.ObservationWriter(observations, np.zeros((1, 1, 2), dtype))
        assert writer.write_row(1, 0, source) is accepted
        assert writer.write_rows(0, [source]) == (-1 if accepted else 0)
        if accepted:
            np.testing.assert_array_equal(observations[1, 0], np.asarray(source).astype(dtype))
        else:
            assert not observations.any()


# -- EnvStepper ------------------------------------------------------------------------------


class _ScriptedEnv:
    """Returns scripted step results: ``script[k]`` is the k-th step's result or an exception."""

    def __init__(self, script):
        self.script = list(script)
        self.actions = []

    def step(self, action):
        self.actions.append(action)
        outcome = self.script.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


def _stepper_setup(core, scripts, horizon=3, info_keys=("x",), leaf=(2,), dtype=np.float32):
    n = len(scripts)
    recorder, state = _recorder_state(core, horizon, n, 0)
    observations = np.zeros((horizon + 1, n) + leaf, dtype)
    finals = np.zeros((horizon, n) + leaf, dtype)
    writer = core.ObservationWriter(observations, finals)
    infos = [np.full((horizon, n), np.nan) for _ in info_keys]
    envs = [_ScriptedEnv(script) for script in scripts]
    stepper = core.EnvStepper(envs, [writer], recorder, None, tuple(info_keys), infos)
    return stepper, envs, observations, infos, state


def _obs(value, dtype=np.float32):
    return np.full(2, value, dtype)


@settings(max_examples=40, deadline=None)
@given(data=st.data(), num_envs=st.integers(1, 4), horizon=st.integers(1, 4))
def test_env_stepper_matches_between_cores(data, num_envs, horizon):
    scripts = [
        [
            (
                _obs(data.draw(st.floats(-5, 5, width=32))) if data.draw(st.booleans()) else [1.0, 2.0],
                data.draw(st.sampled_from([1.5, np.float32(2.0), 3, np.array(0.5)])),
                data.draw(st.sampled_from([True, False, np.bool_(True), 0])),
                data.draw(st.sampled_from([False, np.bool_(False), 1])),
                {"x": data.draw(st.integers(-3, 3))},
            )
            for _ in range(horizon)
        ]
        for _ in range(num_envs)
    ]
    results = []
    for core in CORES:
        stepper, envs, observations, infos, state = _stepper_setup(core, [list(s) for s in scripts], horizon)
        counts = [stepper.step(t, list(range(num_envs))) for t in range(horizon)]
        results.append((counts, observations, infos, state))
    (c0, o0, i0, s0), (c1, o1, i1, s1) = results
    assert c0 == c1 and all(count >= 0 for count in c0)
    np.testing.assert_array_equal(o0, o1)
    np.testing.assert_array_equal(i0, i1)
    for key in s0:
        if key != "done_columns":
            assert np.array_equal(s0[key], s1[key], equal_nan=True), key


FAILING_STEPS = {
    "raises": (ValueError("boom"), "step", ValueError),
    "four-values": ((_obs(1), 1.0, False, {}), "step", TypeError),
    "array-reward": ((_obs(1), np.array([1.0, 2.0]), False, False, {"x": 1}), "step", TypeError),
    "none-terminated": ((_obs(1), 1.0, None, False, {"x": 1}), "step", TypeError),
    "missing-info": ((_obs(1), 1.0, False, False, {}), "info", KeyError),
}


@pytest.mark.parametrize("case", sorted(FAILING_STEPS))
def test_env_stepper_reports_the_same_failures_and_records_nothing(case):
    outcome, phase, error_type = FAILING_STEPS[case]
    for core in CORES:
        good = (_obs(1), 1.0, False, False, {"x": 1})
        stepper, envs, observations, infos, state = _stepper_setup(core, [[good], [outcome], [good]])
        assert stepper.step(0, [0, 1, 2]) == -1
        assert [(column, p, type(error)) for column, p, error, _, _ in stepper.failures] == [(1, phase, error_type)]
        assert all(len(env.actions) == 1 for env in envs), "every env is stepped even after one fails"
        assert np.isnan(state["rewards"]).all() and not state["running_lengths"].any()


@pytest.mark.parametrize("bad", [np.full(2, 300, np.int64), np.zeros(3, np.uint8), "ab"], ids=["too-big", "shape", "text"])
def test_env_stepper_names_the_first_observation_it_cannot_store(bad):
    for core in CORES:
        good = (np.zeros(2, np.uint8), 1.0, False, False, {})
        stepper, _, _, _, state = _stepper_setup(
            core, [[good], [(bad, 1.0, False, False, {})], [good]], info_keys=(), dtype=np.uint8
        )
        assert stepper.step(0, [0, 1, 2]) == -1
        column, leaf_index, value = stepper.bad_observation
        assert (column, leaf_index) == (1, 0) and value is bad
        assert not stepper.failures and np.isnan(state["rewards"]).all()


@pytest.mark.parametrize("leaves", [1, 3], ids=["too-few", "too-many"])
def test_env_stepper_names_an_observation_with_another_number_of_leaves(leaves):
    """A ``flatten`` that gives another number of leaves than the writers is the env's bad
    observation (leaf -1), in both builds, with the same message; nothing is recorded."""
    outcomes = []
    for core in CORES:
        recorder, state = _recorder_state(core, 1, 2, 0)
        writers = [core.ObservationWriter(np.zeros((2, 2, 2), np.float32), np.zeros((1, 2, 2), np.float32)) for _ in range(2)]
        good = (_obs(0.5), 1.0, False, False, {})
        envs = [_ScriptedEnv([good]), _ScriptedEnv([good])]
        flatten = lambda observation: [observation] * leaves  # noqa: E731
        stepper = core.EnvStepper(envs, writers, recorder, flatten, (), [])
        assert stepper.step(0, [0, 1]) == -1
        column, leaf_index, error = stepper.bad_observation
        outcomes.append((column, leaf_index, type(error), str(error)))
        assert recorder.completed_count == 0 and np.isnan(state["rewards"]).all()
    assert outcomes[0] == outcomes[1] == (
        0, -1, ValueError, f"the observation has {leaves} leaves; the observation space has 2"
    )


ENV_STEPPER_PARTS_THAT_DISAGREE = {
    # name: (writers by name, number of envs or a tuple of envs, info storage, info keys)
    "writer-too-short": (["short"], 2, [], ()),
    "writer-too-wide": (["wide"], 2, [], ()),
    "one-env-too-few": (["fine"], 1, [], ()),
    "two-leaves-no-flatten": (["fine", "fine"], 2, [], ()),
    "float32-info": (["fine"], 2, [np.zeros((3, 2), np.float32)], ("x",)),
    "envs-a-tuple": (["fine"], (object(), object()), [], ()),
    "info-keys-a-list": (["fine"], 2, [], ["x"]),
    "writers-a-tuple": (("fine",), 2, [], ()),
    "writer-not-a-writer": (["text"], 2, [], ()),
    "recorder-missing": (["fine"], 2, [], (), None),
}


@pytest.mark.parametrize("case", sorted(ENV_STEPPER_PARTS_THAT_DISAGREE))
def test_both_cores_refuse_an_env_stepper_whose_parts_disagree(case):
    writer_names, envs, infos, keys, *recorder_given = ENV_STEPPER_PARTS_THAT_DISAGREE[case]

    def build(core):
        recorder, _ = _recorder_state(core, 3, 2, 0)
        storage = {
            "short": lambda: core.ObservationWriter(np.zeros((3, 2, 2), np.float32), np.zeros((2, 2, 2), np.float32)),
            "wide": lambda: core.ObservationWriter(np.zeros((4, 3, 2), np.float32), np.zeros((3, 3, 2), np.float32)),
            "fine": lambda: core.ObservationWriter(np.zeros((4, 2, 2), np.float32), np.zeros((3, 2, 2), np.float32)),
            "text": lambda: "not a writer",
        }
        writers = type(writer_names)(storage[name]() for name in writer_names)
        env_list = [object() for _ in range(envs)] if isinstance(envs, int) else envs
        return core.EnvStepper(env_list, writers, recorder_given[0] if recorder_given else recorder, None, keys, infos)

    assert_both_refuse(build, (TypeError, ValueError))


def test_both_cores_add_each_envs_step_seconds_and_refuse_a_wrong_timing_array():
    import time

    class _SleepyEnv(_ScriptedEnv):
        def step(self, action):
            time.sleep(0.05 if action == 1 else 0)
            return super().step(action)

    good = (_obs(0.0), 1.0, False, False, {"x": 0.0})
    for core in CORES:
        recorder, _ = _recorder_state(core, 3, 3, 0)
        writer = core.ObservationWriter(np.zeros((4, 3, 2), np.float32), np.zeros((3, 3, 2), np.float32))
        envs = [_SleepyEnv([good, good]) for _ in range(3)]
        seconds = np.full(3, 10.0)  # added to, never reset: the caller starts it at zero
        stepper = core.EnvStepper(envs, [writer], recorder, None, (), [], seconds)
        stepper.step(0, [0, 1, 0])
        stepper.step(1, [0, 1, 0])
        assert (seconds >= 10.0).all() and seconds[1] >= 10.0 + 2 * 0.05
        assert np.argmax(seconds) == 1
    for bad in (np.zeros(2), np.zeros(3, np.float32), np.zeros((1, 3)), np.zeros(6)[::2], [0.0, 0.0, 0.0]):

        def build(core, bad=bad):
            recorder, _ = _recorder_state(core, 3, 3, 0)
            writer = core.ObservationWriter(np.zeros((4, 3, 2), np.float32), np.zeros((3, 3, 2), np.float32))
            return core.EnvStepper([_SleepyEnv([good]) for _ in range(3)], [writer], recorder, None, (), [], bad)

        assert_both_refuse(build, (TypeError, ValueError))


# -- RowStepper ------------------------------------------------------------------------------


class _EpisodeEnv(_ScriptedEnv):
    """A scripted env that can also be reset: ``resets[k]`` is the k-th reset's result or an exception."""

    def __init__(self, script, resets):
        super().__init__(script)
        self.resets = list(resets)
        self.reset_seeds = []

    def reset(self, *, seed=None):
        self.reset_seeds.append(seed)
        outcome = self.resets.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


class _HookLog:
    """Records every hook call; the two that must raise do, the checks only note (as 'warn' does)."""

    def __init__(self, unwritable_raises=False):
        self.calls = []
        self._unwritable_raises = unwritable_raises

    def step_failed(self, t):
        self.calls.append(("step_failed", t))
        raise RuntimeError(f"step {t} failed")

    def rows_outside(self, t, n_done):
        self.calls.append(("rows_outside", t, n_done))

    def finals_outside(self, t, n_done):
        self.calls.append(("finals_outside", t, n_done))

    def reset_unwritable(self, t, column, observation):
        self.calls.append(("reset_unwritable", t, column, repr(observation)))
        if self._unwritable_raises:
            raise ValueError(f"cannot store the reset observation of column {column}")

    def reset_failed(self, t, failures):
        self.calls.append(("reset_failed", t, [(column, type(error).__name__) for column, error in failures]))
        raise RuntimeError(f"resets failed at step {t}")


class _CountingSeedTable(EpisodeSeedTable):
    def __init__(self, *args):
        super().__init__(*args)
        self.fills = []

    def fill(self, column, block):
        self.fills.append((column, block))
        super().fill(column, block)


def _dict_flatten(observation):
    return [observation["pos"], observation["mode"]]


def _row_setup(core, scripts, resets, horizon, nested=False, bounds=(-1.0, 1.0), first_episode=0, hooks=None, seeded=True):
    """A RowStepper over scripted envs; observations are a float32 (2,) leaf, plus an int64 one when nested."""
    n = len(scripts)
    recorder, state = _recorder_state(core, horizon, n, 0)
    leaves = [(np.float32, (2,))] + ([(np.int64, ())] if nested else [])
    observations = [np.zeros((horizon + 1, n) + shape, dtype) for dtype, shape in leaves]
    finals = [np.zeros((horizon, n) + shape, dtype) for dtype, shape in leaves]
    writers = [core.ObservationWriter(o, f) for o, f in zip(observations, finals)]
    envs = [_EpisodeEnv(script, reset) for script, reset in zip(scripts, resets)]
    stepper = core.EnvStepper(envs, writers, recorder, _dict_flatten if nested else None, (), [])
    actions = [np.arange(horizon * n, dtype=np.int64).reshape(horizon, n)]
    split = None
    if nested:
        actions.append(np.tile(np.eye(2, dtype=np.float32), (horizon, (n + 1) // 2, 1))[:, :n])
        split = lambda t: [{"move": actions[0][t, c], "push": actions[1][t, c].copy()} for c in range(n)]  # noqa: E731
    table = _CountingSeedTable(7, 3, [first_episode] * n)
    checked = [] if bounds is None else [(0, np.full(2, bounds[0]), np.full(2, bounds[1]))]
    hooks = hooks if hooks is not None else _HookLog()
    row_stepper = core.RowStepper(stepper, actions, split, table if seeded else None, state["running_seeds"], checked, hooks)
    return row_stepper, envs, observations, finals, state, table, hooks


def _row_outcome(envs, observations, finals, state, table, hooks):
    return {
        "observations": [o.copy() for o in observations],
        "finals": [f.copy() for f in finals],
        "state": {key: value.copy() for key, value in state.items() if key != "done_columns"},
        "episodes_started": table.episodes_started.copy(),
        "fills": list(table.fills),
        "reset_seeds": [env.reset_seeds for env in envs],
        "actions": [[(type(a).__name__, repr(a)) for a in env.actions] for env in envs],
        "hooks": list(hooks.calls),
    }


def _assert_same_outcome(first, second):
    for key in ("fills", "reset_seeds", "actions", "hooks"):
        assert first[key] == second[key], key
    for key in ("observations", "finals"):
        for a, b in zip(first[key], second[key]):
            np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(first["episodes_started"], second["episodes_started"])
    for key in first["state"]:
        assert np.array_equal(first["state"][key], second["state"][key], equal_nan=True), key


# What an env may return as an observation, and a reset observation: exact rows, rows to convert
# (float64, a list, ints), values outside [-1, 1] and NaN (the bounds check sees them).
_OBSERVATIONS = st.sampled_from([
    np.array([0.5, -0.5], np.float32), np.array([0.25, 0.75]), [0.5, 1.0], np.array([1, 0], np.int64),
    np.array([3.0, 0.0], np.float32), np.array([np.nan, 0.0], np.float32),
])


@settings(max_examples=60, deadline=None)
@given(data=st.data(), num_envs=st.integers(1, 4), horizon=st.integers(1, 5), nested=st.booleans(), checked=st.booleans())
def test_row_stepper_matches_between_cores(data, num_envs, horizon, nested, checked):
    def observation():
        value = data.draw(_OBSERVATIONS)
        return {"pos": value, "mode": data.draw(st.sampled_from([0, np.int64(2), np.array(1)]))} if nested else value

    scripts = [
        [(observation(), data.draw(st.sampled_from([1.0, np.float32(0.5), 2])), data.draw(st.booleans()),
          data.draw(st.sampled_from([False, np.bool_(True)])), {}) for _ in range(horizon)]
        for _ in range(num_envs)
    ]
    resets = [[(observation(), {}) for _ in range(horizon)] for _ in range(num_envs)]
    first_episode = data.draw(st.sampled_from([0, 254, 255]))  # near a block of 256 seeds: a refill
    outcomes = []
    for core in CORES:
        row_stepper, envs, observations, finals, state, table, hooks = _row_setup(
            core, [list(s) for s in scripts], [list(r) for r in resets], horizon, nested,
            (-1.0, 1.0) if checked else None, first_episode,
        )
        counts = [row_stepper.step(t) for t in range(horizon)]
        outcomes.append((counts, _row_outcome(envs, observations, finals, state, table, hooks)))
    (counts0, outcome0), (counts1, outcome1) = outcomes
    assert counts0 == counts1
    _assert_same_outcome(outcome0, outcome1)
    # Every ended episode was reset once, with the seed the seed table names for it.
    for column, seeds in enumerate(outcome0["reset_seeds"]):
        expected = [episode_seed(7, 3 + column, first_episode + k) for k in range(len(seeds))]
        assert seeds == expected
    ended = outcome0["state"]["terminations"] | outcome0["state"]["truncations"]
    assert [len(seeds) for seeds in outcome0["reset_seeds"]] == ended.sum(axis=0).tolist()


@settings(max_examples=30, deadline=None)
@given(data=st.data(), num_envs=st.integers(1, 4), horizon=st.integers(1, 5))
def test_row_stepper_without_a_seed_table_resets_unseeded_alike_in_both_cores(data, num_envs, horizon):
    scripts = [
        [(data.draw(_OBSERVATIONS), 1.0, data.draw(st.booleans()), False, {}) for _ in range(horizon)]
        for _ in range(num_envs)
    ]
    resets = [[(np.array([0.5, 0.5], np.float32), {}) for _ in range(horizon)] for _ in range(num_envs)]
    outcomes = []
    for core in CORES:
        row_stepper, envs, observations, finals, state, table, hooks = _row_setup(
            core, [list(s) for s in scripts], [list(r) for r in resets], horizon, seeded=False
        )
        counts = [row_stepper.step(t) for t in range(horizon)]
        outcomes.append((counts, _row_outcome(envs, observations, finals, state, table, hooks)))
    (counts0, outcome0), (counts1, outcome1) = outcomes
    assert counts0 == counts1
    _assert_same_outcome(outcome0, outcome1)
    ended = outcome0["state"]["terminations"] | outcome0["state"]["truncations"]
    # Every ended episode's env was reset once, without a seed; its next episode's seed is unknown.
    assert outcome0["reset_seeds"] == [[None] * int(count) for count in ended.sum(axis=0)]
    assert outcome0["fills"] == [] and outcome0["episodes_started"].tolist() == [0] * num_envs
    for column in range(num_envs):
        rows = np.flatnonzero(ended[:, column])
        if rows.size:
            assert outcome0["state"]["running_seeds"][column] == -1


@pytest.mark.parametrize("core", CORES, ids=["compiled", "python"])
def test_row_stepper_scatters_the_terminal_observation_and_writes_the_reset_one(core):
    end = (np.array([0.5, 0.5], np.float32), 1.0, True, False, {})
    go_on = (np.array([0.25, 0.25], np.float32), 1.0, False, False, {})
    reset_observation = (np.array([-0.5, -0.5], np.float32), {})
    row_stepper, envs, (observations,), (finals,), state, table, hooks = _row_setup(
        core, [[go_on], [end]], [[], [reset_observation]], horizon=1
    )
    assert row_stepper.step(0) == 1
    np.testing.assert_array_equal(finals[0, 1], [0.5, 0.5])
    np.testing.assert_array_equal(observations[1], [[0.25, 0.25], [-0.5, -0.5]])
    assert envs[1].reset_seeds == [episode_seed(7, 4, 0)]
    assert table.episodes_started.tolist() == [0, 1] and state["running_seeds"][1] == episode_seed(7, 4, 0)
    assert state["completed_seeds"][0] == 10  # the episode that ended ran under the old seed
    assert isinstance(envs[0].actions[0], np.int64) and hooks.calls == []


@pytest.mark.parametrize("core", CORES, ids=["compiled", "python"])
def test_row_stepper_hands_each_env_a_private_copy_of_an_array_action(core):
    go_on = (np.zeros(2, np.float32), 1.0, False, False, {})
    recorder, _ = _recorder_state(core, 1, 2, 0)
    writer = core.ObservationWriter(np.zeros((2, 2, 2), np.float32), np.zeros((1, 2, 2), np.float32))
    envs = [_EpisodeEnv([go_on], []), _EpisodeEnv([go_on], [])]
    stepper = core.EnvStepper(envs, [writer], recorder, None, (), [])
    actions = np.arange(6, dtype=np.float32).reshape(1, 2, 3)
    row_stepper = core.RowStepper(stepper, [actions], None, EpisodeSeedTable(0, 0, [0, 0]), np.zeros(2, np.int64), [], _HookLog())
    row_stepper.step(0)
    received = envs[1].actions[0]
    np.testing.assert_array_equal(received, [3.0, 4.0, 5.0])
    received[0] = 99.0
    assert actions[0, 1, 0] == 3.0, "an env changing its action must not touch the batch"


@pytest.mark.parametrize("core", CORES, ids=["compiled", "python"])
def test_row_stepper_calls_the_check_hooks_for_values_outside_the_bounds(core):
    outside_end = (np.array([3.0, 0.0], np.float32), 1.0, True, False, {})
    nan_row = (np.array([np.nan, 0.0], np.float32), 1.0, False, False, {})
    inside = (np.zeros(2, np.float32), {})
    row_stepper, *_, hooks = _row_setup(core, [[outside_end], [nan_row]], [[inside], []], horizon=1)
    assert row_stepper.step(0) == 1
    # The terminal observation first (it is outside), then row t + 1 (the NaN of env 1).
    assert hooks.calls == [("finals_outside", 0, 1), ("rows_outside", 0, 1)]


@pytest.mark.parametrize("core", CORES, ids=["compiled", "python"])
def test_row_stepper_resets_every_ended_env_before_reporting_the_failed_resets(core):
    end = (np.zeros(2, np.float32), 1.0, False, True, {})
    row_stepper, envs, observations, _, state, table, hooks = _row_setup(
        core, [[end], [end], [end]], [[KeyError("gone")], [(np.ones(2, np.float32) / 2, {})], [ValueError("bad")]], horizon=1
    )
    with pytest.raises(RuntimeError, match="resets failed at step 0"):
        row_stepper.step(0)
    assert hooks.calls == [("reset_failed", 0, [(0, "KeyError"), (2, "ValueError")])]
    assert all(len(env.reset_seeds) == 1 for env in envs)
    # Only the env whose reset succeeded moved on to its next episode.
    assert table.episodes_started.tolist() == [0, 1, 0]
    np.testing.assert_array_equal(observations[0][1, 1], [0.5, 0.5])


@pytest.mark.parametrize("core", CORES, ids=["compiled", "python"])
def test_row_stepper_hands_failed_steps_and_unwritable_resets_to_the_hooks(core):
    failing = [ValueError("boom")]
    good = (np.zeros(2, np.float32), 1.0, False, False, {})
    row_stepper, envs, _, _, state, _, hooks = _row_setup(core, [[good], failing], [[], []], horizon=1)
    with pytest.raises(RuntimeError, match="step 0 failed"):
        row_stepper.step(0)
    assert hooks.calls == [("step_failed", 0)] and np.isnan(state["rewards"]).all()

    end = (np.zeros(2, np.float32), 1.0, True, False, {})
    unwritable = (np.zeros(3, np.float32), {})
    row_stepper, envs, *_, hooks = _row_setup(
        core, [[end]], [[unwritable]], horizon=1, hooks=_HookLog(unwritable_raises=True)
    )
    with pytest.raises(ValueError, match="column 0"):
        row_stepper.step(0)
    assert hooks.calls == [("reset_unwritable", 0, 0, repr(unwritable[0]))]


ROW_STEPPER_PARTS_THAT_DISAGREE = {
    # name: (what to change, the error), over actions [2, 2], running seeds [2], a seed table of 2 envs
    "hooks-without-methods": ({"hooks": object(), "checked_leaves": "bounds"}, TypeError),
    "too-few-action-rows": ({"action_leaves": [np.zeros((1, 2), np.int64)]}, ValueError),
    "wrong-env-count": ({"action_leaves": [np.zeros((2, 3), np.int64)]}, ValueError),
    "two-leaves-no-split": ({"action_leaves": [np.zeros((2, 2), np.int64)] * 2}, ValueError),
    "action-leaves-a-tuple": ({"action_leaves": (np.zeros((2, 2), np.int64),)}, TypeError),
    "seed-table-of-three-envs": ({"seed_table": EpisodeSeedTable(0, 0, [0, 0, 0])}, ValueError),
    "running-seeds-of-three-envs": ({"running_seeds": np.zeros(3, np.int64)}, ValueError),
    "checked-leaf-outside": ({"checked_leaves": [(1, np.zeros(2), np.ones(2))]}, IndexError),
    "bounds-too-long": ({"checked_leaves": [(0, np.zeros(3), np.ones(3))]}, ValueError),
    "float32-bounds": ({"checked_leaves": [(0, np.zeros(2, np.float32), np.ones(2))]}, ValueError),
    "checked-leaves-a-tuple": ({"checked_leaves": ((0, np.zeros(2), np.ones(2)),)}, TypeError),
    "split-not-callable": ({"split_nested": 3}, TypeError),
    "stepper-not-a-stepper": ({"stepper": "a stepper"}, TypeError),
}


@pytest.mark.parametrize("case", sorted(ROW_STEPPER_PARTS_THAT_DISAGREE))
def test_both_cores_refuse_a_row_stepper_whose_parts_disagree(case):
    changes, error = ROW_STEPPER_PARTS_THAT_DISAGREE[case]

    def build(core):
        good = (np.zeros(2, np.float32), 1.0, False, False, {})
        _, envs, observations, finals, _, table, hooks = _row_setup(core, [[good], [good]], [[], []], horizon=2)
        recorder = core.StepRecorder(*_recorder_state(core, 2, 2, 0)[1].values(), 0)
        arguments = {
            "stepper": core.EnvStepper(envs, [core.ObservationWriter(observations[0], finals[0])], recorder, None, (), []),
            "action_leaves": [np.zeros((2, 2), np.int64)],
            "split_nested": None,
            "seed_table": table,
            "running_seeds": np.zeros(2, np.int64),
            "checked_leaves": [],
            "hooks": hooks,
        }
        arguments.update(changes)
        if arguments["checked_leaves"] == "bounds":
            arguments["checked_leaves"] = [(0, np.zeros(2), np.ones(2))]
        return core.RowStepper(*arguments.values())

    assert_both_refuse(build, error)


def test_the_row_code_and_its_kernels_import_from_their_own_floor_and_below_and_take_none_injected():
    # The argument checks and kernels are on the core's floor; the general rules come from checks/.
    folder = Path(__file__).resolve().parents[1] / "src" / "parallel_rollouts" / "core"
    for name in ("rows.py", "_core.pxd", "_kernels.pyx", "_kernels.pxd", "kernels.py"):
        source = (folder / name).read_text(encoding="utf-8")
        imported = re.findall(r"^\s*(?:from|import|cimport)\s+(parallel_rollouts[\w.]*)", source, re.MULTILINE)
        assert all(
            name in ("parallel_rollouts.core", "parallel_rollouts.core._kernels") or name.startswith("parallel_rollouts.checks.")
            for name in imported
        ), (name, imported)
    assert "use_slow_paths" not in dir(compiled) and not hasattr(compiled, "_slow")


def test_a_compiled_core_built_from_another_version_of_rows_py_is_refused_by_name():
    from types import SimpleNamespace

    from parallel_rollouts.core import selector

    assert selector.interface_difference(compiled) is None
    parts = {name: getattr(compiled, name) for name in python_core.__all__}
    # A build from before `VectorRowRecorder.book` existed: its recorder lacks the method.
    stale = dict(parts, VectorRowRecorder=type("VectorRowRecorder", (), {"record": lambda self: None}))
    assert selector.interface_difference(SimpleNamespace(**stale)) == "`VectorRowRecorder` lacks ['book']"
    missing = {name: part for name, part in parts.items() if name != "EnvStepper"}
    assert selector.interface_difference(SimpleNamespace(**missing)) == "it has no `EnvStepper`"


def test_the_compiled_core_is_rows_py_built_with_the_typed_kernels():
    # One source: the extension's classes are rows.py's, and its kernels the compiled ones.
    assert compiled.kernels is compiled_kernels and python_core.kernels is python_kernels
    assert compiled.__doc__ == python_core.__doc__
    # (Cython puts the signature before a class's docstring and strips its indentation.)
    assert python_core.RowStepper.__doc__.splitlines()[0] in compiled.RowStepper.__doc__


@pytest.mark.parametrize("core", CORES, ids=["compiled", "python"])
def test_row_stepper_adds_each_reset_s_seconds_and_refuses_a_wrong_timing_array(core):
    import time

    class _SlowResetEnv(_EpisodeEnv):
        def reset(self, *, seed=None):
            time.sleep(0.05)
            return super().reset(seed=seed)

    end = (np.zeros(2, np.float32), 1.0, True, False, {})
    go_on = (np.zeros(2, np.float32), 1.0, False, False, {})
    recorder, state = _recorder_state(core, 1, 2, 0)
    writer = core.ObservationWriter(np.zeros((2, 2, 2), np.float32), np.zeros((1, 2, 2), np.float32))
    envs = [_SlowResetEnv([go_on], []), _SlowResetEnv([end], [(np.zeros(2, np.float32), {})])]
    stepper = core.EnvStepper(envs, [writer], recorder, None, (), [])
    actions = [np.zeros((1, 2), np.int64)]
    table = EpisodeSeedTable(0, 0, [0, 0])
    seconds = np.full(2, 10.0)  # added to, never reset: the caller starts it at zero
    row_stepper = core.RowStepper(stepper, actions, None, table, state["running_seeds"], [], _HookLog(), seconds)
    assert row_stepper.step(0) == 1
    # Only the env whose episode ended was reset, and its reset's time was added.
    assert seconds[0] == 10.0 and seconds[1] >= 10.0 + 0.05
    for bad in (np.zeros(3), np.zeros(2, np.float32), np.zeros(4)[::2], [0.0, 0.0]):
        with pytest.raises((TypeError, ValueError), match="`reset_seconds`"):
            core.RowStepper(stepper, actions, None, table, state["running_seeds"], [], _HookLog(), bad)


# -- VectorRowRecorder -------------------------------------------------------------------------

VECTOR_MODES = ["NextStep", "SameStep", "Disabled"]


def _vector_rows(core, horizon, num_envs, mode, leaf_specs, checked_bounds, counted=None, env_offset=0, strided=False):
    """A ``VectorRowRecorder`` over fresh storage; ``leaf_specs`` is ``[(dtype, leaf_shape)]``."""
    recorder, state = _recorder_state(core, horizon, num_envs, env_offset, strided)
    writers = []
    for index, (dtype, shape) in enumerate(leaf_specs):
        state[f"observations{index}"] = np.zeros((horizon + 1, num_envs) + shape, dtype)
        state[f"finals{index}"] = np.zeros((horizon, num_envs) + shape, dtype)
        writers.append(core.ObservationWriter(state[f"observations{index}"], state[f"finals{index}"]))
    state["reset_steps"] = _every_other_column(np.zeros((horizon, num_envs), bool)) if strided else np.zeros((horizon, num_envs), bool)
    state["counted"] = np.ones(num_envs, bool) if counted is None else counted.copy()
    state["step_seconds"] = _every_other_column(np.zeros(num_envs)) if strided else np.zeros(num_envs)
    checked = [(index, low, high) for index, (low, high) in checked_bounds.items()]
    rows = core.VectorRowRecorder(
        recorder, writers, checked, state["reset_steps"], state["counted"], state["step_seconds"], mode
    )
    return rows, recorder, state


vector_leaf_specs = st.lists(
    st.tuples(st.sampled_from([np.float32, np.float64, np.uint8, np.int64, np.bool_]), leaf_shapes.map(lambda s: s[:2])),
    min_size=1,
    max_size=2,
)


@settings(max_examples=80, deadline=None)
@given(
    horizon=st.integers(1, 6),
    # Past 8 and past 16: the compiled books read the flags eight at a time, with a tail.
    num_envs=st.integers(1, 19),
    mode=st.sampled_from(VECTOR_MODES),
    leaf_specs=vector_leaf_specs,
    strided=st.booleans(),
    data=st.data(),
)
def test_vector_row_recorder_matches_between_cores(horizon, num_envs, mode, leaf_specs, strided, data):
    """Same returns (declines included) and the same storage and books, row after row, whether
    the rows and books are laid out as the storage lays them out or with gaps between envs."""
    counted = data.draw(hnp.arrays(np.bool_, num_envs))
    checked_bounds = {}
    for index, (dtype, shape) in enumerate(leaf_specs):
        if np.dtype(dtype).kind == "f" and data.draw(st.booleans()):
            elements = int(np.prod(shape))
            checked_bounds[index] = (np.full(elements, -1.0), np.full(elements, 1.0))
    rows_in = []
    for t in range(horizon):
        reward_dtype = data.draw(st.sampled_from([np.float64, np.float32, np.float64, np.int64]))
        rewards = data.draw(hnp.arrays(reward_dtype, num_envs, elements=st.integers(-5, 5)))
        flags = [data.draw(hnp.arrays(np.bool_, num_envs)) for _ in range(2)]
        if data.draw(st.integers(0, 5)) == 0:
            flags[0] = flags[0].astype(np.int64)  # not the bool arrays the fast path takes
        elif data.draw(st.integers(0, 5)) == 0:
            flags[1] = (flags[1].view(np.uint8) * 2).view(np.bool_)  # bools whose true byte is 2, not 1
        leaves = []
        for dtype, shape in leaf_specs:
            elements = st.floats(-1.5, 1.5, width=32) if np.dtype(dtype).kind == "f" else None
            leaf = data.draw(hnp.arrays(dtype, (num_envs,) + shape, elements=elements))
            how = data.draw(st.sampled_from(["as is", "transposed", "other dtype"]))
            if how == "transposed" and leaf.ndim >= 2:
                leaf = np.asfortranarray(leaf)  # same values, strides of a transposed array
            elif how == "other dtype":
                leaf = leaf.astype(np.float64 if leaf.dtype == np.float32 else np.float32)
            leaves.append(leaf)
        rows_in.append((rewards, flags[0], flags[1], leaves, float(data.draw(st.integers(0, 9)))))
    outcomes = []
    for core in CORES:
        rows, recorder, state = _vector_rows(core, horizon, num_envs, mode, leaf_specs, checked_bounds, counted, strided=strided)
        returned = []
        for t, (rewards, terminations, truncations, leaves, seconds) in enumerate(rows_in):
            n_done = rows.record(t, rewards, terminations, truncations, list(leaves), seconds)
            returned.append((n_done, state["done_columns"][: max(n_done, 0)].tolist()))
        outcomes.append((returned, recorder.completed_count, state))
    (r0, c0, s0), (r1, c1, s1) = outcomes
    assert r0 == r1 and c0 == c1
    for key in s0:
        if key != "done_columns":
            assert np.array_equal(s0[key], s1[key], equal_nan=True), key
            if s0[key].dtype == np.bool_:  # flags stored as NumPy's own True, whatever byte came in
                assert np.array_equal(s0[key].view(np.uint8), s1[key].view(np.uint8)), key
                assert s0[key].view(np.uint8).max(initial=0) <= 1, key


# Bounds that float32 cannot hold exactly, and ones it can, for the exactness of the float32 check.
_AWKWARD_BOUNDS = [0.1, -0.3, 1 / 3, -2.0 / 3, 1e-45, -1e-40, 0.0, -0.0, 1.0, 3.5e38, -3.5e38, 2.5, np.inf, -np.inf]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("side", ["low", "high"])
def test_both_cores_decide_each_awkward_bound_exactly_for_its_neighbours(dtype, side):
    """Every bound of the list, as a low or a high bound, against the value nearest to it in the
    leaf's dtype and that value's two neighbours: outside exactly when NumPy says so in float64."""
    for bound in _AWKWARD_BOUNDS:
        low, high = (np.array([bound]), np.array([np.inf])) if side == "low" else (np.array([-np.inf]), np.array([bound]))
        with np.errstate(over="ignore"):
            at = dtype(bound)
        for value in (at, np.nextafter(at, dtype(np.inf)), np.nextafter(at, dtype(-np.inf))):
            wide = np.float64(value)
            expected_outside = not (wide >= low[0] and wide <= high[0])
            for core in CORES:
                rows, _, _ = _vector_rows(core, 1, 1, "Disabled", [(dtype, (1,))], {0: (low, high)})
                flags = np.zeros(1, bool)
                returned = rows.record(0, np.zeros(1), flags, flags.copy(), [np.array([[value]], dtype)], 0.0)
                assert (returned < 0) == expected_outside, (core.__name__, bound, value)


@settings(max_examples=120, deadline=None)
@given(
    num_envs=st.integers(1, 70),
    elements=st.integers(1, 5),
    dtype=st.sampled_from([np.float32, np.float64]),
    data=st.data(),
)
def test_both_cores_decide_bounds_exactly_at_the_neighbours_of_awkward_bounds(num_envs, elements, dtype, data):
    """A value is outside exactly when NumPy says so in float64 (NaN outside), for values one
    representable step either side of bounds the leaf's dtype cannot hold exactly, and for
    blocks of many rows (the compiled check walks rows in tiles of bounds)."""
    bounds = [sorted(data.draw(st.lists(st.sampled_from(_AWKWARD_BOUNDS), min_size=2, max_size=2))) for _ in range(elements)]
    low, high = (np.array([pair[i] for pair in bounds], dtype=np.float64) for i in (0, 1))
    near = []
    with np.errstate(over="ignore"):  # +-3.5e38 is beyond float32: it rounds to infinity
        for bound in np.concatenate([low, high]):
            at = dtype(bound)
            near += [at, np.nextafter(at, dtype(np.inf)), np.nextafter(at, dtype(-np.inf))]
        low_in_dtype, high_in_dtype = low.astype(dtype), high.astype(dtype)
    candidates = st.sampled_from(near + [dtype(np.nan), dtype(0.0)])
    values = np.array(data.draw(st.lists(candidates, min_size=num_envs * elements, max_size=num_envs * elements)), dtype)
    values = values.reshape(num_envs, elements)
    if data.draw(st.booleans()):
        # Mostly inside, so that one value outside is found wherever it sits in the block.
        inside = np.clip(np.zeros_like(values), low_in_dtype, high_in_dtype)
        keep = data.draw(st.integers(0, values.size - 1))
        inside.flat[keep] = values.flat[keep]
        values = inside
    wide = values.astype(np.float64)
    expected_outside = bool((~(wide >= low) | ~(wide <= high)).any())
    for core in CORES:
        rows, _, state = _vector_rows(core, 1, num_envs, "Disabled", [(dtype, (elements,))], {0: (low, high)})
        flags = np.zeros(num_envs, bool)
        returned = rows.record(0, np.zeros(num_envs), flags, flags.copy(), [values.copy()], 0.0)
        assert (returned < 0) == expected_outside, core.__name__


def _record_all(rows, state, rows_in):
    return [rows.record(t, *row) for t, row in enumerate(rows_in)]


@pytest.mark.parametrize("num_envs", [8, 16, 19])
@pytest.mark.parametrize("flag", ["terminations", "truncations"])
def test_vector_row_recorder_books_an_end_wherever_it_sits_among_the_flags(num_envs, flag):
    """One end per row, by one flag alone, at every column in turn: first, last of each group of
    eight flags the compiled books read together, and in the tail after them."""
    for column in range(num_envs):
        for core in CORES:
            rows, recorder, state = _vector_rows(core, 1, num_envs, "Disabled", [(np.float32, (1,))], {})
            flags = {name: np.zeros(num_envs, bool) for name in ("terminations", "truncations")}
            flags[flag][column] = True
            rewards = np.arange(1.0, num_envs + 1.0)
            leaves = [np.zeros((num_envs, 1), np.float32)]
            assert rows.record(0, rewards, flags["terminations"], flags["truncations"], leaves, 0.0) == 1, core.__name__
            assert state["done_columns"][0] == column
            count = recorder.completed_count
            assert count == 1 and state["completed_returns"][0] == column + 1.0 and state["completed_lengths"][0] == 1


@pytest.mark.parametrize("core", CORES, ids=["compiled", "python"])
def test_vector_row_recorder_keeps_next_step_reset_rows_out_of_the_episodes(core):
    rows, recorder, state = _vector_rows(core, 3, 2, "NextStep", [(np.float32, (2,))], {})
    obs = [np.array([[1, 1], [2, 2]], np.float32), np.array([[3, 3], [4, 4]], np.float32), np.zeros((2, 2), np.float32)]
    step = [
        (np.array([1.0, 2.0]), np.array([True, False]), np.array([False, False]), [obs[0]], 4.0),
        # Env 0 spends this step on its reset: its reward belongs to no episode.
        (np.array([5.0, 3.0]), np.array([False, False]), np.array([False, True]), [obs[1]], 4.0),
        (np.array([7.0, 1.0]), np.array([False, False]), np.array([False, False]), [obs[2]], 2.0),
    ]
    assert _record_all(rows, state, step) == [1, 1, 0]
    assert state["reset_steps"].tolist() == [[False, False], [True, False], [False, True]]
    # The terminal observations are row t + 1's own, copied into final_observations[t].
    np.testing.assert_array_equal(state["finals0"][0, 0], [1, 1])
    np.testing.assert_array_equal(state["finals0"][1, 1], [4, 4])
    np.testing.assert_array_equal(state["observations0"][1:], np.stack(obs))
    count = recorder.completed_count
    assert state["completed_returns"][:count].tolist() == [1.0, 5.0]
    assert state["completed_lengths"][:count].tolist() == [1, 2]
    assert state["completed_seeds"][:count].tolist() == [0, 10]
    # After an end the vector env picks the next seed itself: recorded as unknown.
    assert state["running_seeds"].tolist() == [-1, -1]
    assert state["running_returns"].tolist() == [7.0, 0.0] and state["running_lengths"].tolist() == [1, 0]
    assert state["counted"].tolist() == [True, True]
    assert state["step_seconds"].tolist() == [5.0, 5.0]


@pytest.mark.parametrize("core", CORES, ids=["compiled", "python"])
@pytest.mark.parametrize("mode", ["SameStep", "Disabled"])
def test_vector_row_recorder_copies_terminal_rows_only_where_the_vector_env_does_not_return_them(core, mode):
    rows, recorder, state = _vector_rows(core, 1, 2, mode, [(np.int64, ())], {})
    n_done = rows.record(0, np.ones(2), np.array([False, True]), np.array([False, False]), [np.array([3, 4])], 0.0)
    assert n_done == 1 and state["done_columns"][0] == 1
    assert state["finals0"][0].tolist() == ([0, 0] if mode == "SameStep" else [0, 4])
    assert state["reset_steps"].tolist() == [[False, False]]
    # SameStep: the vector env reset it with a seed of its own, unknown; Disabled: the caller resets
    # it and records its seed.
    assert state["running_seeds"].tolist() == ([0, -1] if mode == "SameStep" else [0, 10])


@pytest.mark.parametrize("core", CORES, ids=["compiled", "python"])
@pytest.mark.parametrize("mode", VECTOR_MODES)
def test_vector_row_recorder_books_a_stored_row_as_it_records_one(core, mode):
    """``book`` (the general path's row, stored by the caller) keeps the books ``record`` keeps."""
    rows = [np.array([[1, 2], [3, 4]]), np.array([[5, 6], [7, 8]])]
    steps = [
        (np.array([1.0, 2.0]), np.array([True, False]), np.array([False, False])),
        (np.array([5.0, 3.0]), np.array([False, False]), np.array([False, True])),
    ]
    states = []
    for stored in (False, True):
        recorder_rows, recorder, state = _vector_rows(core, 2, 2, mode, [(np.int64, (2,))], {})
        returned = []
        for t, (rewards, terminations, truncations) in enumerate(steps):
            if stored:
                state["observations0"][t + 1] = rows[t]
                returned.append(recorder_rows.book(t, rewards, terminations, truncations, 2.0))
            else:
                returned.append(recorder_rows.record(t, rewards, terminations, truncations, [rows[t]], 2.0))
        states.append((returned, recorder.completed_count, {name: np.array(value) for name, value in state.items()}))
    (recorded, recorded_count, recorded_state), (booked, booked_count, booked_state) = states
    assert recorded == booked and recorded_count == booked_count and recorded_count > 0
    for name in recorded_state:
        np.testing.assert_array_equal(recorded_state[name], booked_state[name], err_msg=name)


@pytest.mark.parametrize("core", CORES, ids=["compiled", "python"])
def test_vector_row_recorder_books_only_rows_as_the_storage_holds_them(core):
    recorder_rows, _, _ = _vector_rows(core, 1, 2, "NextStep", [(np.int64, ())], {})
    flags = np.zeros(2, bool)
    for rewards, terminations in ((np.zeros(2, np.float32), flags), (np.zeros(3), flags), (np.zeros(2), flags.view(np.uint8))):
        with pytest.raises(TypeError, match="contiguous float64 array of shape \\(2,\\)"):
            recorder_rows.book(0, rewards, terminations, flags, 0.0)


@pytest.mark.parametrize("core", CORES, ids=["compiled", "python"])
def test_vector_row_recorder_declines_what_needs_the_general_rules_and_writes_nothing(core):
    low, high = np.full(2, -1.0), np.full(2, 1.0)
    counted = np.array([True, False])
    good = (np.ones(2), np.zeros(2, bool), np.zeros(2, bool), [np.zeros((2, 2), np.float32)], 1.0)
    declined = {
        "int rewards": (np.ones(2, np.int64),) + good[1:],
        "list rewards": ([1.0, 1.0],) + good[1:],
        "int flags": (good[0], np.zeros(2, np.int64)) + good[2:],
        "a value outside the bounds": good[:3] + ([np.array([[0, 0], [0, 2]], np.float32)], 1.0),
        "NaN": good[:3] + ([np.array([[0, np.nan], [0, 0]], np.float32)], 1.0),
        "another dtype": good[:3] + ([np.zeros((2, 2), np.float64)], 1.0),
        "another shape": good[:3] + ([np.zeros((2, 3), np.float32)], 1.0),
        "an end at a reset step": (good[0], np.array([False, True]), good[2], good[3], 1.0),
        "strided rewards": (np.ones(4)[::2],) + good[1:],
    }
    for name, arguments in declined.items():
        rows, recorder, state = _vector_rows(core, 1, 2, "NextStep", [(np.float32, (2,))], {0: (low, high)}, counted)
        before = {key: value.copy() for key, value in state.items()}
        assert rows.record(0, *arguments) == -1, name
        if name in ("a value outside the bounds", "NaN"):
            # Checked where they are stored: the row is written, as the general path writes it again.
            np.testing.assert_array_equal(state["observations0"][1], arguments[3][0])
            before["observations0"][1] = arguments[3][0]
        for key, value in state.items():
            assert np.array_equal(value, before[key], equal_nan=True), (name, key)
    rows, recorder, state = _vector_rows(core, 1, 2, "NextStep", [(np.float32, (2,))], {0: (low, high)}, counted)
    assert rows.record(0, *good) == 0


def _vector_rows_with(core, horizon=2, num_envs=2, **changes):
    recorder, state = _recorder_state(core, horizon, num_envs, 0)
    arguments = {
        "recorder": recorder,
        "writers": [core.ObservationWriter(np.zeros((3, 2, 2), np.float32), np.zeros((2, 2, 2), np.float32))],
        "checked_leaves": [],
        "reset_steps": np.zeros((horizon, num_envs), bool),
        "counted": np.ones(num_envs, bool),
        "step_seconds": None,
        "autoreset_mode": "NextStep",
    }
    for name, change in changes.items():
        arguments[name] = change(core) if callable(change) else change
    return core.VectorRowRecorder(*arguments.values())


VECTOR_ROW_PARTS_THAT_DISAGREE = {
    "no-writers": {"writers": []},
    "writer-too-short": {"writers": lambda core: [core.ObservationWriter(np.zeros((2, 2, 2), np.float32), np.zeros((1, 2, 2), np.float32))]},
    "writer-too-wide": {"writers": lambda core: [core.ObservationWriter(np.zeros((3, 3, 2), np.float32), np.zeros((2, 3, 2), np.float32))]},
    "writer-not-a-writer": {"writers": ["not a writer"]},
    "writers-a-tuple": {"writers": lambda core: (core.ObservationWriter(np.zeros((3, 2, 2), np.float32), np.zeros((2, 2, 2), np.float32)),)},
    "recorder-not-a-recorder": {"recorder": "a recorder"},
    "checked-leaf-outside": {"checked_leaves": [(1, np.zeros(2), np.ones(2))]},
    "bounds-too-long": {"checked_leaves": [(0, np.zeros(3), np.ones(3))]},
    "checked-leaves-a-tuple": {"checked_leaves": ()},
    "int-reset-steps": {"reset_steps": np.zeros((2, 2), np.int64)},
    "reset-steps-too-short": {"reset_steps": np.zeros((1, 2), bool)},
    "counted-too-long": {"counted": np.ones(3, bool)},
    "counted-strided": {"counted": np.ones(4, bool)[::2]},
    "float32-step-seconds": {"step_seconds": np.zeros(2, np.float32)},
    "unknown-mode": {"autoreset_mode": "NEXT_STEP"},
}


@pytest.mark.parametrize("case", sorted(VECTOR_ROW_PARTS_THAT_DISAGREE))
def test_both_cores_refuse_a_vector_row_recorder_whose_parts_disagree(case):
    assert_both_refuse(lambda core: _vector_rows_with(core, **VECTOR_ROW_PARTS_THAT_DISAGREE[case]), (TypeError, ValueError, IndexError))


BAD_VECTOR_ROW_CALLS = {
    # name: (t, leaves, seconds, the error)
    "t-past-the-horizon": (2, "one", 0.0, IndexError),
    "t-a-float": (1.5, "one", 0.0, TypeError),
    "t-none": (None, "one", 0.0, TypeError),
    "no-leaves": (0, [], 0.0, ValueError),
    "leaves-a-tuple": (0, "tuple", 0.0, TypeError),
    "seconds-text": (0, "one", "0.5", TypeError),
    "seconds-none": (0, "one", None, TypeError),
}


@pytest.mark.parametrize("case", sorted(BAD_VECTOR_ROW_CALLS))
def test_both_cores_refuse_the_same_vector_row_calls(case):
    t, leaves, seconds, error = BAD_VECTOR_ROW_CALLS[case]
    leaf = np.zeros((2, 2), np.float32)
    leaves = {"one": [leaf], "tuple": (leaf,)}.get(leaves, leaves) if isinstance(leaves, str) else leaves
    rows = {core: _vector_rows_with(core) for core in CORES}
    assert_both_refuse(
        lambda core: rows[core].record(t, np.ones(2), np.zeros(2, bool), np.zeros(2, bool), leaves, seconds), error
    )


@pytest.mark.parametrize("core", CORES, ids=["compiled", "python"])
def test_vector_row_recorder_refuses_a_row_that_would_overflow_the_episode_buffers(core):
    rows, recorder, state = _vector_rows(core, 2, 2, "Disabled", [(np.float32, ())], {})
    ends = (np.ones(2), np.ones(2, bool), np.zeros(2, bool), [np.zeros(2, np.float32)], 0.0)
    assert rows.record(0, *ends) == 2 and rows.record(1, *ends) == 2
    with pytest.raises(ValueError, match="full"):
        rows.record(1, *ends)


@pytest.mark.parametrize(
    "storage_dtype, given, taken",
    [
        # One type number, another size: stored bytes would be reinterpreted; both cores decline.
        ("datetime64[ms]", np.array([5, 6], "datetime64[s]"), False),
        # Two type numbers, one type: both cores take the row.
        (np.longlong, np.array([5, 6], np.int64), True),
    ],
)
def test_both_cores_judge_a_row_s_dtype_by_equivalence_and_size_not_by_type_number(storage_dtype, given, taken):
    outcomes = []
    for core in CORES:
        rows, recorder, state = _vector_rows(core, 1, 2, "Disabled", [(storage_dtype, ())], {})
        n_done = rows.record(0, np.ones(2), np.zeros(2, bool), np.zeros(2, bool), [given], 0.0)
        outcomes.append((n_done, state["observations0"][1].copy()))
    assert [n_done >= 0 for n_done, _ in outcomes] == [taken, taken]
    np.testing.assert_array_equal(outcomes[0][1], outcomes[1][1])
    if taken:
        assert outcomes[0][1].tolist() == [5, 6]


# -- every bad argument: the same exception, with the same message, from both cores -------------

#: Values a caller may pass where an index, count or offset is expected: good ones, ones past
#: either end, ones past what a C ``Py_ssize_t`` holds, and ones that are no integer at all.
any_integer_argument = st.one_of(
    st.integers(-3, 6),
    st.sampled_from([2**63 - 1, 2**63, -(2**63) - 1, 2**70, -(2**70)]),
    st.integers(-3, 6).map(np.int64),
    st.integers(0, 6).map(np.uint8),
    st.booleans(),
    st.floats(-3, 6),
    st.just(float("nan")),
    st.sampled_from([None, "1", b"1", 1 + 0j, [1], np.array(1), np.array([1]), np.float64(1.0)]),
)
#: Values where a list of one entry per env is expected.
any_list_argument = st.one_of(
    st.integers(0, 4).map(lambda n: [0.0] * n),
    st.integers(0, 4).map(lambda n: (0.0,) * n),
    st.integers(0, 4).map(np.zeros),
    st.sampled_from([None, "ab", {0: 0.0, 1: 0.0}]),
)
#: Values an env may return as a reward or an end flag.
any_step_value = st.one_of(
    st.floats(allow_nan=True),
    st.integers(-2, 2),
    st.booleans(),
    st.sampled_from([None, "1.5", "yes", b"1", [1.0], [], np.array([1.0, 2.0]), np.array([]), np.float32(2.5), np.bool_(True), 1 + 2j]),
)


def test_a_fractional_env_offset_is_refused_alike_by_both_cores():
    """A case once found: the pure-Python core recorded env 1 where the compiled core raised TypeError."""
    kind, message = assert_both_refuse(lambda core: core.StepRecorder(*_recorder_state(core, 2, 2, 0)[1].values(), 1.5))
    assert kind is TypeError and message == "`env_offset` must be an integer; got float 1.5."


@settings(max_examples=150, deadline=None)
@given(env_offset=any_integer_argument)
def test_both_cores_take_or_refuse_every_env_offset_alike(env_offset):
    assert_same_outcome(
        *(lambda core=core: _built(core.StepRecorder(*_recorder_state(core, 2, 2, 0)[1].values(), env_offset)) for core in CORES)
    )


@settings(max_examples=150, deadline=None)
@given(t=any_integer_argument, rewards=any_list_argument, terminations=any_list_argument, truncations=any_list_argument)
def test_both_cores_record_or_refuse_every_step_alike(t, rewards, terminations, truncations):
    states = {core: _recorder_state(core, 2, 2, 0) for core in CORES}
    assert_same_outcome(
        *(lambda core=core: states[core][0].record_step(t, rewards, terminations, truncations) for core in CORES)
    )
    for key in states[compiled][1]:
        assert np.array_equal(states[compiled][1][key], states[python_core][1][key], equal_nan=True), key


@settings(max_examples=150, deadline=None)
@given(values=st.lists(st.tuples(any_step_value, any_step_value, any_step_value), min_size=3, max_size=3))
def test_both_cores_refuse_the_same_first_bad_reward_or_flag(values):
    """Rewards and flags are converted env by env, reward first: the first bad one decides in both."""
    states = {core: _recorder_state(core, 2, 3, 0) for core in CORES}
    rewards, terminations, truncations = (list(column) for column in zip(*values))
    assert_same_outcome(
        *(lambda core=core: states[core][0].record_step(0, rewards, terminations, truncations) for core in CORES)
    )
    for key in states[compiled][1]:
        assert np.array_equal(states[compiled][1][key], states[python_core][1][key], equal_nan=True), key


@settings(max_examples=150, deadline=None)
@given(t=any_integer_argument, counted=st.one_of(st.none(), any_list_argument, st.sampled_from([np.ones(2, bool), np.ones(3, bool), np.ones(2)])))
def test_both_cores_book_or_refuse_every_stored_row_alike(t, counted):
    states = {core: _recorder_state(core, 2, 2, 0) for core in CORES}
    for _, state in states.values():
        state["rewards"][:] = 1.0
        state["terminations"][0, 1] = True
    assert_same_outcome(*(lambda core=core: states[core][0].record_rows(t, counted) for core in CORES))
    for key in states[compiled][1]:
        assert np.array_equal(states[compiled][1][key], states[python_core][1][key], equal_nan=True), key


@settings(max_examples=150, deadline=None)
@given(row=any_integer_argument, column=any_integer_argument, count=any_integer_argument, sources=any_list_argument)
def test_both_cores_write_or_refuse_every_row_column_and_count_alike(row, column, count, sources):
    pairs = {core: _observation_pair(leaf=()) for core in CORES}
    writers = {core: core.ObservationWriter(*pairs[core]) for core in CORES}
    assert_same_outcome(*(lambda core=core: writers[core].write_rows(row, sources) for core in CORES))
    assert_same_outcome(*(lambda core=core: writers[core].write_row(row, column, 1.0) for core in CORES))
    done = np.array([1, 0], np.int64)
    assert_same_outcome(*(lambda core=core: writers[core].scatter_final(row, done, count) for core in CORES))
    assert_same_outcome(*(lambda core=core: writers[core].scatter_final(0, np.array([column if isinstance(column, int) and abs(column) < 2**62 else 5], np.int64), 1) for core in CORES))
    for index in range(2):
        np.testing.assert_array_equal(pairs[compiled][index], pairs[python_core][index])


@settings(max_examples=100, deadline=None)
@given(t=any_integer_argument, actions=any_list_argument)
def test_both_cores_step_or_refuse_every_time_step_and_action_list_alike(t, actions):
    good = (_obs(0.5), 1.0, False, False, {"x": 1.0})
    steppers = {core: _stepper_setup(core, [[good] * 3, [good] * 3], horizon=3) for core in CORES}
    assert_same_outcome(*(lambda core=core: steppers[core][0].step(t, actions) for core in CORES))
    rows = {core: _row_setup(core, [[good] * 2, [good] * 2], [[], []], horizon=2)[0] for core in CORES}
    assert_same_outcome(*(lambda core=core: rows[core].step(t) for core in CORES))


@settings(max_examples=100, deadline=None)
@given(t=any_integer_argument, seconds=st.one_of(st.floats(allow_nan=True), st.integers(-2, 2), any_integer_argument))
def test_both_cores_record_or_refuse_every_vector_row_alike(t, seconds):
    rows = {core: _vector_rows_with(core) for core in CORES}
    leaf = np.zeros((2, 2), np.float32)
    assert_same_outcome(
        *(lambda core=core: rows[core].record(t, np.ones(2), np.zeros(2, bool), np.zeros(2, bool), [leaf], seconds) for core in CORES)
    )


def test_both_cores_refuse_a_split_of_the_wrong_length_alike():
    good = (_obs(0.5), 1.0, False, False, {})
    for split in (lambda t: [0], lambda t: (0, 0), lambda t: None):
        steppers = {}
        for core in CORES:
            recorder, state = _recorder_state(core, 1, 2, 0)
            writer = core.ObservationWriter(np.zeros((2, 2, 2), np.float32), np.zeros((1, 2, 2), np.float32))
            stepper = core.EnvStepper([_EpisodeEnv([good], []), _EpisodeEnv([good], [])], [writer], recorder, None, (), [])
            steppers[core] = core.RowStepper(
                stepper, [np.zeros((1, 2), np.int64)], split, None, state["running_seeds"], [], _HookLog()
            )
        kind, message = assert_same_outcome(*(lambda core=core: steppers[core].step(0) for core in CORES))
        assert kind in (TypeError, ValueError) and "`actions`" in message


bad_bound_values = st.one_of(
    st.sampled_from([np.float64(1.0), np.zeros((0,)), np.zeros((2, 0)), np.zeros((0, 3)), [[0.5]], [["a"]], [[1 + 1j]]]),
    st.sampled_from(["U1", "S1", "c16", "O", "M8[s]", "m8[s]", "f2", ">f8", ">i4", "?", "u8", "V8"]).map(
        lambda dtype: np.zeros((2, 1), dtype)
    ),
)


@settings(max_examples=150, deadline=None)
@given(values=bad_bound_values, low=st.sampled_from([[0.0], [0.0, 0.0], [], "a", np.zeros(1, np.float32), [[0.0]]]))
def test_both_cores_check_or_refuse_every_odd_bounds_check_alike(values, low):
    assert_same_outcome(*(lambda core=core: core.find_out_of_bounds(values, low, [1.0]) for core in CORES))
