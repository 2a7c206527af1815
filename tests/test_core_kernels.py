"""Each typed kernel of the compiled core (``_kernels``) against its NumPy reference (``kernels``), dtype by dtype.

Every case runs the same calls on two copies of the same storage, one per
build, and compares what each call returned and every array afterwards, bit for bit.
"""

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from parallel_rollouts.core import _kernels as compiled
from parallel_rollouts.core import kernels as reference

DTYPES = [
    np.uint8, np.int8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64,
    np.float16, np.float32, np.float64, np.bool_,
]
BUILDS = {"compiled": compiled, "reference": reference}


def _same(left, right):
    assert left.dtype == right.dtype and left.shape == right.shape
    assert left.tobytes() == right.tobytes()


def _leaf(dtype, rows, envs, shape, seed=0, column_slice=False):
    """``[rows, envs, *shape]`` storage and its finals, random; with ``column_slice``, a column slice
    of a wider array (rows of the envs not end to end)."""
    rng = np.random.default_rng(seed)
    width = envs + 2 if column_slice else envs
    raw = rng.integers(0, 256, size=(rows * width * int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize,), dtype=np.uint8)
    full = raw.view(dtype).reshape((rows, width) + shape).copy() if raw.size else np.zeros((rows, width) + shape, dtype)
    if dtype == np.bool_:
        full = full.view(np.uint8) % 2 == 1
    finals = np.zeros((rows - 1, width) + shape, dtype)
    if column_slice:
        return full[:, 1 : 1 + envs], finals[:, 1 : 1 + envs]
    return full, finals


def _pair(dtype, rows, envs, shape, column_slice=False):
    """The same storage twice, and a ``RowBytes`` of each build over its own copy."""
    built = {}
    for name, build in BUILDS.items():
        observations, finals = _leaf(dtype, rows, envs, shape, column_slice=column_slice)
        built[name] = (build.RowBytes(observations, finals), observations, finals)
    return built


def _value(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    return rng.normal(size=shape).astype(dtype) if np.dtype(dtype).kind == "f" else rng.integers(0, 2, size=shape).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(), (3,), (2, 3)], ids=["scalar", "vector", "matrix"])
@pytest.mark.parametrize("column_slice", [False, True], ids=["own", "column-slice"])
def test_row_copies_match_the_reference(dtype, shape, column_slice):
    built = _pair(dtype, rows=3, envs=4, shape=shape, column_slice=column_slice)
    exact = _value(dtype, shape, 1)
    sources = [
        exact,                                           # copied
        _value(np.float32 if dtype != np.float32 else np.float64, shape, 2),  # another dtype: refused
        np.asfortranarray(np.stack([exact, exact], -1))[..., 0] if shape else exact,  # strided view
        exact.astype(exact.dtype.newbyteorder()),        # byte-swapped: refused (but uint8/bool)
        np.zeros(shape + (1,), dtype),                   # wrong shape: refused
        exact.tolist(),                                  # not an array: refused
    ]
    for k, source in enumerate(sources):
        outcomes = {name: rows.copy_exact(1, k % 4, source) for name, (rows, _, _) in built.items()}
        assert outcomes["compiled"] == outcomes["reference"], (k, outcomes)
    block = np.stack([_value(dtype, shape, 10 + j) for j in range(4)])
    strided_block = np.stack([block, block], axis=-1)[..., 1] if shape else block[::1]
    for row, candidate in ((2, block), (1, strided_block), (0, block[::-1])):
        exact_block = {name: rows.is_exact_block(candidate) for name, (rows, _, _) in built.items()}
        assert exact_block["compiled"] == exact_block["reference"] is True
        for rows, _, _ in built.values():
            rows.store_block(row, candidate)
    for refused in (block.astype(np.float32 if dtype != np.float32 else np.float64), block[:3], block.tolist()):
        assert {rows.is_exact_block(refused) for rows, _, _ in built.values()} == {False}
    columns = np.array([3, 0, 2, 1], np.int64)
    for count in (0, 2, 4):
        for rows, _, _ in built.values():
            rows.scatter(count % 2, columns, count)
    (_, observations, finals), (_, expected_observations, expected_finals) = built["compiled"], built["reference"]
    _same(observations, expected_observations)
    _same(finals, expected_finals)


BOUNDED_DTYPES = [np.uint8, np.int8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64, np.float16, np.float32, np.float64, np.bool_]


@settings(max_examples=80, deadline=None)
@given(
    dtype=st.sampled_from(BOUNDED_DTYPES),
    elements=st.integers(1, 5),
    envs=st.integers(1, 5),
    column_slice=st.booleans(),
    data=st.data(),
)
def test_bounds_checks_in_place_match_the_reference(dtype, elements, envs, column_slice, data):
    bound = st.one_of(
        st.floats(allow_nan=True, allow_infinity=True, width=64),
        st.sampled_from([0.0, -1.0, 1.0, 255.0, 2.0**63, -(2.0**63), 1e-40, -1e-40, 2.0**53 + 1]),
    )
    low = np.array(data.draw(st.lists(bound, min_size=elements, max_size=elements)), np.float64)
    high = np.array(data.draw(st.lists(bound, min_size=elements, max_size=elements)), np.float64)
    values = data.draw(hnp.arrays(dtype, (3, envs + 2, elements)))
    outcomes = {}
    for name, build in BUILDS.items():
        storage = values.copy()
        observations = storage[:, 1 : 1 + envs] if column_slice else storage[:, :envs].copy()
        rows = build.RowBytes(observations, np.zeros((2,) + observations.shape[1:], dtype))
        columns = np.arange(envs, dtype=np.int64)[::-1].copy()
        rows.scatter(0, columns, envs)
        bounds = build.LeafBounds(rows, low, high)
        outcomes[name] = (
            bounds.typed,
            [bounds.row_outside(row) for row in range(3)],
            [bounds.finals_outside(0, columns, count) for count in range(envs + 1)],
        )
    assert outcomes["compiled"] == outcomes["reference"]
    # And the reference is the one-line rule: any value outside its bounds, NaN included.
    checked = (values[:, 1 : 1 + envs] if column_slice else values[:, :envs]).astype(np.float64)
    expected = [bool((~((checked[row] >= low) & (checked[row] <= high))).any()) for row in range(3)]
    assert outcomes["reference"][1] == expected


def _books(build, horizon, envs, capacity, column_slice, seed=0):
    rng = np.random.default_rng(seed)
    width = envs + 1 if column_slice else envs
    cut = (slice(None), slice(1, None)) if column_slice else (slice(None), slice(None))
    state = {
        "rewards": np.zeros((horizon, width))[cut],
        "terminations": np.zeros((horizon, width), bool)[cut],
        "truncations": np.zeros((horizon, width), bool)[cut],
        "step_episode_seeds": np.zeros((horizon, width), np.int64)[cut],
        "running_returns": rng.normal(size=envs),
        "running_lengths": rng.integers(0, 9, envs).astype(np.int64),
        "running_seeds": rng.integers(-1, 99, envs).astype(np.int64),
        "completed_returns": np.zeros(capacity),
        "completed_lengths": np.zeros(capacity, np.int64),
        "completed_env_indices": np.zeros(capacity, np.int64),
        "completed_end_steps": np.zeros(capacity, np.int64),
        "completed_seeds": np.zeros(capacity, np.int64),
        "done_columns": np.zeros(envs, np.int64),
    }
    return build.EpisodeBooks(*state.values(), 7), state


def _same_state(left: dict, right: dict):
    for field in left:
        _same(np.asarray(left[field]), np.asarray(right[field]))


@settings(max_examples=60, deadline=None)
@given(
    envs=st.integers(1, 19),
    horizon=st.integers(1, 5),
    capacity_room=st.integers(0, 6),
    column_slice=st.booleans(),
    data=st.data(),
)
def test_episode_books_match_the_reference(envs, horizon, capacity_room, column_slice, data):
    rewards = data.draw(hnp.arrays(np.float64, (horizon, envs), elements=st.floats(-10, 10)))
    flags = data.draw(hnp.arrays(np.uint8, (horizon, envs), elements=st.integers(0, 3)))
    counted = data.draw(hnp.arrays(np.bool_, (horizon, envs)))
    use_rows = data.draw(hnp.arrays(np.bool_, (horizon,)))
    seen = {}
    for name, build in BUILDS.items():
        books, state = _books(build, horizon, envs, capacity_room, column_slice)
        returned = []
        for t in range(horizon):
            if use_rows[t]:
                state["rewards"][t] = rewards[t]
                state["terminations"][t] = flags[t] & 1 != 0
                state["truncations"][t] = flags[t] & 2 != 0
                returned.append(books.record_rows(t, counted[t] if t % 2 else None))
            else:
                np.asarray(books.rewards_now)[:] = rewards[t]
                np.asarray(books.flags_now)[:] = flags[t]
                returned.append(books.record_scratch(t))
            if returned[-1] > 0:
                books.forget_seeds(returned[-1] // 2)
        seen[name] = (returned, books.completed_count, books.capacity, state)
    assert seen["compiled"][:3] == seen["reference"][:3]
    _same_state(seen["compiled"][3], seen["reference"][3])


@settings(max_examples=60, deadline=None)
@given(
    envs=st.integers(1, 19),
    horizon=st.integers(1, 5),
    next_step=st.booleans(),
    reward_dtype=st.sampled_from([np.float64, np.float32]),
    column_slice=st.booleans(),
    timed=st.booleans(),
    data=st.data(),
)
def test_vector_row_books_match_the_reference(envs, horizon, next_step, reward_dtype, column_slice, timed, data):
    rewards = data.draw(hnp.arrays(reward_dtype, (horizon, envs), elements=st.floats(-10, 10, width=32)))
    # Ends are rare in the rows of a real vector env; here any pattern, as raw bool bytes too.
    raw_flags = data.draw(hnp.arrays(np.uint8, (horizon, 2, envs), elements=st.sampled_from([0, 0, 0, 1, 2])))
    counted_start = data.draw(hnp.arrays(np.bool_, (envs,)))
    seen = {}
    for name, build in BUILDS.items():
        books, state = _books(build, horizon, envs, horizon * envs, column_slice)
        reset_steps = np.zeros((horizon, envs), bool)
        counted = counted_start.copy()
        seconds = np.zeros(envs) if timed else None
        vector = build.VectorRowBooks(books, reset_steps, counted, seconds)
        returned = []
        for t in range(horizon):
            terminations, truncations = raw_flags[t].view(np.bool_)
            step = (
                vector.reward_kind(rewards[t], terminations, truncations),
                vector.reward_kind(rewards[t].astype(np.float16), terminations, truncations),
                vector.reward_kind(rewards[t], terminations.astype(np.uint8), truncations),
                vector.ended_uncounted(terminations, truncations),
                vector.room_for(terminations, truncations),
                vector.book(t, rewards[t], terminations, truncations, 0.25),
            )
            if next_step:
                # The mask of the next row, as the recorder sets it under NEXT_STEP.
                vector.count_unended(terminations, truncations)
            returned.append(step)
            if step[-1]:
                books.forget_seeds(step[-1])
        seen[name] = (returned, books.completed_count, state, reset_steps, counted, seconds)
    assert seen["compiled"][:2] == seen["reference"][:2]
    _same_state(seen["compiled"][2], seen["reference"][2])
    for left, right in zip(seen["compiled"][3:], seen["reference"][3:]):
        if left is not None:
            _same(left, right)


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_books_without_room_write_nothing(name):
    build = BUILDS[name]
    books, state = _books(build, 2, 3, 1, False)
    before = {field: np.array(value, copy=True) for field, value in state.items()}
    np.asarray(books.flags_now)[:] = [1, 0, 2]
    assert books.record_scratch(0) == -1
    state["terminations"][1] = [True, True, False]
    assert books.record_rows(1, None) == -1
    state["terminations"][1] = False
    _same_state(state, before)
    assert books.completed_count == 0


def test_the_compiled_clock_reads_the_reference_s_monotonic_clock():
    clock = compiled.Clock()
    before = time.perf_counter()
    now = clock.now()
    after = time.perf_counter()
    assert before <= now <= after
    assert reference.Clock().now() >= after


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_a_bool_byte_other_than_one_is_true_for_the_bounds_checks(name):
    build = BUILDS[name]
    raw = np.array([[[0], [2]], [[1], [255]]], np.uint8)  # two rows of two envs, one element
    flags = raw.view(np.bool_)
    inside = (np.zeros(1), np.ones(1))
    assert build.find_out_of_bounds(flags.reshape(2, 2), np.zeros(2), np.ones(2)) == -1
    rows = build.RowBytes(flags.copy(), np.zeros((1, 2, 1), bool))
    bounds = build.LeafBounds(rows, *inside)
    assert bounds.typed and not bounds.row_outside(0) and not bounds.row_outside(1)
    # True (any nonzero byte) is 1.0: outside bounds that end below one.
    assert build.LeafBounds(rows, np.zeros(1), np.full(1, 0.5)).row_outside(0)


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_storage_in_the_other_byte_order_is_checked_by_its_values(name):
    build = BUILDS[name]
    observations = np.full((2, 3, 1), 5.0, np.dtype(">f4"))
    rows = build.RowBytes(observations, np.zeros((1, 3, 1), np.dtype(">f4")))
    bounds = build.LeafBounds(rows, np.zeros(1), np.ones(1))
    assert not bounds.typed and bounds.row_outside(0)
    observations[1] = 0.5
    assert not bounds.row_outside(1)
