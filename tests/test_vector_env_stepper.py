"""ParallelVectorEnv over a stepper: the front door reaches its envs only through
``steppers/`` (never ``processes/``), and the stepper keeps no cycle back to it."""

from __future__ import annotations

import ast
import gc
import weakref
from pathlib import Path

import numpy as np
import pytest

import parallel_rollouts
from parallel_rollouts import ParallelVectorEnv
from parallel_rollouts.steppers.base import VectorStepper
from parallel_rollouts.steppers.in_process import InProcessVectorStepper
from parallel_rollouts.steppers.processes import ProcessVectorStepper
from tests.vector_envs import cartpole

VECTOR_ENV = Path(parallel_rollouts.__file__).resolve().parent / "vector_env.py"


def test_the_vector_env_imports_nothing_from_the_worker_processes():
    imported = set()
    for node in ast.walk(ast.parse(VECTOR_ENV.read_text())):
        if isinstance(node, ast.ImportFrom):
            imported.add("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    assert not {name for name in imported if name.lstrip(".").split(".")[0] == "processes"}
    assert not {name for name in imported if name.startswith("parallel_rollouts.processes")}


@pytest.mark.parametrize("backend, stepper", [("sync", InProcessVectorStepper), ("async", ProcessVectorStepper)])
def test_each_backend_steps_through_its_vector_stepper(backend, stepper, no_leaks):
    extra = {"num_workers": 2} if backend == "async" else {}
    env = ParallelVectorEnv([cartpole] * 4, backend=backend, **extra)
    try:
        assert isinstance(env._backend, stepper) and isinstance(env._backend, VectorStepper)
        env.reset(seed=0)
        _, rewards, _, _, _ = env.step(np.zeros(4, dtype=np.int64))
        np.testing.assert_array_equal(rewards, np.ones(4))
    finally:
        env.close()


@pytest.mark.parametrize("backend", ["sync", "async"])
@pytest.mark.parametrize("batch_size", [None, 2])
def test_a_vector_env_dropped_unclosed_is_closed_at_once_not_at_a_garbage_collection(backend, batch_size, no_leaks):
    extra = {"num_workers": 2} if backend == "async" else {}
    env = ParallelVectorEnv([cartpole] * 4, backend=backend, batch_size=batch_size, **extra)
    env.reset(seed=0)
    env.step(np.zeros(4, dtype=np.int64))
    dropped = weakref.ref(env)
    was_enabled = gc.isenabled()
    gc.disable()  # a reference cycle would keep it alive until a collection
    try:
        del env
        assert dropped() is None, "the vector env outlived its last reference: a cycle holds it"
    finally:
        if was_enabled:
            gc.enable()


@pytest.mark.parametrize("autoreset_mode", ["NextStep", "SameStep"])
def test_the_envs_group_is_freed_with_its_vector_env_not_at_a_garbage_collection(autoreset_mode, no_leaks):
    """The core's row stepper calls back into its group (SAME_STEP's final observations) without
    holding it, so the group, its envs and its storage go when the vector env does."""
    env = ParallelVectorEnv([cartpole] * 2, backend="sync", autoreset_mode=autoreset_mode)
    env.reset(seed=0)
    for _ in range(40):  # episodes end and are reset on the way
        env.step(np.zeros(2, dtype=np.int64))
    group = weakref.ref(env._backend._group)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        env.close()
        del env
        assert group() is None, "the group outlived its closed vector env: a cycle holds it"
    finally:
        if was_enabled:
            gc.enable()
