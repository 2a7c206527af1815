"""PyTorch's threads plus worker processes beyond the usable cores are said once, with the fix;
a fitting thread count, or no worker process, says nothing."""

from __future__ import annotations

import warnings

import gymnasium as gym
import pytest
import torch

from parallel_rollouts import OversubscriptionWarning, ParallelVectorEnv
from parallel_rollouts.processes import oversubscription
from parallel_rollouts.processes.slicing import usable_cores
from tests.vector_envs import cartpole


@pytest.fixture
def fresh_warning(monkeypatch):
    monkeypatch.setattr(oversubscription, "_warned", False)
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _start(backend: str, num_envs: int = 2, **options) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ParallelVectorEnv([cartpole] * num_envs, backend=backend, **options).close()
    return [warning for warning in caught if issubclass(warning.category, OversubscriptionWarning)]


def test_more_torch_threads_than_the_workers_leave_is_said_once_with_the_fix(fresh_warning, no_leaks):
    torch.set_num_threads(usable_cores() + 1)
    first = _start("async", num_workers=1, main_process_envs=0)
    assert len(first) == 1
    message = str(first[0].message)
    assert f"PyTorch runs its operators on {usable_cores() + 1} threads and 1 worker process" in message
    assert f"torch.set_num_threads({max(1, usable_cores() - 1)})" in message
    assert first[0].filename == __file__  # points at the caller's line, not the library's
    assert _start("async", num_workers=1, main_process_envs=0) == []  # once per process


def test_threads_that_fit_beside_the_workers_one_thread_or_no_workers_say_nothing(fresh_warning, no_leaks):
    torch.set_num_threads(max(1, usable_cores() - 1))
    assert _start("async", num_workers=1, main_process_envs=0) == []
    torch.set_num_threads(1)  # one thread spins at no barrier, however many workers
    assert _start("async", num_envs=usable_cores() + 1, num_workers=usable_cores() + 1, main_process_envs=0) == []
    torch.set_num_threads(usable_cores() + 4)
    assert _start("sync") == []
