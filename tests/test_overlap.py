"""Collecting while the learner trains (``max_policy_lag=1``): every mode gives the batches of the
turn-taking loop run with the same policy snapshots; versions are recorded; failures, close and
Ctrl-C in flight leave nothing behind."""

from __future__ import annotations

import os
import signal
import threading
import time
from functools import partial

import numpy as np
import pytest

from parallel_rollouts import ConfigurationError, ParallelRolloutCollector, RunnerState
from tests.batch_compare import assert_batches_identical
from tests.envs import CountingEnv, CrashingCartPole, cartpole
from tests import overlap_policies
from tests.overlap_policies import (
    MODULE_NETWORK,
    SamplingLinear,
    act_through_a_relative_import,
    act_with_the_module_network,
    scaled_module_network,
    learn,
    overlapped,
    turn_taking_with_delayed_updates,
    without_versions,
)
from tests.recurrent_policies import counting_policy

pytestmark = pytest.mark.timeout(180)

NUM_ENVS, HORIZON, COLLECTS = 4, 16, 4

MODES = {
    "serial": dict(backend="serial"),
    "sync": dict(backend="sync"),
    "async defaults": dict(backend="async"),
    "async every env in a worker": dict(backend="async", main_process_envs=0),
    "pipelined": dict(backend="async", num_workers=2, pipelined=True),
    "rollout workers": dict(backend="async", num_workers=2, policy_placement="workers"),
}


def _collector(policy, mode: str, lag: int, fns=None, **kwargs) -> ParallelRolloutCollector:
    options = {**MODES[mode], **kwargs}
    backend = options.pop("backend")
    fns = fns or [cartpole] * NUM_ENVS
    return ParallelRolloutCollector(fns, policy, backend, horizon=HORIZON, seed=4, max_policy_lag=lag, **options)


@pytest.mark.parametrize("mode", list(MODES))
def test_lag_1_gives_the_turn_taking_loop_s_batches_for_the_same_policy_snapshots(mode, no_leaks):
    policy = SamplingLinear()
    with _collector(policy, mode, 0) as collector:
        expected = turn_taking_with_delayed_updates(collector, policy, COLLECTS)
    policy = SamplingLinear()
    with _collector(policy, mode, 1) as collector:
        got = overlapped(collector, policy, COLLECTS)
        assert collector.max_policy_lag == 1
    assert [int(batch.policy_versions.min()) for batch in got] == [0, 0, 1, 2]
    assert all((batch.policy_versions == batch.policy_versions[0, 0]).all() for batch in got)
    assert [int(batch.policy_versions[0, 0]) for batch in expected] == list(range(COLLECTS))
    for first, second in zip(expected, got):
        assert_batches_identical(without_versions(first), without_versions(second))
    # The policy learned: later batches were acted on by other weights than the first.
    assert not np.array_equal(got[0].log_probs, got[-1].log_probs)


@pytest.mark.parametrize("mode", ["sync", "rollout workers"])
def test_a_recurrent_policy_s_state_carries_across_overlapped_batches(mode):
    runs = {}
    for lag in (0, 1):
        with _collector(counting_policy(), mode, lag, store_states=True) as collector:
            runs[lag] = [collector.collect() for _ in range(COLLECTS)]
    for first, second in zip(runs[0], runs[1]):
        assert_batches_identical(without_versions(first), without_versions(second))
    for before, after in zip(runs[1], runs[1][1:]):
        np.testing.assert_array_equal(after.initial_state["count"], before.bootstrap_states["count"])


class FailsAtCall:
    """Raises at its ``fail_at``-th call; acts like :class:`SamplingLinear` otherwise."""

    def __init__(self, fail_at: int) -> None:
        self.inner = SamplingLinear()
        self.calls = 0
        self.fail_at = fail_at

    def __call__(self, observations):
        self.calls += 1
        if self.calls == self.fail_at:
            raise ValueError("the policy broke at this call")
        return self.inner(observations)


@pytest.mark.parametrize("mode", ["async defaults", "rollout workers"])
def test_a_policy_that_raises_in_the_background_is_reported_by_the_next_collect(mode, no_leaks):
    policy = FailsAtCall(-1)
    with _collector(policy, mode, 1) as collector:
        first = collector.collect()
        # The copy that collects the next batch but one is taken at the next hand-out: it fails
        # at its third row, in the background.
        policy.fail_at = 3
        second = collector.collect()
        policy.fail_at = -1
        with pytest.raises(ValueError, match="the policy broke at this call"):
            collector.collect()
        assert collector.state is RunnerState.READY
        later = [collector.collect() for _ in range(2)]
    assert [int(batch.policy_versions[0, 0]) for batch in (first, second)] == [0, 0]
    # The envs went on from where the dropped rollout left them; the next batches started afresh,
    # their snapshots taken after two collect() calls had returned.
    assert all(batch.rewards.shape == (HORIZON, NUM_ENVS) for batch in later)
    assert [int(batch.policy_versions[0, 0]) for batch in later] == [2, 2]


class MarkedSlowEnv(CountingEnv):
    """Steps of 50 ms from its ``SLOW_FROM``-th step on (the second batch); its ``close()``
    leaves a file behind."""

    SLOW_FROM = 20

    def __init__(self, env_id: int, marks: str) -> None:
        super().__init__(env_id=env_id, episode_length=7)
        self.marks = marks
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps > self.SLOW_FROM:
            time.sleep(0.05)
        return super().step(action)

    def close(self):
        open(os.path.join(self.marks, f"closed-{self.env_id}"), "w").close()


@pytest.mark.parametrize("mode", ["sync", "async defaults", "pipelined", "rollout workers"])
def test_close_with_a_batch_in_flight_closes_every_env_and_leaves_nothing(mode, tmp_path, no_leaks):
    fns = [partial(MarkedSlowEnv, index, str(tmp_path)) for index in range(NUM_ENVS)]
    options = {**MODES[mode]}
    backend = options.pop("backend")
    collector = ParallelRolloutCollector(
        fns, lambda observations: np.zeros(len(observations), dtype=np.int64), backend,
        horizon=MarkedSlowEnv.SLOW_FROM, seed=0, max_policy_lag=1, **options,
    )
    collector.collect()  # returns the first batch, the second is now being collected
    assert collector.state is RunnerState.COLLECTING
    started = time.monotonic()
    collector.close()
    # A row of the second batch takes 50 ms per env; the background rollout stops at its next
    # row, where finishing it would take 2 s or more (rollout workers: past the pool's close
    # bound, so their envs were closed only because the rollout stopped). Loose, for a loaded
    # machine.
    assert time.monotonic() - started < 30
    assert collector.state is RunnerState.CLOSED
    assert sorted(os.listdir(tmp_path)) == [f"closed-{index}" for index in range(NUM_ENVS)]


@pytest.mark.parametrize("mode", ["async defaults", "rollout workers"])
def test_a_worker_lost_while_a_batch_is_in_flight_is_replaced(mode, tmp_path, no_leaks):
    marker = str(tmp_path / "crashed")
    fns = [cartpole] * NUM_ENVS
    fns[3] = partial(CrashingCartPole, HORIZON + 5, "kill", marker)
    options = {"max_restarts": 1, "num_workers": 2}
    if mode == "rollout workers":
        options["policy_placement"] = "workers"
    with ParallelRolloutCollector(fns, None, "async", horizon=HORIZON, seed=1, max_policy_lag=1, **options) as collector:
        batches = [collector.collect() for _ in range(3)]
    assert os.path.exists(marker)
    assert 3 in batches[1].lost_env_indices and not batches[1].valid[:, 3].all()
    assert batches[2].valid.all() and batches[0].valid.all()


def test_ctrl_c_while_waiting_for_the_batch_in_flight_leaves_it_in_flight():
    """The interrupt lands in the caller's wait; the rollout runs on, and the next `collect()`
    returns it: the batches are those of an uninterrupted run."""
    go = threading.Event()

    class HeldBack(SamplingLinear):
        """Holds the background rollout of batch 1 at its third row until ``go`` is set, so that
        the interrupt surely lands while the caller waits for that batch."""

        calls = 0

        def __call__(self, observations):
            type(self).calls += 1
            if type(self).calls == HORIZON + 3:
                assert go.wait(60)
            return super().__call__(observations)

    with _collector(SamplingLinear(), "sync", 1) as collector:
        expected = [collector.collect() for _ in range(3)]
    with _collector(HeldBack(), "sync", 1) as collector:
        got = [collector.collect()]
        interrupt = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
        with pytest.raises(KeyboardInterrupt):
            interrupt.start()
            collector.collect()
        interrupt.join()
        assert collector.state is RunnerState.COLLECTING
        go.set()
        got += [collector.collect() for _ in range(2)]
    for first, second in zip(expected, got):
        assert_batches_identical(first, second)


def test_collect_after_a_close_with_a_batch_in_flight_says_the_collector_is_closed():
    from parallel_rollouts import CollectorClosedError

    for mode in ("sync", "rollout workers"):
        collector = _collector(SamplingLinear(), mode, 1)
        collector.collect()
        collector.close()
        with pytest.raises(CollectorClosedError, match="closed"):
            collector.collect()


def test_a_policy_function_reading_a_network_from_its_globals_is_refused_with_the_name():
    global NETWORK
    NETWORK = SamplingLinear()

    def reads_a_global(observations):
        return NETWORK(observations)

    def closure():
        network = SamplingLinear()
        return lambda observations: network(observations)

    with pytest.raises(ConfigurationError, match=r"reads_a_global` reads `NETWORK` \(a SamplingLinear\) from its module's globals"):
        ParallelRolloutCollector([cartpole], reads_a_global, "sync", max_policy_lag=1)
    with pytest.raises(ConfigurationError, match=r"reads `network` \(a SamplingLinear\) from its closure"):
        ParallelRolloutCollector([cartpole], closure(), "sync", max_policy_lag=1)
    # The same functions are fine without the lag, and a function that reads only modules is fine with it.
    ParallelRolloutCollector([cartpole], reads_a_global, "sync").close()
    ParallelRolloutCollector([cartpole], lambda o: np.zeros(len(o), dtype=np.int64), "sync", max_policy_lag=1).close()


class _CallsTheModuleNetwork:
    """A policy object whose ``__call__`` reads the network from a module's globals."""

    def __call__(self, observations):
        return MODULE_NETWORK(observations)


class _HoldsItInTheClass:
    """The network on the class: ``copy.deepcopy`` of an instance shares it."""

    network = SamplingLinear()

    def __call__(self, observations):
        return self.network(observations)


class _HoldsTheNetwork:
    def __init__(self):
        self.network = SamplingLinear()

    def act(self, observations):
        return self.network(observations)


def _default_argument(observations, network=MODULE_NETWORK):
    return network(observations)


def _reads_the_module_attribute(observations):
    return overlap_policies.MODULE_NETWORK(observations)


@pytest.mark.parametrize(
    "policy, found",
    [
        (_default_argument, r"`_default_argument` holds a SamplingLinear as the default of its argument `network`"),
        (lambda observations, network=MODULE_NETWORK: network(observations), r"`<lambda>` holds a SamplingLinear as the default"),
        (act_through_a_relative_import, r"`act_through_a_relative_import` reads `tests.overlap_policies.MODULE_NETWORK` \(a SamplingLinear\)"),
        (_HoldsItInTheClass(), r"the class `_HoldsItInTheClass` holds `network` \(a SamplingLinear\) as a class attribute"),
        (_reads_the_module_attribute, r"`_reads_the_module_attribute` reads `overlap_policies.MODULE_NETWORK` \(a SamplingLinear\) through the module `tests.overlap_policies`"),
        (partial(scaled_module_network, 2.0), r"`scaled_module_network` reads `tests.overlap_policies.MODULE_NETWORK` \(a SamplingLinear\) through the module"),
        (act_with_the_module_network, r"`act_with_the_module_network` reads `MODULE_NETWORK` \(a SamplingLinear\) from its module's globals"),
        (_CallsTheModuleNetwork(), r"`_CallsTheModuleNetwork.__call__` reads `MODULE_NETWORK` \(a SamplingLinear\) from its module's globals"),
    ],
    ids=["default argument", "lambda over a default", "relative import", "class attribute", "module attribute",
         "partial over a module attribute", "a module's function", "__call__ reading a module global"],
)
def test_a_policy_reaching_a_network_a_copy_would_share_is_refused_naming_it(policy, found):
    """``copy.deepcopy`` copies functions and classes as they are, so a network reached through a
    default, a module attribute or a method's globals would be the live one in the background
    rollout: refused at construction, naming what was found and how to pass the network instead."""
    with pytest.raises(ConfigurationError, match=found) as refused:
        ParallelRolloutCollector([cartpole], policy, "sync", max_policy_lag=1)
    assert "functools.partial(function, network)" in str(refused.value)
    ParallelRolloutCollector([cartpole], policy, "sync").close()  # without the lag nothing is copied


@pytest.mark.parametrize("shape", ["bound method", "partial over the network", "torch module"])
def test_policies_that_hold_their_network_are_snapshotted_and_the_update_never_reaches_the_batch(shape):
    """A bound method of an object holding the network, and ``functools.partial`` over the
    network, are copied whole: lag 1 gives the turn-taking loop's batches."""
    def make():
        if shape == "bound method":
            holder = _HoldsTheNetwork()
            return holder.act, holder.network
        if shape == "partial over the network":
            network = SamplingLinear()
            return partial(lambda net, observations: net(observations), network), network
        import torch

        class Linear(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = SamplingLinear()

            def forward(self, observations):
                return self.inner(observations)

        module = Linear()
        return module, module.inner

    policy, network = make()
    with _collector(policy, "sync", 0) as collector:
        expected = turn_taking_with_delayed_updates(collector, network, COLLECTS)
    policy, network = make()
    with _collector(policy, "sync", 1) as collector:
        got = overlapped(collector, network, COLLECTS)
    for first, second in zip(expected, got):
        assert_batches_identical(without_versions(first), without_versions(second))


def test_max_policy_lag_is_checked_with_what_to_do():
    with pytest.raises(ConfigurationError, match=r"`max_policy_lag` must be 0 .* or 1 .*got 2"):
        ParallelRolloutCollector([cartpole], None, "sync", max_policy_lag=2)
    with pytest.raises(ConfigurationError, match=r"`reuse_buffers=True` writes every batch into the same arrays"):
        ParallelRolloutCollector([cartpole], None, "sync", max_policy_lag=1, reuse_buffers=True)

    class HoldsALock:
        def __init__(self):
            self.lock = threading.Lock()

        def __call__(self, observations):
            return np.zeros(len(observations), dtype=np.int64)

    with pytest.raises(ConfigurationError, match=r"the policy cannot be copied \(TypeError: .*lock"):
        ParallelRolloutCollector([cartpole], HoldsALock(), "sync", max_policy_lag=1)


@pytest.mark.parametrize("mode", ["sync", "rollout workers"])
def test_the_usual_loop_recycles_three_batches_of_memory(mode, no_leaks):
    """``batch = collector.collect()`` keeps the last batch alive until the new one is bound: with
    the one being handed out and the one in flight, three batches live at once, and their memory
    (rollout workers: their shared segments) goes round without a new allocation."""
    policy = SamplingLinear()
    buffers = []
    with _collector(policy, mode, 1) as collector:
        batch = None
        for _ in range(9):
            batch = collector.collect()
            learn(policy, batch)
            buffers.append(batch.rewards.__array_interface__["data"][0])
    assert len(set(buffers[3:])) == 3, buffers


def test_an_exit_with_a_batch_in_flight_and_no_close_ends_cleanly():
    """The interpreter's exit stops the rollout in flight before the pool frees the processes
    and shared memory it uses: exit code 0, nothing on stderr, no segment left."""
    from tests.leaks import assert_no_resource_tracker_warning, run_script

    result = run_script(
        """
        import os
        import numpy as np
        from parallel_rollouts import ParallelRolloutCollector
        from tests.envs import cartpole

        if __name__ == "__main__":
            collector = ParallelRolloutCollector([cartpole] * 4, lambda o: np.zeros(len(o), dtype=np.int64), "async",
                                                 horizon=2000, seed=0, max_policy_lag=1)
            collector.collect()
            print("in flight:", collector.state.value, os.getpid(), flush=True)
        """,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "in flight: collecting" in result.stdout
    assert_no_resource_tracker_warning(result.stderr)
    pid = result.stdout.split()[-1]
    assert not [name for name in os.listdir("/dev/shm") if name.startswith(f"prl{pid}_")]


def test_a_stable_baselines3_policy_passes_the_check():
    """An SB3 ``ActorCriticPolicy`` holds its networks as attributes and its classes' methods read
    nothing a learner changes from their modules: copied whole, never refused."""
    import gymnasium as gym
    from stable_baselines3 import PPO

    from parallel_rollouts.policy.snapshot import uncopyable_state

    policy = PPO("MlpPolicy", gym.make("CartPole-v1"), device="cpu").policy
    assert uncopyable_state(policy) is None
    assert uncopyable_state(lambda observations: policy.predict(observations)[0]) is not None  # reads `policy` from its closure
