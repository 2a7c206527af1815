"""The async backend gives the batch the other backends give, and cleans up after itself."""
import os
import subprocess
import sys

from functools import partial

import numpy as np
import pytest

from parallel_rollouts import ActionError, ConfigurationError, ParallelRolloutCollector
from tests.batch_compare import assert_batches_identical
from tests.envs import ConstantPolicy, CountingEnv, ObservationDependentPolicy, UnpicklableFactory, cartpole
from tests.leaks import ResourceSnapshot
from tests.test_backend_identity import space_env_fns

pytestmark = pytest.mark.timeout(60)


def collect(backend, env_fns, policy=None, collects=3, **kwargs):
    with ParallelRolloutCollector(env_fns, policy, backend, **kwargs) as collector:
        return [collector.collect() for _ in range(collects)]


@pytest.mark.parametrize("num_workers", [1, 2, 3])
def test_async_matches_serial_for_any_number_of_workers(num_workers, core):
    snapshot = ResourceSnapshot.take()
    policy = ObservationDependentPolicy(2)
    reference = collect("serial", [cartpole] * 5, policy, horizon=30, seed=17, core=core)
    candidate = collect("async", [cartpole] * 5, policy, horizon=30, seed=17, core=core, num_workers=num_workers)
    for first, second in zip(reference, candidate):
        assert_batches_identical(first, second)
    snapshot.assert_nothing_leaked()


@pytest.mark.parametrize("case", ["dict_nested", "box_image_uint8", "tuple_nested", "multibinary"])
def test_async_matches_sync_for_nested_and_image_spaces_with_random_actions(case):
    reference = collect("sync", space_env_fns(case, 4), horizon=8, seed=3, info_keys=())
    candidate = collect("async", space_env_fns(case, 4), horizon=8, seed=3, num_workers=2)
    for first, second in zip(reference, candidate):
        assert_batches_identical(first, second)


def test_async_final_observations_do_not_leak_from_an_earlier_rollout():
    fns = [partial(CountingEnv, env_id=i, episode_length=3) for i in range(2)]
    reference = collect("sync", fns, ConstantPolicy(2, 1), collects=4, horizon=4, seed=1, info_keys=("step_in_episode",))
    candidate = collect("async", fns, ConstantPolicy(2, 1), collects=4, horizon=4, seed=1, num_workers=2, info_keys=("step_in_episode",))
    for first, second in zip(reference, candidate):
        assert_batches_identical(first, second)


def test_async_batches_are_private_copies_unless_reuse_is_asked_for():
    fns = [partial(CountingEnv, env_id=i, episode_length=3) for i in range(2)]
    with ParallelRolloutCollector(fns, ConstantPolicy(2, 1), "async", horizon=4, seed=1, num_workers=2) as collector:
        first = collector.collect()
        kept = first.observations.copy()
        second = collector.collect()
        np.testing.assert_array_equal(first.observations, kept)
        assert not np.shares_memory(first.observations, second.observations)
    with ParallelRolloutCollector(fns, ConstantPolicy(2, 1), "async", horizon=4, seed=1, reuse_buffers=True) as collector:
        first = collector.collect()
        second = collector.collect()
        assert np.shares_memory(first.observations, second.observations)
    np.testing.assert_array_equal(second.final_observation_mask[:, 0], [False, True, False, False])
    assert not second.final_observations[2].any()


def test_lambda_and_closure_factories_work():
    offset = 3
    fns = [lambda: CountingEnv(env_id=0)] + [(lambda i=i: CountingEnv(env_id=i + offset)) for i in range(2)]
    (batch,) = collect("async", fns, ConstantPolicy(3), collects=1, horizon=2, seed=0, num_workers=2)
    np.testing.assert_array_equal(batch.observations[0, :, 0], [0, 3, 4])


def test_unpicklable_factory_is_named_at_construction():
    fns = [partial(CountingEnv), UnpicklableFactory()]
    snapshot = ResourceSnapshot.take()
    with pytest.raises(ConfigurationError, match=r"env_fns\[1\] cannot be serialised for a worker process"):
        ParallelRolloutCollector(fns, backend="async")
    snapshot.assert_nothing_leaked()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_workers": 0}, r"`num_workers` must be an int between 1 and the number of envs \(2\); got 0"),
        ({"num_workers": 3}, r"got 3"),
        ({"step_timeout": -1}, r"`step_timeout` must be a positive number of seconds or None; got -1"),
        ({"context": "teleport"}, r"`context` must be a multiprocessing start method"),
    ],
)
def test_async_arguments_are_checked(kwargs, match):
    snapshot = ResourceSnapshot.take()
    with pytest.raises(ConfigurationError, match=match):
        ParallelRolloutCollector([CountingEnv, CountingEnv], backend="async", **kwargs)
    snapshot.assert_nothing_leaked()


def test_bad_actions_are_rejected_in_the_main_process_before_any_worker_steps():
    fns = [partial(CountingEnv, env_id=i, episode_length=50) for i in range(2)]
    actions = {"value": np.array([0, 9])}
    with ParallelRolloutCollector(fns, lambda obs: actions["value"], "async", horizon=3, seed=0, num_workers=2) as collector:
        with pytest.raises(ActionError, match=r"action for env 1 is outside the action space Discrete\(4\): got 9"):
            collector.collect()
        actions["value"] = np.array([1, 1])
        batch = collector.collect()
    # No env was stepped by the rejected call: the rollout starts at step 0 of the episode.
    np.testing.assert_array_equal(batch.observations[:, :, 1], [[0, 0], [1, 1], [2, 2]])


def test_two_collectors_alive_at_once_do_not_interfere():
    fns = [partial(CountingEnv, env_id=i, episode_length=i + 2) for i in range(3)]
    expected_a = collect("sync", fns, ConstantPolicy(3, 1), horizon=5, seed=1)
    expected_b = collect("sync", fns, ConstantPolicy(3, 2), horizon=5, seed=2)
    with ParallelRolloutCollector(fns, ConstantPolicy(3, 1), "async", horizon=5, seed=1, num_workers=2) as a, \
            ParallelRolloutCollector(fns, ConstantPolicy(3, 2), "async", horizon=5, seed=2, num_workers=2) as b:
        got_a, got_b = [], []
        for _ in range(3):
            got_a.append(a.collect())
            got_b.append(b.collect())
    for first, second in zip(expected_a + expected_b, got_a + got_b):
        assert_batches_identical(first, second)


@pytest.mark.timeout(600)
def test_creating_and_closing_many_collectors_returns_to_baseline():
    fns = [partial(CountingEnv, env_id=i) for i in range(2)]
    # One round first, so that one-time costs (the resource tracker, imports) are in the baseline.
    ParallelRolloutCollector(fns, None, "async", horizon=2, seed=0, num_workers=1).close()
    snapshot = ResourceSnapshot.take()
    # Anything a collector left behind (a process, a segment, a descriptor) shows in the
    # snapshot whatever the count; 20 keeps the spawns affordable on a loaded machine.
    for index in range(20):
        collector = ParallelRolloutCollector(fns, None, "async", horizon=2, seed=index, num_workers=1)
        if index % 2 == 0:
            collector.collect()
        collector.close()
    snapshot.assert_nothing_leaked()


def test_envs_with_different_spaces_in_different_workers_are_named():
    from gymnasium import spaces

    from parallel_rollouts import SpaceError
    from tests.envs import SpaceEnv

    fns = [partial(SpaceEnv, spaces.Box(0, 1, (3,)), spaces.Discrete(2))] * 3
    fns.append(partial(SpaceEnv, spaces.Box(0, 1, (3,)), spaces.Discrete(5)))
    snapshot = ResourceSnapshot.take()
    with pytest.raises(SpaceError, match=r"env 3 declares the action space Discrete\(5\), but env 0 declares Discrete\(2\)"):
        ParallelRolloutCollector(fns, backend="async", num_workers=2)
    snapshot.assert_nothing_leaked()


def test_arrays_viewing_shared_memory_stay_readable_after_close():
    # A reused batch and the observation rows a policy kept are views of the shared
    # segment; closing the collector must not unmap memory they still point at.
    kept = []

    def policy(observations):
        kept.append(observations)
        return np.ones(observations.shape[0], dtype=np.int64)

    fns = [partial(CountingEnv, env_id=i, episode_length=10) for i in range(2)]
    snapshot = ResourceSnapshot.take()
    collector = ParallelRolloutCollector(fns, policy, "async", horizon=3, seed=0, num_workers=2, reuse_buffers=True)
    batch = collector.collect()
    collector.close()
    np.testing.assert_array_equal(batch.observations[:, :, 1], [[0, 0], [1, 1], [2, 2]])
    np.testing.assert_array_equal(kept[2][:, 1], [2, 2])
    del batch, kept
    snapshot.assert_nothing_leaked()


def test_reused_async_batches_never_show_terminal_observations_of_a_dropped_rollout():
    calls = {"n": 0}

    def policy(observations):
        calls["n"] += 1
        if calls["n"] == 5:  # step t=4 of the first rollout, after an episode ended at t=2
            raise RuntimeError("policy bug")
        return np.ones(observations.shape[0], dtype=np.int64)

    fns = [partial(CountingEnv, env_id=0, episode_length=3)]
    batches = {}
    for backend in ("sync", "async"):
        calls["n"] = 0
        with ParallelRolloutCollector(fns, policy, backend, horizon=5, seed=0, reuse_buffers=True) as collector:
            with pytest.raises(RuntimeError, match="policy bug"):
                collector.collect()
            batches[backend] = collector.collect()
    assert_batches_identical(batches["sync"], batches["async"])
    assert not batches["async"].final_observations[~batches["async"].final_observation_mask].any()


def test_a_fork_context_worker_still_exits_when_the_main_process_is_killed():
    import subprocess
    import sys
    import textwrap
    import time

    import psutil

    from tests.leaks import REPO_ROOT

    script = """
        import time
        from functools import partial
        from parallel_rollouts import ParallelRolloutCollector
        from tests.envs import CountingEnv
        if __name__ == "__main__":
            collector = ParallelRolloutCollector([partial(CountingEnv, env_id=i) for i in range(2)], None, "async",
                                                 horizon=4, seed=0, num_workers=2, context="fork")
            collector.collect()
            print(*[w.process.pid for w in collector._backend.stepper.pool.workers], flush=True)
            time.sleep(600)
    """
    process = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    pids = [int(pid) for pid in process.stdout.readline().split()]
    process.kill()
    process.wait(10)
    deadline = time.monotonic() + 10
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.1)
    assert not alive, f"fork-context workers {alive} outlived the killed main process"


@pytest.mark.parametrize(
    "how, match",
    [
        ("bad_shape", r"env 3 returned an observation at step t=1 \(observations row t=2\) .*got shape \(7,\) \(dtype float32\)"),
        ("out_of_space", r"env 3 returned an? (terminal )?observation at step t=1 .*outside its observation space"),
    ],
)
def test_observation_errors_in_a_worker_name_the_global_env_index(how, match):
    from parallel_rollouts import CollectorClosedError, ObservationError
    from tests.envs import FaultyEnv

    fns = [partial(CountingEnv, env_id=i) for i in range(4)]
    fns[3] = partial(FaultyEnv, env_id=3, phase="step", at=2, how=how)
    snapshot = ResourceSnapshot.take()
    collector = ParallelRolloutCollector(
        fns, ConstantPolicy(4), "async", horizon=4, seed=0, num_workers=2, observation_check="raise"
    )
    with pytest.raises(ObservationError, match=match):
        collector.collect()
    with pytest.raises(CollectorClosedError):
        collector.collect()
    collector.close()
    snapshot.assert_nothing_leaked()


def test_a_script_without_the_main_guard_gets_one_error_saying_how_to_fix_it(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import os\n"
        "from functools import partial\n"
        "from parallel_rollouts import ParallelRolloutCollector\n"
        "from tests.envs import CountingEnv\n"
        "print(os.getpid(), flush=True)\n"
        "collector = ParallelRolloutCollector([partial(CountingEnv, env_id=i) for i in range(4)], None, 'async', num_workers=2)\n"
        "collector.collect()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(__import__("tests.leaks", fromlist=["REPO_ROOT"]).REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    result = subprocess.run([sys.executable, str(script)], cwd=__import__("tests.leaks", fromlist=["REPO_ROOT"]).REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert result.stderr.count("Traceback (most recent call last)") == 1, result.stderr
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("parallel_rollouts.errors.ConfigurationError: backend='async' starts each worker as a new Python process")
    assert f"imports your script ({script})" in last_line
    assert 'under `if __name__ == "__main__":`' in last_line
    assert "WorkerDiedError" not in result.stderr and "bootstrapping" not in result.stderr
    # The workers printed the main script's output too (they ran its top level) but nothing else.
    program = int(result.stdout.split()[0])
    assert __import__("tests.leaks", fromlist=["segments_of"]).segments_of(program) == set()


def test_a_parallel_vector_env_without_the_main_guard_is_named_in_the_error(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "from functools import partial\n"
        "from parallel_rollouts import ParallelVectorEnv\n"
        "from tests.envs import CountingEnv\n"
        "envs = ParallelVectorEnv([partial(CountingEnv, env_id=i) for i in range(2)], backend='async', num_workers=2)\n"
    )
    root = __import__("tests.leaks", fromlist=["REPO_ROOT"]).REPO_ROOT
    env = {**os.environ, "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    result = subprocess.run([sys.executable, str(script)], cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    last_line = result.stderr.strip().splitlines()[-1]
    assert "the script creates the ParallelVectorEnv at top level" in last_line, result.stderr
    assert "uses the ParallelVectorEnv under `if __name__" in last_line and "collector" not in last_line


def test_a_policy_raising_in_a_rollout_worker_keeps_its_type_and_carries_the_worker_traceback_as_a_note():
    # Python 3.10 has no BaseException.add_note: the note must still reach the caller there.
    from tests.policies import RaisingPolicy

    fns = [partial(CountingEnv, env_id=i, episode_length=50) for i in range(4)]
    with ParallelRolloutCollector(fns, RaisingPolicy(fail_on=2), "async", horizon=4, seed=0, num_workers=2, policy_placement="workers") as collector:
        with pytest.raises(KeyError, match="the policy failed on purpose") as raised:
            collector.collect()
    (note,) = raised.value.__notes__
    assert note.startswith("Raised in the rollout worker hosting envs from ")
    assert "in __call__" in note and "KeyError: 'the policy failed on purpose'" in note
