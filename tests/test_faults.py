"""Faults never become hangs or leaks: every case is time-bounded and ends with a leak check."""

import os
import signal
import sys
import threading
import time
from functools import partial

import pytest

from parallel_rollouts import (
    CollectorClosedError,
    ParallelRolloutCollector,
    RunnerState,
    StepTimeoutError,
    WorkerDiedError,
    WorkerError,
)
from tests.envs import ConstantPolicy, CountingEnv, FaultyEnv, HangingCloseEnv, RaisingFactory
from tests.bounds import assert_returns
from tests.leaks import SHM_DIR, assert_no_resource_tracker_warning, run_script, segment_exists, segments_of

pytestmark = pytest.mark.timeout(60)

ALL_BACKENDS = ["serial", "sync", "async"]


def fns_with_fault(num_envs, faulty_index, **fault):
    fns = [partial(CountingEnv, env_id=i, episode_length=2) for i in range(num_envs)]
    fns[faulty_index] = partial(FaultyEnv, env_id=faulty_index, episode_length=2, **fault)
    return fns


def make(backend, fns, **kwargs):
    extra = {"num_workers": 2} if backend == "async" else {}
    return ParallelRolloutCollector(fns, ConstantPolicy(len(fns)), backend, horizon=4, seed=0, **extra, **kwargs)


def assert_broken_then_closes(collector):
    with pytest.raises(CollectorClosedError, match=r"broken by an earlier failure"):
        collector.collect()
    collector.close()
    collector.close()  # a second close does nothing
    assert collector.closed


# -- env exceptions ---------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize(
    "phase, at, expected_phase",
    [("step", 2, "step"), ("reset", 2, "autoreset"), ("reset", 1, "reset")],
    ids=["step", "autoreset", "first-reset"],
)
def test_env_exception_is_a_worker_error_naming_the_env_with_its_traceback(backend, phase, at, expected_phase, no_leaks):
    # No step_timeout: a failure is reported as it happens, never by waiting it out
    # (a hang would trip the module's timeout).
    fns = fns_with_fault(4, 3, phase=phase, at=at)
    if expected_phase == "reset":
        with pytest.raises(WorkerError, match=r"env 3 raised ValueError in `reset`: env 3 fails in reset on call 1") as info:
            make(backend, fns)
    else:
        collector = make(backend, fns)
        with pytest.raises(WorkerError, match=rf"env 3 raised ValueError in `{expected_phase}`: env 3 fails in {phase}") as info:
            collector.collect()
        assert_broken_then_closes(collector)
    assert info.value.env_indices == (3,)
    assert "raise ValueError" in info.value.remote_traceback
    assert isinstance(info.value, RuntimeError)


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_envs_failing_in_the_same_step_in_different_workers_are_all_reported(backend, no_leaks):
    fns = [partial(FaultyEnv, env_id=i, phase="step", at=2) if i in (0, 3) else partial(CountingEnv, env_id=i) for i in range(4)]
    collector = make(backend, fns)
    with pytest.raises(WorkerError, match=r"2 envs failed:\n  env 0 raised ValueError .*\n  env 3 raised ValueError") as info:
        collector.collect()
    assert info.value.env_indices == (0, 3)
    assert_broken_then_closes(collector)


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_a_factory_that_raises_fails_construction_and_shuts_the_others_down(backend, no_leaks):
    fns = [partial(CountingEnv, env_id=i) for i in range(4)]
    fns[2] = RaisingFactory("no licence for this simulator")
    with pytest.raises(WorkerError, match=r"env 2 raised RuntimeError in `make`: no licence for this simulator") as info:
        make(backend, fns)
    assert "RaisingFactory" in info.value.remote_traceback or "__call__" in info.value.remote_traceback


# -- workers dying ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "how, description",
    [("exit", r"exited with code 3"), ("kill", r"was killed by signal SIGKILL"), ("segfault", r"was killed by signal SIGSEGV")],
)
def test_a_worker_dying_hard_is_named_with_its_envs_and_exit_status(how, description, no_leaks):
    fns = fns_with_fault(4, 3, phase="step", at=2, how=how)
    collector = make("async", fns)
    # No step_timeout: the death itself is noticed (a hang would trip the module's timeout).
    with pytest.raises(WorkerDiedError, match=rf"worker 1 \(pid \d+, envs 2..3\) {description}") as info:
        collector.collect()
    assert info.value.env_indices == (2, 3)
    assert_broken_then_closes(collector)


def test_a_worker_killed_between_collects_is_reported_on_the_next_one(no_leaks):
    collector = make("async", [partial(CountingEnv, env_id=i) for i in range(2)])
    collector.collect()
    victim = collector._backend.stepper.pool.workers[0].process
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(5)
    with pytest.raises(WorkerDiedError, match=r"worker 0 \(pid \d+, env 0\) was killed by signal SIGKILL"):
        collector.collect()
    assert_broken_then_closes(collector)


# -- hangs ------------------------------------------------------------------------------------


def test_a_hanging_env_raises_a_timeout_and_the_collector_never_returns_stale_data(no_leaks):
    fns = fns_with_fault(4, 1, phase="step", at=3, how="hang")
    collector = make("async", fns, step_timeout=0.5)
    started = time.monotonic()
    with pytest.raises(StepTimeoutError, match=r"worker 0 \(pid \d+, envs 0..1\) did not finish within step_timeout=0.5 s"):
        collector.collect()
    # The env sleeps for an hour: returning at all shows the timeout fired, and never early.
    assert time.monotonic() - started >= 0.5
    assert collector.state is RunnerState.BROKEN and isinstance(collector.failure, TimeoutError)
    assert_returns(partial(assert_broken_then_closes, collector))


def test_a_hanging_env_under_rollout_workers_names_the_whole_rollout_s_bound(no_leaks):
    """A rollout worker replies once a rollout, so its bound is ``horizon * step_timeout``; the
    message states that bound, not the per-step one."""
    fns = fns_with_fault(2, 1, phase="step", at=3, how="hang")
    collector = make("async", fns, step_timeout=0.05, policy_placement="workers")
    with pytest.raises(
        StepTimeoutError,
        match=rf"did not finish a rollout of horizon={collector.horizon} within horizon \* step_timeout = "
        rf"{collector.horizon * 0.05:g} s",
    ):
        collector.collect()
    assert_returns(partial(assert_broken_then_closes, collector))


def test_async_close_is_bounded_even_if_an_env_hangs_in_its_own_close(no_leaks):
    collector = make("async", [partial(CountingEnv, env_id=0), HangingCloseEnv])
    collector.collect()
    hanging_worker = collector._backend.stepper.pool.workers[1].process.pid
    assert_returns(collector.close)
    assert not _alive(hanging_worker), "the worker whose env hung in close() is still running"


@pytest.mark.parametrize("backend", ["serial", "sync"])
def test_in_process_close_calls_every_env_close_in_the_callers_thread(backend):
    # As in a plain loop (and Gymnasium's SyncVectorEnv): an env whose close() needs the
    # main thread (a GUI, a GL context) can close. The flip side, documented: an env that
    # hangs in close() hangs this call.
    closed_in = {}

    class RecordingEnv(CountingEnv):
        def close(self):
            closed_in[self.env_id] = threading.get_ident()

    collector = make(backend, [partial(RecordingEnv, env_id=i) for i in range(3)])
    collector.collect()
    collector.close()
    assert closed_in == {i: threading.get_ident() for i in range(3)}


# -- the main process side ------------------------------------------------------------------


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_a_policy_exception_mid_rollout_exits_the_with_block_with_that_one_exception(backend, no_leaks):
    calls = []

    def policy(observations):
        calls.append(1)
        if len(calls) == 3:
            raise ZeroDivisionError("policy bug")
        return ConstantPolicy(observations.shape[0])(observations)

    fns = [partial(CountingEnv, env_id=i, episode_length=10) for i in range(3)]
    extra = {"num_workers": 2} if backend == "async" else {}
    with pytest.raises(ZeroDivisionError, match="policy bug"):
        with ParallelRolloutCollector(fns, policy, backend, horizon=5, seed=0, **extra) as collector:
            collector.collect()
    assert collector.closed


@pytest.mark.parametrize("pytest_sigint", ["default", "ignored"], ids=["from-a-terminal", "from-a-background-job"])
def test_ctrl_c_gives_one_traceback_and_leaves_nothing_behind(pytest_sigint):
    import subprocess
    import textwrap

    from tests.leaks import REPO_ROOT

    script = """
        import sys, time
        from functools import partial
        import numpy as np
        from parallel_rollouts import ParallelRolloutCollector
        from tests.envs import CountingEnv

        calls = []

        def slow_policy(observations):
            calls.append(1)
            if len(calls) == 2:
                print("collecting", flush=True)
            time.sleep(0.01)
            return np.ones(observations.shape[0], dtype=np.int64)

        if __name__ == "__main__":
            fns = [partial(CountingEnv, env_id=i) for i in range(4)]
            with ParallelRolloutCollector(fns, slow_policy, "async", horizon=100000, seed=0, num_workers=2) as collector:
                print("segment", collector._backend.stepper.pool.shared.name, flush=True)
                print("pids", *[w.process.pid for w in collector._backend.stepper.pool.workers], flush=True)
                collector.collect()
    """
    # A shell starts background jobs with SIGINT ignored, and children inherit that; the
    # program under test is started as a terminal would start it, whatever launched pytest.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN if pytest_sigint == "ignored" else signal.default_int_handler)
    try:
        process = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(script)],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    segment = None
    try:
        segment = process.stdout.readline().split()[1]
        pids = [int(p) for p in process.stdout.readline().split()[1:]]
        assert process.stdout.readline().strip() == "collecting"
        # A terminal's Ctrl-C signals the whole foreground process group, workers included.
        os.killpg(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
        assert process.returncode != 0
        assert stderr.count("Traceback (most recent call last)") == 1, stderr
        assert "KeyboardInterrupt" in stderr
        assert_no_resource_tracker_warning(stderr)
        assert not segment_exists(segment)
        for pid in pids:
            assert not _alive(pid), f"worker {pid} outlived the interrupted program"
    finally:
        # On any failure, leave nothing of the program behind: its process group
        # (workers and resource tracker included) and so its segment too.
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.communicate()
        if segment is not None and segment_exists(segment):
            (SHM_DIR / segment).unlink()


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_workers_exit_and_memory_is_released_when_the_main_process_is_killed():
    import subprocess
    import textwrap

    from tests.leaks import REPO_ROOT

    script = """
        import time
        from functools import partial
        from parallel_rollouts import ParallelRolloutCollector
        from tests.envs import CountingEnv
        if __name__ == "__main__":
            collector = ParallelRolloutCollector([partial(CountingEnv, env_id=i) for i in range(4)], None, "async", horizon=8, seed=0, num_workers=2)
            collector.collect()
            print(collector._backend.stepper.pool.shared.name, *[w.process.pid for w in collector._backend.stepper.pool.workers], flush=True)
            time.sleep(600)
    """
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)], cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    segment, *pids = process.stdout.readline().split()
    assert segment_exists(segment)
    process.kill()
    process.wait(10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (any(_alive(int(pid)) for pid in pids) or segment_exists(segment)):
        time.sleep(0.1)
    assert not any(_alive(int(pid)) for pid in pids), "workers outlived the killed main process"
    assert not segment_exists(segment), "the shared-memory segment outlived the killed main process"


def test_a_collector_dropped_without_close_releases_its_workers_and_memory_at_once():
    # Checked inside the program, before it exits: what interpreter exit would clean
    # up anyway cannot hide a collector that only the garbage collector can release.
    script = """
        import os
        from functools import partial
        import psutil
        from parallel_rollouts import ParallelRolloutCollector
        from tests.envs import CountingEnv
        from tests.leaks import ResourceSnapshot, our_segments
        if __name__ == "__main__":
            baseline = ResourceSnapshot.take()
            collector = ParallelRolloutCollector([partial(CountingEnv, env_id=i) for i in range(4)], None, "async", horizon=8, seed=0, num_workers=2)
            collector.collect()
            print("holding", len(ResourceSnapshot.take().children - baseline.children), len(our_segments()), flush=True)
            del collector
            baseline.assert_nothing_leaked(timeout=10)
            print("released", flush=True)
    """
    result = run_script(script, timeout=120)
    assert result.returncode == 0, result.stderr
    # Two segments: the workers' working segment and the one the batch was written into.
    assert result.stdout.split("\n")[:2] == ["holding 2 2", "released"], result.stdout
    assert_no_resource_tracker_warning(result.stderr)
    assert result.stderr.strip() == "", result.stderr


def test_a_collector_open_at_interpreter_exit_neither_hangs_nor_leaks():
    script = """
        import os
        from functools import partial
        from parallel_rollouts import ParallelRolloutCollector
        from tests.envs import CountingEnv
        if __name__ == "__main__":
            collector = ParallelRolloutCollector([partial(CountingEnv, env_id=i) for i in range(4)], None, "async", horizon=8, seed=0, num_workers=2)
            collector.collect()
            print(os.getpid(), *[worker.process.pid for worker in collector._backend.stepper.pool.workers], flush=True)
    """
    # A hang is caught by the timeout: generous, since a loaded machine starts slowly.
    result = run_script(script, timeout=120)
    assert result.returncode == 0, result.stderr
    program, *workers = (int(pid) for pid in result.stdout.split())
    assert len(workers) == 2
    assert_no_resource_tracker_warning(result.stderr)
    assert result.stderr.strip() == "", result.stderr
    assert segments_of(program) == set(), "the program's shared-memory segment outlived it"
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in workers), "workers outlived the program"
