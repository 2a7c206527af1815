"""One env object behind several env indices is refused on every backend where it would happen."""

from functools import partial

import gymnasium as gym
import numpy as np
import pytest

from parallel_rollouts import ConfigurationError, ParallelRolloutCollector
from tests.batch_compare import assert_batches_identical
from tests.envs import ConstantPolicy, CountingEnv, module_level_env
from tests.leaks import ResourceSnapshot

pytestmark = pytest.mark.timeout(120)

SHARED = r"returned the same CountingEnv instance\. Stepping one env for several env indices would interleave their data"


@pytest.mark.parametrize("backend", ["serial", "sync"])
def test_one_env_behind_several_factories_is_refused_in_process(backend):
    env = CountingEnv()
    snapshot = ResourceSnapshot.take()
    with pytest.raises(ConfigurationError, match=r"env_fns\[0\], env_fns\[1\], env_fns\[2\], env_fns\[3\] " + SHARED):
        ParallelRolloutCollector([lambda: env] * 4, None, backend)
    other = CountingEnv()
    fns = [lambda: env, partial(CountingEnv), lambda: other, lambda: gym.wrappers.TimeLimit(env, 5), lambda: other]
    with pytest.raises(
        ConfigurationError,
        match=r"env_fns\[0\], env_fns\[3\] returned the same CountingEnv instance; env_fns\[2\], env_fns\[4\] " + SHARED,
    ):
        ParallelRolloutCollector(fns, None, backend)
    snapshot.assert_nothing_leaked()


@pytest.mark.parametrize("backend", ["async"])
def test_a_factory_returning_one_object_per_worker_is_refused_in_workers(backend):
    # A module-level env is one object in each worker process: shared by that worker's indices.
    with pytest.raises(ConfigurationError, match=r"env_fns\[2\], env_fns\[3\] " + SHARED):
        ParallelRolloutCollector([partial(CountingEnv), partial(CountingEnv), module_level_env, module_level_env], None, backend, num_workers=2)


def test_workers_unpickle_each_factory_on_its_own_so_lambda_env_gives_each_index_a_copy():
    # Nothing interleaves: the batch is that of separately made envs.
    env = CountingEnv(env_id=5)
    fns = [lambda: env] * 4
    with ParallelRolloutCollector(fns, ConstantPolicy(4), "async", horizon=6, seed=1, num_workers=2) as collector:
        shared_factory = [collector.collect() for _ in range(2)]
    with ParallelRolloutCollector([partial(CountingEnv, env_id=5)] * 4, ConstantPolicy(4), "sync", horizon=6, seed=1) as collector:
        expected = [collector.collect() for _ in range(2)]
    for first, second in zip(expected, shared_factory):
        assert_batches_identical(first, second)
    np.testing.assert_array_equal(shared_factory[0].observations[:, :, 1], expected[0].observations[:, :, 1])
