"""The per-step path's machinery: the step doorbell, the main process's own share of the envs,
and ready-first stepping (``ParallelVectorEnv(batch_size=...)``).

Speed is measured in ``benchmarks/per_step.py``; these tests check that each piece gives
exactly the results of the in-process backends, refuses what it cannot do, and fails as
promptly and cleanly as the pipes did.
"""

from __future__ import annotations

import time
from functools import partial

import gymnasium as gym
import numpy as np
import pytest

from parallel_rollouts import ConfigurationError, ParallelRolloutCollector, ParallelVectorEnv, WorkerError
from parallel_rollouts.processes import doorbell
from parallel_rollouts.processes.local_share import LocalShare
from parallel_rollouts.processes.transport import DoorbellTransport, PipeTransport

from .batch_compare import assert_batches_identical
from .envs import CountingEnv, CrashingCartPole, FaultyEnv


def cartpoles(count: int) -> list:
    return [partial(gym.make, "CartPole-v1") for _ in range(count)]


def pool_of(owner):
    backend = owner._backend
    if hasattr(backend, "workers"):
        return backend
    return backend.pool if hasattr(backend, "pool") else backend.stepper.pool


# -- the doorbell itself ----------------------------------------------------------------------------


def bells(slots: int):
    from parallel_rollouts.processes import _doorbell as extension

    return extension.Doorbells(bytearray(extension.segment_bytes(slots)), slots)


def test_a_ring_is_seen_by_its_slot_only_and_answered_by_number():
    doorbells = bells(3)
    number = doorbells.ring(1, doorbell.STEP, 41)
    assert doorbells.request(1) == (number, doorbell.STEP, 41)
    assert doorbells.wait_request(1, number - 1, 0.0, 0.01) == 1
    assert doorbells.wait_request(2, 0, 0.0, 0.01) == 0, "slot 2 was never rung"
    assert not doorbells.replied(1, number)
    seen = doorbells.completions()
    doorbells.reply(1, number, doorbell.REPLIED_ON_PIPE)
    assert doorbells.replied(1, number) and doorbells.reply_kind(1) == doorbell.REPLIED_ON_PIPE
    assert doorbells.wait_reply(1, number, 0.0, 0.01) == 1
    assert doorbells.wait_completion(seen, 0.0, 0.01) == 1
    assert doorbells.wait_completion(doorbells.completions(), 0.0, 0.01) == 0, "no reply since"


def test_request_numbers_wrap_past_the_largest_int32_and_never_hit_zero():
    from parallel_rollouts.processes import _doorbell as extension

    raw = bytearray(extension.segment_bytes(1))
    doorbells = extension.Doorbells(raw, 1)
    words = np.frombuffer(raw, dtype=np.int32)
    words[16] = 2**31 - 1  # slot 0's request counter
    number = doorbells.ring(0, doorbell.STEP, 0)
    assert number == 1
    assert doorbells.wait_request(0, 2**31 - 1, 0.0, 0.01) == 1


def test_a_wait_times_out_when_nothing_comes():
    doorbells = bells(1)
    start = time.monotonic()
    assert doorbells.wait_reply(0, 5, 0.0, 0.05) == 0
    assert time.monotonic() - start >= 0.04


def test_only_a_bare_step_is_waited_for_with_a_spin_first(monkeypatch):
    # A whole rollout's reply (or a reset's, a call's: anything over the pipe) takes long or is
    # rare: the main process sleeps at once instead of spinning on a core the workers step on.
    from types import SimpleNamespace

    class Doorbells:
        def __init__(self):
            self.spins = []

        def ring(self, slot, step_row):
            return 7

        def wait_reply(self, slot, number, sentinel, deadline, spin_first=True):
            self.spins.append(spin_first)
            return "reply", b""

        def clear(self, slot):
            pass

    bells = Doorbells()
    transport = DoorbellTransport(bells)
    monkeypatch.setattr(PipeTransport, "_send", lambda self, worker, request: True)
    worker = SimpleNamespace(index=1, request_number=0, process=SimpleNamespace(sentinel=5))
    for step_row in (3, None, 4, 5, None):
        transport.post(worker, b"request", step_row)
        assert transport.wait_reply(worker, None)[0] == "reply"
    assert bells.spins == [True, False, True, True, False]
    transport.post(worker, b"request", 6)
    assert transport.read_in_flight(worker, deadline=0.0) and bells.spins[-1] is True
    transport.post(worker, b"request", 7)
    transport.forget(worker)  # nothing of a replaced worker is kept: its slot is no longer stepping
    assert transport.read_in_flight(worker, deadline=0.0) and bells.spins[-1] is False


def test_over_the_pipes_too_only_a_bare_steps_reply_is_spun_for(monkeypatch):
    # The same rule without the doorbell (the pure-Python core, macOS, Windows).
    from types import SimpleNamespace

    spins = []

    class Connection:
        def send_bytes(self, request):
            pass

        def recv_bytes(self):
            return b"reply"

    worker = SimpleNamespace(
        index=1, connection=Connection(), process=SimpleNamespace(sentinel=5),
        waiter=SimpleNamespace(spin=lambda: spins.append(True) or True),
    )
    transport = PipeTransport()
    for step_row in (3, None, 4, None):
        transport.post(worker, b"request", step_row)
        assert transport.wait_reply(worker, None) == ("reply", b"reply")
    assert len(spins) == 2, "a spin for each of the two steps' replies, none for the others"
    transport.post(worker, b"request", 5)
    transport.forget(worker)
    transport.wait_reply(worker, None)
    assert len(spins) == 2, "nothing of a replaced worker is kept"


class _SilentBells:
    """Stands in for the compiled doorbells: no reply ever comes; each wait's time-out is kept
    (and, given a ``clock``, lets that much time pass on it)."""

    def __init__(self, clock=None):
        self.timeouts = []
        self.clock = clock

    def wait_reply(self, slot, number, spin, timeout):
        self.timeouts.append(timeout)
        if self.clock is not None:
            self.clock[0] += timeout
        return 0

    def completions(self):
        return 0

    def replied(self, slot, number):
        return False

    def wait_completion(self, seen, spin, timeout):
        self.timeouts.append(timeout)
        return 0


@pytest.mark.parametrize("waiting", ["reply", "any"])
def test_a_long_wait_checks_the_worker_ever_less_often_up_to_a_bound(waiting, monkeypatch):
    # Each check wakes the main process while the workers step: the checks start at 2 ms (a
    # death early in a wait is noticed at once) and double up to 64 ms (a rollout wakes it a few times).
    checks = []

    def check_sentinels(sentinels, timeout):
        checks.append(sentinels)
        return sentinels if len(checks) == 9 else []  # the worker "dies" at the ninth check

    monkeypatch.setattr(doorbell, "wait", check_sentinels)
    main = doorbell.MainDoorbells(bytearray(doorbell.doorbell_bytes(1)), 1)
    main._bells = _SilentBells()
    if waiting == "reply":
        assert main.wait_reply(0, 1, sentinel=3, deadline=None) == ("died", None)
    else:
        assert main.wait_any([(0, 1, 3)], timeout=60.0) == [0]
    assert [round(timeout, 6) for timeout in main._bells.timeouts] == [0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.064, 0.064, 0.064]
    assert checks == [[3]] * 9


def test_the_growing_checks_never_wait_past_the_deadline(monkeypatch):
    # `step_timeout`: each wait is cut to the time left, and the wait ends "late" at the deadline.
    now = [100.0]
    bells = _SilentBells(clock=now)
    monkeypatch.setattr(doorbell.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(doorbell, "wait", lambda sentinels, timeout: [])
    main = doorbell.MainDoorbells(bytearray(doorbell.doorbell_bytes(1)), 1)
    main._bells = bells
    assert main.wait_reply(0, 1, sentinel=3, deadline=100.05) == ("late", None)
    assert [round(timeout, 6) for timeout in bells.timeouts] == [0.002, 0.004, 0.008, 0.016, 0.02]


def test_slots_out_of_range_and_short_buffers_are_refused():
    from parallel_rollouts.processes import _doorbell as extension

    doorbells = bells(2)
    with pytest.raises(IndexError, match="slot 2"):
        doorbells.ring(2, doorbell.STEP, 0)
    with pytest.raises(ValueError, match="needs 192 bytes"):
        extension.Doorbells(bytearray(64), 2)


def test_the_pool_uses_the_doorbell_with_the_compiled_core_and_the_pipes_otherwise(monkeypatch, no_leaks):
    with ParallelRolloutCollector(cartpoles(4), None, "async", horizon=4, seed=0, num_workers=2) as collector:
        assert pool_of(collector)._resources.transport.__class__ is DoorbellTransport
    monkeypatch.setenv(doorbell.DOORBELL_ENV_VAR, "0")
    with ParallelRolloutCollector(cartpoles(4), None, "async", horizon=4, seed=0, num_workers=2) as collector:
        assert pool_of(collector)._resources.transport.__class__ is PipeTransport
    with ParallelRolloutCollector(cartpoles(4), None, "async", horizon=4, seed=0, num_workers=2, core="python") as collector:
        assert pool_of(collector)._resources.transport.__class__ is PipeTransport


@pytest.mark.parametrize("doorbell_on", ["1", "0"])
@pytest.mark.parametrize("options", [{"num_workers": 2}, {}, {"pipelined": True, "num_workers": 2}], ids=["workers", "default", "pipelined"])
def test_async_batches_equal_sync_over_the_doorbell_and_over_the_pipes(doorbell_on, options, monkeypatch, no_leaks):
    monkeypatch.setenv(doorbell.DOORBELL_ENV_VAR, doorbell_on)
    fns = [partial(CountingEnv, env_id=i, episode_length=3 + i) for i in range(5)]
    with ParallelRolloutCollector(fns, None, "sync", horizon=9, seed=4) as reference, \
            ParallelRolloutCollector(fns, None, "async", horizon=9, seed=4, **options) as collector:
        for _ in range(3):
            assert_batches_identical(collector.collect(), reference.collect())


def test_a_worker_killed_while_the_main_process_waits_on_its_doorbell_is_named(tmp_path, no_leaks):
    fns = cartpoles(4)
    fns[3] = partial(CrashingCartPole, 5, "kill")
    collector = ParallelRolloutCollector(fns, None, "async", horizon=16, seed=0, num_workers=2)
    try:
        assert pool_of(collector)._resources.transport.__class__ is DoorbellTransport
        with pytest.raises(WorkerError, match=r"worker 1 .*envs 2\.\.3.*killed by signal SIGKILL"):
            collector.collect()
    finally:
        collector.close()


def test_an_env_error_in_a_doorbell_step_comes_back_over_the_pipe_naming_the_env(no_leaks):
    fns = [partial(FaultyEnv, env_id=i, phase="step", at=3) if i == 2 else partial(CountingEnv, env_id=i) for i in range(4)]
    with ParallelRolloutCollector(fns, None, "async", horizon=8, seed=0, num_workers=2) as collector:
        with pytest.raises(WorkerError, match="env 2"):
            collector.collect()


class BigFrameEnv(gym.Env):
    """160 KB observations and one-step episodes, whose final info holds the frame again: every
    step's reply carries a 160 KB final info (the final observation itself travels through the
    shared ``final_observations`` row)."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0, 255, (200, 200, 4), np.uint8)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        frame = np.full((200, 200, 4), int(action) + 1, dtype=np.uint8)
        return frame, 1.0, True, False, {"frame": frame.copy()}


def test_a_reply_far_larger_than_a_pipe_buffer_comes_back_whole(no_leaks):
    # Same-step autoreset: each step's reply holds the ended episodes' final infos
    # (4 x 160 KB), which the worker writes while the main process reads.
    # A time limit makes a reply stuck in a full pipe a failure, not a hang.
    env = ParallelVectorEnv([BigFrameEnv] * 4, backend="async", autoreset_mode="SameStep", num_workers=1, main_process_envs=0, step_timeout=60)
    try:
        assert pool_of(env)._resources.transport.__class__ is DoorbellTransport
        env.reset(seed=0)
        for action in (0, 1, 0):
            _, _, terminations, _, infos = env.step(np.full(4, action))
            assert terminations.all()
            expected = np.full((200, 200, 4), action + 1, dtype=np.uint8)
            for final, final_info in zip(infos["final_obs"], infos["final_info"]["frame"]):
                np.testing.assert_array_equal(final, expected)
                np.testing.assert_array_equal(final_info, expected)
    finally:
        env.close()


class WarningBigFrameEnv(BigFrameEnv):
    def step(self, action):
        import warnings

        warnings.warn("a big frame", UserWarning)
        return super().step(action)


def test_warnings_travel_with_a_reply_too_large_for_the_reply_area(no_leaks):
    env = ParallelVectorEnv([WarningBigFrameEnv] * 2, backend="async", autoreset_mode="SameStep", num_workers=1, main_process_envs=0, step_timeout=60)
    try:
        env.reset(seed=0)
        with pytest.warns(UserWarning, match="a big frame"):
            env.step(np.zeros(2, dtype=np.int64))
    finally:
        env.close()


@pytest.mark.parametrize("doorbell_on", ["1", "0"])
def test_a_request_far_larger_than_a_pipe_buffer_reaches_an_idle_worker(doorbell_on, monkeypatch, no_leaks):
    # The worker waits on its doorbell while the main process writes 8 MiB to its pipe, for
    # longer than the worker's check that the main process still exists.
    monkeypatch.setenv(doorbell.DOORBELL_ENV_VAR, doorbell_on)
    env = ParallelVectorEnv([partial(CountingEnv, env_id=i) for i in range(2)], backend="async", num_workers=1, main_process_envs=0)
    try:
        time.sleep(0.3)
        payload = np.arange(2**20, dtype=np.float64)
        env.set_attr("payload", payload)
        for got in env.get_attr("payload"):
            np.testing.assert_array_equal(got, payload)
    finally:
        env.close()


class BigPolicy:
    """A rollout worker's policy holding 8 MiB: each update ships a snapshot that large."""

    def __init__(self) -> None:
        self.weights = np.zeros(2**20)

    def __call__(self, observations):
        return np.full(observations.shape[0], int(self.weights[0]) % 2, dtype=np.int64)


def test_a_policy_snapshot_far_larger_than_a_pipe_buffer_reaches_the_rollout_workers(no_leaks):
    policy = BigPolicy()
    fns = [partial(CountingEnv, env_id=i) for i in range(4)]
    with ParallelRolloutCollector(fns, policy, "async", horizon=4, seed=0, policy_placement="workers") as collector, \
            ParallelRolloutCollector(fns, policy, "sync", horizon=4, seed=0) as reference:
        for update in range(3):
            policy.weights[:] = update  # a changed policy: its new state travels to every worker
            time.sleep(0.3)
            assert_batches_identical(collector.collect(), reference.collect())


# -- the main process's share -------------------------------------------------------------------


def two_cores(monkeypatch) -> None:
    monkeypatch.setattr("parallel_rollouts.processes.local_share.usable_cores", lambda: 2)
    monkeypatch.setattr("parallel_rollouts.processes.pool.usable_cores", lambda: 2)


def test_by_default_the_main_process_steps_half_the_envs_next_to_one_worker_on_two_cores(monkeypatch, no_leaks):
    two_cores(monkeypatch)
    with ParallelRolloutCollector(cartpoles(5), None, "async", horizon=4, seed=0) as collector:
        workers = pool_of(collector).workers
        assert [type(worker) is LocalShare for worker in workers] == [True, False]
        # The main process, which also runs the policy, takes the smaller part of an odd split.
        assert [(worker.start, worker.stop) for worker in workers] == [(0, 2), (2, 5)]
        assert workers[0].describe() == "the main process's share (envs 0..1)"


@pytest.mark.parametrize(
    "options",
    [{"num_workers": 2}, {"step_timeout": 5.0}, {"max_restarts": 1}, {"main_process_envs": 0}, {"pipelined": True}],
    ids=["num_workers", "step_timeout", "max_restarts", "zero", "pipelined"],
)
def test_isolation_and_chosen_process_counts_keep_every_env_in_a_worker(options, monkeypatch, no_leaks):
    two_cores(monkeypatch)
    with ParallelRolloutCollector(cartpoles(4), None, "async", horizon=4, seed=0, **options) as collector:
        assert not any(worker.is_local for worker in pool_of(collector).workers)


def test_rollout_workers_never_give_the_main_process_a_share(monkeypatch, no_leaks):
    two_cores(monkeypatch)
    with ParallelRolloutCollector(cartpoles(4), None, "async", horizon=4, seed=0, policy_placement="workers") as collector:
        assert not any(worker.is_local for worker in pool_of(collector).workers)
    with pytest.raises(ConfigurationError, match="main_process_envs.*per-step paths only"):
        ParallelRolloutCollector(cartpoles(4), None, "async", horizon=4, seed=0, policy_placement="workers", main_process_envs=2)


@pytest.mark.parametrize("value", [-1, 4, 1.5, True, "2"])
def test_main_process_envs_out_of_range_is_refused_naming_the_option(value):
    with pytest.raises(ConfigurationError, match="`main_process_envs` must be an int from 0 to num_envs - 1 \\(3\\)"):
        ParallelRolloutCollector(cartpoles(4), None, "async", horizon=4, seed=0, main_process_envs=value)


def test_main_process_envs_applies_to_async_only_and_not_with_pipelined():
    with pytest.raises(ConfigurationError, match="`main_process_envs` applies to backend 'async' only"):
        ParallelRolloutCollector(cartpoles(4), None, "sync", horizon=4, seed=0, main_process_envs=1)
    with pytest.raises(ConfigurationError, match="pipelined=True.*drop `main_process_envs`"):
        ParallelRolloutCollector(cartpoles(4), None, "async", horizon=4, seed=0, main_process_envs=1, pipelined=True)


@pytest.mark.parametrize("share", [1, 3])
def test_any_share_gives_the_batches_of_sync(share, no_leaks):
    fns = [partial(CountingEnv, env_id=i, episode_length=2 + i) for i in range(4)]
    with ParallelRolloutCollector(fns, None, "sync", horizon=7, seed=9) as reference, \
            ParallelRolloutCollector(fns, None, "async", horizon=7, seed=9, main_process_envs=share) as collector:
        assert pool_of(collector).workers[0].stop == share
        for _ in range(3):
            assert_batches_identical(collector.collect(), reference.collect())


def test_an_env_failing_in_the_main_process_share_is_named_and_nothing_leaks(no_leaks):
    fns = [partial(FaultyEnv, env_id=i, phase="step", at=2) if i == 0 else partial(CountingEnv, env_id=i) for i in range(4)]
    collector = ParallelRolloutCollector(fns, None, "async", horizon=6, seed=0, main_process_envs=2)
    try:
        with pytest.raises(WorkerError, match="env 0"):
            collector.collect()
    finally:
        collector.close()


def test_a_factory_failing_in_the_main_process_share_is_reported_with_the_workers_and_nothing_leaks(no_leaks):
    def broken():
        raise RuntimeError("no env here")

    with pytest.raises(WorkerError, match="no env here"):
        ParallelRolloutCollector([broken] + cartpoles(3), None, "async", horizon=4, seed=0, main_process_envs=1)


def test_the_vector_env_and_its_share_step_like_sync_vector_env(monkeypatch, no_leaks):
    two_cores(monkeypatch)
    fns = cartpoles(6)
    ours = ParallelVectorEnv(fns, backend="async")
    reference = gym.vector.SyncVectorEnv(fns)
    try:
        assert pool_of(ours).workers[0].is_local
        np.testing.assert_array_equal(ours.reset(seed=3)[0], reference.reset(seed=3)[0])
        actions = np.random.default_rng(0).integers(0, 2, size=(60, 6))
        for row in actions:
            mine, theirs = ours.step(row), reference.step(row)
            for a, b in zip(mine[:4], theirs[:4]):
                np.testing.assert_array_equal(a, b)
        assert ours.get_attr("spec")[0].id == "CartPole-v1"
    finally:
        ours.close()
        reference.close()


# -- ready-first stepping ----------------------------------------------------------------------------


def run_ready_first(env: ParallelVectorEnv, receives: int, seed: int = 1) -> list:
    """Send every env, then ``receives`` times: recv a batch, record it, send it back with
    actions that depend on the observations (so that a replay must serve the same envs)."""
    observations, _ = env.reset(seed=seed)
    env.send((observations[:, 2] > 0).astype(np.int64))
    record = []
    for _ in range(receives):
        observations, rewards, terminations, truncations, infos = env.recv()
        record.append((infos["env_id"].copy(), observations.copy(), rewards.copy(), terminations.copy(), truncations.copy()))
        env.send((observations[:, 2] > 0).astype(np.int64))
    return record


@pytest.mark.parametrize("backend", ["async", "sync"])
def test_a_ready_first_run_replays_exactly_from_its_served_record(backend, no_leaks):
    fns = cartpoles(6)
    live = ParallelVectorEnv(fns, backend=backend, batch_size=3)
    try:
        first = run_ready_first(live, 80)
        served = live.served
    finally:
        live.close()
    assert len(served) == 80 and all(ids.size == 3 for ids in served)
    np.testing.assert_array_equal(np.concatenate(served), np.concatenate([entry[0] for entry in first]))
    for replay_backend in ("sync", "async"):
        assert_replays(fns, replay_backend, served, first)


def assert_replays(fns, backend: str, served: list, first: list) -> None:
    """A vector env on ``backend`` given ``serve_order=served`` returns exactly the record ``first``."""
    replay = ParallelVectorEnv(fns, backend=backend, batch_size=served[0].size, serve_order=served)
    try:
        again = run_ready_first(replay, len(first))
    finally:
        replay.close()
    for live_entry, replayed in zip(first, again):
        for a, b in zip(live_entry, replayed):
            np.testing.assert_array_equal(a, b)


def test_ready_first_steps_a_share_given_to_this_process_and_replays_on_sync(monkeypatch, no_leaks):
    """``main_process_envs`` with ``batch_size``: that share steps inside ``recv()``; the run
    replays exactly on sync. Without it, ready-first gives this process no share."""
    two_cores(monkeypatch)
    fns = cartpoles(6)
    default = ParallelVectorEnv(fns, backend="async", batch_size=3)
    try:
        assert not any(worker.is_local for worker in pool_of(default).workers)
    finally:
        default.close()
    live = ParallelVectorEnv(fns, backend="async", batch_size=3, main_process_envs=2)
    try:
        assert [worker.stop - worker.start for worker in pool_of(live).workers if worker.is_local] == [2]
        first = run_ready_first(live, 60)
        served = live.served
    finally:
        live.close()
    assert {0, 1} <= set(np.concatenate(served).tolist())  # the share's envs were served too
    assert_replays(fns, "sync", served, first)


def test_each_env_of_a_ready_first_run_follows_its_own_sync_vector_env_trajectory(no_leaks):
    """Whatever the order, env i's steps are those SyncVectorEnv gives env i for the same actions."""
    fns = cartpoles(4)
    env = ParallelVectorEnv(fns, backend="async", batch_size=2)
    try:
        record = run_ready_first(env, 120, seed=7)
    finally:
        env.close()
    for index in range(4):
        single = gym.vector.SyncVectorEnv([fns[index]])
        observation, _ = single.reset(seed=7 + index)
        for ids, observations, rewards, terminations, truncations in record:
            if index not in ids:
                continue
            position = int(np.flatnonzero(ids == index)[0])
            action = np.array([int(observation[0, 2] > 0)])
            observation, reward, terminated, truncated, _ = single.step(action)
            np.testing.assert_array_equal(observations[position], observation[0])
            assert (rewards[position], terminations[position], truncations[position]) == (reward[0], terminated[0], truncated[0])
        single.close()


def test_ready_first_misuse_is_refused_with_what_to_do(no_leaks):
    env = ParallelVectorEnv(cartpoles(4), backend="async", batch_size=2)
    try:
        with pytest.raises(gym.error.ResetNeeded):
            env.send(np.zeros(4, dtype=np.int64))
        env.reset(seed=0)
        with pytest.raises(ConfigurationError, match="only 0 were sent"):
            env.recv()
        env.send(np.zeros(2, dtype=np.int64), env_ids=[0, 1])
        with pytest.raises(ConfigurationError, match=r"envs \[1\] were sent and not yet returned"):
            env.send(np.zeros(2, dtype=np.int64), env_ids=[1, 2])
        with pytest.raises(ConfigurationError, match="`step` steps every env"):
            env.step(np.zeros(4, dtype=np.int64))
        with pytest.raises(ConfigurationError, match="env_ids"):
            env.send(np.zeros(1, dtype=np.int64), env_ids=[9])
        _, _, _, _, infos = env.recv()
        assert sorted(infos["env_id"].tolist()) == [0, 1]
        env.reset(seed=0)  # waits out nothing, clears the record
        assert env.served == []
    finally:
        env.close()
    with pytest.raises(ConfigurationError, match="`batch_size` must be an int from 1"):
        ParallelVectorEnv(cartpoles(2), batch_size=3)
    with pytest.raises(ConfigurationError, match="give `batch_size` too"):
        ParallelVectorEnv(cartpoles(2), serve_order=[[0]])
    with pytest.raises(ConfigurationError, match="`send` is ready-first stepping"):
        plain = ParallelVectorEnv(cartpoles(2), backend="sync")
        try:
            plain.send(np.zeros(2, dtype=np.int64))
        finally:
            plain.close()


def test_a_reset_in_the_middle_of_ready_first_stepping_waits_for_the_envs_in_flight(no_leaks):
    env = ParallelVectorEnv(cartpoles(4), backend="async", batch_size=2)
    try:
        env.reset(seed=0)
        env.send(np.zeros(4, dtype=np.int64))
        observations, _ = env.reset(seed=0)
        fresh = gym.vector.SyncVectorEnv(cartpoles(4))
        np.testing.assert_array_equal(observations, fresh.reset(seed=0)[0])
        fresh.close()
        env.send(np.zeros(4, dtype=np.int64))
        assert env.recv()[0].shape == (2, 4)
    finally:
        env.close()


def test_an_ended_env_is_reset_by_its_next_send_in_next_step_mode(no_leaks):
    fns = [partial(CountingEnv, env_id=i, episode_length=2) for i in range(2)]
    env = ParallelVectorEnv(fns, backend="async", batch_size=2)
    try:
        env.reset(seed=0)
        steps = []
        env.send(np.zeros(2, dtype=np.int64))
        for _ in range(4):
            observations, rewards, terminations, truncations, infos = env.recv()
            order = np.argsort(infos["env_id"])
            steps.append((observations[order, 1].tolist(), terminations[order].tolist()))
            env.send(np.zeros(2, dtype=np.int64))
        # step 1, step 2 (ends), the reset (step 0 again, its action ignored), step 1
        assert steps == [([1, 1], [False, False]), ([2, 2], [True, True]), ([0, 0], [False, False]), ([1, 1], [False, False])]
    finally:
        env.close()


def test_a_worker_dying_during_ready_first_stepping_is_named_and_breaks_the_env(no_leaks):
    fns = cartpoles(4)
    fns[3] = partial(CrashingCartPole, 3, "kill")
    env = ParallelVectorEnv(fns, backend="async", batch_size=2)
    try:
        env.reset(seed=0)
        env.send(np.zeros(4, dtype=np.int64))
        with pytest.raises(WorkerError, match="killed by signal SIGKILL"):
            # However the two workers' speeds compare, env 3 reaches its third step well within these.
            for _ in range(500):
                _, _, _, _, infos = env.recv()
                env.send(np.zeros(2, dtype=np.int64))
        assert env.broken
    finally:
        env.close()
