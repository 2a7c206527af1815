"""The one rule that merges errors of parts run side by side (groups, workers)."""

from __future__ import annotations

from parallel_rollouts.errors import EnvFailure, WorkerDiedError, WorkerError
from parallel_rollouts.checks.failures import merged_failure


def _failure(env_index: int) -> EnvFailure:
    return EnvFailure(env_index, "step", "ValueError", f"env {env_index} broke", "")


def test_no_errors_merge_to_none():
    assert merged_failure([]) is None


def test_one_error_is_raised_as_it_is():
    error = WorkerDiedError.from_failures([_failure(3)])
    assert merged_failure([error]) is error


def test_an_error_that_is_not_an_env_failure_comes_first_and_unchanged():
    protocol = RuntimeError("a reply could not be read")
    assert merged_failure([WorkerError.from_failures([_failure(0)]), protocol]) is protocol


def test_env_failures_of_several_parts_are_reported_together_in_their_common_type():
    merged = merged_failure([WorkerDiedError.from_failures([_failure(0)]), WorkerDiedError.from_failures([_failure(4), _failure(5)])])
    assert type(merged) is WorkerDiedError
    assert merged.env_indices == (0, 4, 5)
    assert "3 envs failed" in str(merged)


def test_parts_failing_in_different_ways_merge_into_a_worker_error():
    merged = merged_failure([WorkerDiedError.from_failures([_failure(0)]), WorkerError.from_failures([_failure(2)])])
    assert type(merged) is WorkerError
    assert merged.env_indices == (0, 2)
