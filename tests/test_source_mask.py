"""The source's mask: a row the mask does not count belongs to no episode, whatever the autoreset mode.

The kernels apply the mask they are given; the NEXT_STEP rule (an ended sub-env's next step is
its reset) lives in ``VectorRowRecorder``, which sets the mask of the next row. Both cores.
"""

import numpy as np
import pytest

from parallel_rollouts.core import _core as compiled
from parallel_rollouts.core import rows as python_core
from tests.test_core_equivalence import _recorder_state

CORES = [compiled, python_core]


def _vector_row(core, mode, counted, horizon=3):
    num_envs = counted.size
    recorder, state = _recorder_state(core, horizon, num_envs, 0)
    writer = core.ObservationWriter(np.zeros((horizon + 1, num_envs, 2), np.float32), np.zeros((horizon, num_envs, 2), np.float32))
    reset_steps = np.zeros((horizon, num_envs), bool)
    rows = core.VectorRowRecorder(recorder, [writer], [], reset_steps, counted, None, mode)
    return rows, state, reset_steps


@pytest.mark.parametrize("core", CORES, ids=["compiled", "python"])
@pytest.mark.parametrize("mode", ["SameStep", "Disabled"])
def test_a_caller_s_mask_marks_its_rows_and_keeps_them_out_of_the_books(core, mode):
    counted = np.array([True, False, True])
    rows, state, reset_steps = _vector_row(core, mode, counted)
    observations = [np.ones((3, 2), np.float32)]
    ended = np.array([False, False, True])
    assert rows.record(0, np.array([1.0, 2.0, 4.0]), ended, np.zeros(3, bool), observations, 0.0) == 1
    np.testing.assert_array_equal(reset_steps[0], [False, True, False])
    np.testing.assert_array_equal(state["running_returns"], [1.0, 0.0, 0.0])
    np.testing.assert_array_equal(state["running_lengths"], [1, 0, 0])
    assert state["completed_returns"][0] == 4.0 and state["completed_lengths"][0] == 1
    # Outside NEXT_STEP the mask stays as the caller set it.
    np.testing.assert_array_equal(counted, [True, False, True])


@pytest.mark.parametrize("core", CORES, ids=["compiled", "python"])
def test_under_next_step_the_recorder_sets_the_next_row_s_mask_to_the_sub_envs_that_did_not_end(core):
    counted = np.ones(3, bool)
    rows, state, reset_steps = _vector_row(core, "NextStep", counted)
    observations = [np.ones((3, 2), np.float32)]
    ended = np.array([False, True, False])
    assert rows.record(0, np.array([1.0, 2.0, 4.0]), ended, np.zeros(3, bool), observations, 0.0) == 1
    np.testing.assert_array_equal(counted, [True, False, True])
    # The next row is the ended sub-env's reset step: marked, adding neither reward nor length.
    assert rows.record(1, np.array([1.0, 8.0, 1.0]), np.zeros(3, bool), np.zeros(3, bool), observations, 0.0) == 0
    np.testing.assert_array_equal(reset_steps[1], [False, True, False])
    np.testing.assert_array_equal(state["running_returns"], [2.0, 0.0, 5.0])
    np.testing.assert_array_equal(state["running_lengths"], [2, 0, 2])
    np.testing.assert_array_equal(counted, [True, True, True])


@pytest.mark.parametrize("core", CORES, ids=["compiled", "python"])
@pytest.mark.parametrize("mode", ["NextStep", "Disabled"])
def test_an_end_reported_in_a_row_the_mask_does_not_count_is_declined(core, mode):
    counted = np.array([True, False, True])
    rows, state, reset_steps = _vector_row(core, mode, counted)
    ended = np.array([False, True, False])
    assert rows.record(0, np.zeros(3), ended, np.zeros(3, bool), [np.ones((3, 2), np.float32)], 0.0) == -1
    assert not reset_steps.any() and not state["running_lengths"].any()



def _books(core, num_envs=3, horizon=3):
    """The episode books a StepRecorder keeps (the kernels' EpisodeBooks of that core)."""
    recorder, _ = _recorder_state(core, horizon, num_envs, 0)
    return recorder.books


@pytest.mark.parametrize("core", CORES, ids=["compiled", "python"])
@pytest.mark.parametrize(
    "mask", [[True, False, True], np.ones(3, np.uint8), np.ones(2, bool), np.ones((3, 1), bool)],
    ids=["list", "uint8", "short", "2-d"],
)
def test_the_books_refuse_a_mask_that_is_not_a_bool_row_of_every_env(core, mask):
    """The compiled books read the mask's bytes without bounds: a wrong one is an error, not a crash."""
    books = _books(core)
    with pytest.raises(TypeError, match=r"`counted` must be None or a bool array of shape \(3,\)"):
        books.record_rows(0, mask)
    assert books.record_rows(0, np.array([True, False, True])) == 0  # a right one is taken
