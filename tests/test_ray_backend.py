"""The Ray backend on a local Ray instance: same batch as sync, faults, restarts, clean close."""

import sys
from functools import partial

import numpy as np
import psutil
import pytest
import ray  # the dev extra installs Ray; a missing Ray fails the suite

from parallel_rollouts import (
    ActionError,
    CollectorClosedError,
    ConfigurationError,
    ObservationWarning,
    ParallelRolloutCollector,
    PolicyOutput,
    StepTimeoutError,
    WorkerDiedError,
    WorkerError,
)
from parallel_rollouts.config.seeding import episode_seed
from tests.batch_compare import assert_batches_identical
from tests.bounds import assert_returns
from tests.envs import ConstantPolicy, CountingEnv, FaultyEnv, HangingCloseEnv, ObservationDependentPolicy, cartpole
from tests.test_reference_replay import assert_replays, make_case
from tests.test_reference_replay import collect as collect_for_replay

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def collect(backend, fns, policy=None, collects=3, **kwargs):
    with ParallelRolloutCollector(fns, policy, backend, **kwargs) as collector:
        return [collector.collect() for _ in range(collects)]


@pytest.mark.parametrize("num_workers", [1, 2])
def test_ray_matches_sync_with_a_policy_and_with_random_actions(num_workers):
    for policy in (ObservationDependentPolicy(2), None):
        expected = collect("sync", [cartpole] * 5, policy, horizon=30, seed=8)
        got = collect("ray", [cartpole] * 5, policy, horizon=30, seed=8, num_workers=num_workers)
        for first, second in zip(expected, got):
            assert_batches_identical(first, second)
            assert second.lost_env_indices.size == 0


def test_ray_matches_sync_on_nested_spaces_with_random_actions():
    from tests.test_backend_identity import space_env_fns

    expected = collect("sync", space_env_fns("dict_nested", 4), None, horizon=9, seed=321)
    got = collect("ray", space_env_fns("dict_nested", 4), None, horizon=9, seed=321, num_workers=2)
    for first, second in zip(expected, got):
        assert_batches_identical(first, second)


def test_vector_env_factories_span_their_sub_envs_on_ray_as_on_sync():
    import gymnasium

    factories = [partial(gymnasium.make_vec, "CartPole-v1", num_envs=3), partial(gymnasium.make_vec, "CartPole-v1", num_envs=2)]
    expected = collect("sync", factories, ObservationDependentPolicy(2), horizon=20, seed=4)
    got = collect("ray", factories, ObservationDependentPolicy(2), horizon=20, seed=4, num_workers=2)
    for first, second in zip(expected, got):
        assert second.num_envs == 5
        assert_batches_identical(first, second)


class ValuesForTheFirstSliceOnly:
    """Returns values only when it sees env 0 (a CountingEnv's observation starts with its env id)."""

    def __call__(self, observations):
        actions = np.zeros(observations.shape[0], dtype=np.int64)
        if observations[0, 0] == 0:
            return PolicyOutput(actions, values=np.zeros(observations.shape[0]))
        return actions


def test_actors_disagreeing_on_values_are_an_action_error_not_a_merge():
    fns = [partial(CountingEnv, env_id=i, episode_length=50) for i in range(3)]
    with ParallelRolloutCollector(fns, ValuesForTheFirstSliceOnly(), "ray", horizon=2, seed=0, num_workers=2) as collector:
        with pytest.raises(ActionError, match=r"returned `values` for envs 0..1 but not for envs 2..2"):
            collector.collect()


def test_values_and_log_probs_travel_back():
    def policy(observations):
        return PolicyOutput((observations[:, 2] > 0).astype(np.int64), values=observations[:, 0], log_probs=-observations[:, 1] ** 2)

    expected = collect("sync", [cartpole] * 4, policy, horizon=10, seed=1)
    got = collect("ray", [cartpole] * 4, policy, horizon=10, seed=1, num_workers=2)
    for first, second in zip(expected, got):
        assert_batches_identical(first, second)
        assert second.values is not None and second.log_probs is not None


def test_a_torch_module_policy_ships_its_new_weights_on_every_collect():
    import torch

    class Linear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def forward(self, observations):
            with torch.no_grad():
                score = self.layer(torch.as_tensor(observations, dtype=torch.float32))[:, 0]
            return (score > 0).long()

    module = Linear()
    fns = [partial(CountingEnv, env_id=i, episode_length=50, num_actions=2) for i in range(2)]
    with ParallelRolloutCollector(fns, module, "ray", horizon=3, seed=0, num_workers=2) as collector:
        with torch.no_grad():
            module.layer.weight.zero_()
            module.layer.bias.fill_(1.0)
        assert (collector.collect().actions == 1).all()
        with torch.no_grad():
            module.layer.bias.fill_(-1.0)
        assert (collector.collect().actions == 0).all()


def test_an_env_exception_is_a_worker_error_with_the_remote_traceback():
    fns = [partial(CountingEnv, env_id=i) for i in range(4)]
    fns[3] = partial(FaultyEnv, env_id=3, phase="step", at=2)
    collector = ParallelRolloutCollector(fns, ConstantPolicy(2), "ray", horizon=4, seed=0, num_workers=2)
    with pytest.raises(WorkerError, match=r"env 3 raised ValueError in `step`: env 3 fails in step on call 2") as info:
        collector.collect()
    assert info.value.env_indices == (3,)
    assert "_maybe_fail" in info.value.remote_traceback
    with pytest.raises(CollectorClosedError):
        collector.collect()
    collector.close()
    collector.close()


def _factory_without_a_license():
    raise RuntimeError("no simulator license on this node")


def test_a_factory_that_raises_in_an_actor_is_named_not_reported_as_a_death():
    fns = [partial(CountingEnv, env_id=i) for i in range(4)]
    fns[1] = _factory_without_a_license
    with pytest.raises(WorkerError, match=r"env 1 raised RuntimeError in `make`: no simulator license on this node") as info:
        ParallelRolloutCollector(fns, ConstantPolicy(2), "ray", horizon=4, seed=0, num_workers=2)
    assert info.value.env_indices == (1,)
    assert "_factory_without_a_license" in info.value.remote_traceback


def test_one_env_object_behind_several_indices_of_an_actor_is_refused():
    from tests.envs import module_level_env
    from tests.test_shared_env_instances import SHARED

    fns = [partial(CountingEnv), partial(CountingEnv), module_level_env, module_level_env]
    with pytest.raises(ConfigurationError, match=r"env_fns\[2\], env_fns\[3\] " + SHARED):
        ParallelRolloutCollector(fns, None, "ray", horizon=4, seed=0, num_workers=2)


def test_a_policy_exception_reaches_the_caller_unwrapped_and_breaks_the_collector():
    class FailingPolicy:
        def __call__(self, observations):
            if observations[0, 1] == 1:  # the second step of the first episode
                raise ArithmeticError("policy bug")
            return np.ones(observations.shape[0], dtype=np.int64)

    collector = ParallelRolloutCollector(
        [partial(CountingEnv, env_id=i, episode_length=5) for i in range(2)], FailingPolicy(), "ray", horizon=3, seed=0
    )
    with pytest.raises(ArithmeticError, match="policy bug"):
        collector.collect()
    # The other actor stepped on while this one failed: no common row to continue from.
    with pytest.raises(CollectorClosedError, match=r"broken by an earlier failure \(ArithmeticError"):
        collector.collect()
    collector.close()


def test_an_actor_killed_mid_collect_without_restarts_breaks_the_collector():
    fns = [partial(CountingEnv, env_id=i) for i in range(4)]
    fns[1] = partial(FaultyEnv, env_id=1, phase="step", at=2, how="exit")
    collector = ParallelRolloutCollector(fns, ConstantPolicy(2), "ray", horizon=4, seed=0, num_workers=2)
    with pytest.raises(WorkerDiedError, match=r"Ray actor 0 \(envs 0..1\) died while running its rollout\.") as info:
        collector.collect()
    assert info.value.env_indices == (0, 1)
    with pytest.raises(CollectorClosedError):
        collector.collect()
    collector.close()


def test_an_actor_killed_mid_collect_is_restarted_and_its_rows_are_marked_lost():
    fns = [partial(CountingEnv, env_id=i, episode_length=2) for i in range(4)]
    fns[3] = partial(FaultyEnv, env_id=3, phase="step", at=6, how="exit", episode_length=2)
    with ParallelRolloutCollector(
        fns, ConstantPolicy(4), "ray", horizon=4, seed=5, num_workers=2, ray_options={"max_restarts": 1}
    ) as collector:
        first = collector.collect()  # env 3 steps 4 times: episodes 0, 1 complete, episode 2 in progress
        second = collector.collect()  # env 3's process dies on its 6th step
        assert first.lost_env_indices.size == 0
        np.testing.assert_array_equal(second.lost_env_indices, [2, 3])
        assert not second.rewards[:, 2:].any()
        # Lost rows are not valid: a loss masked with `valid` trains on none of them.
        assert not second.valid[:, 2:].any() and second.valid[:, :2].all()
        assert not np.isin(second.episode_env_indices, [2, 3]).any()
        third = collector.collect()
    assert third.lost_env_indices.size == 0
    assert third.valid.all()
    # The replacement's envs start fresh episodes from their first restart's seed stream,
    # which no episode used before (not even those cut in the lost rollout).
    for env in (2, 3):
        np.testing.assert_array_equal(third.step_episode_seeds[:2, env], episode_seed(5, env, 0, incarnation=1))
        np.testing.assert_array_equal(third.observations[0, env, 1], 0)
    # The other actor's envs continued untouched.
    reference = collect("sync", [partial(CountingEnv, env_id=i, episode_length=2) for i in range(2)], ConstantPolicy(2), horizon=4, seed=5)
    for batch, expected in zip((first, second, third), reference):
        np.testing.assert_array_equal(batch.observations[:, :2], expected.observations)


def test_once_the_restarts_are_spent_the_error_lists_every_actor_lost_as_the_async_backend_does():
    # Env 3 exits on its 6th step: in the second collect, then again in its replacement's second.
    fns = [partial(CountingEnv, env_id=i, episode_length=2) for i in range(4)]
    fns[3] = partial(FaultyEnv, env_id=3, phase="step", at=6, how="exit", episode_length=2)
    collector = ParallelRolloutCollector(fns, ConstantPolicy(4), "ray", horizon=4, seed=5, num_workers=2, max_restarts=1)
    try:
        collector.collect()
        np.testing.assert_array_equal(collector.collect().lost_env_indices, [2, 3])
        collector.collect()
        with pytest.raises(WorkerDiedError) as info:
            collector.collect()
    finally:
        collector.close()
    # The message of checks/failures.py's restarts_exhausted, one line per loss, in order.
    lines = str(info.value).splitlines()
    assert lines[0] == "workers were lost 2 times, more than max_restarts=1 allows; each loss, in order:"
    for number in (1, 2):
        assert lines[number].startswith(f"  {number}. Ray actor 1 (envs 2..3) died while running its rollout.")
    assert info.value.env_indices == (2, 3, 2, 3)


def test_asked_to_go_on_without_lost_actors_the_collector_keeps_collecting_with_their_envs_masked():
    fns = [partial(CountingEnv, env_id=i, episode_length=2) for i in range(4)]
    fns[3] = partial(FaultyEnv, env_id=3, phase="step", at=6, how="exit", episode_length=2)
    options = {"max_restarts": 0, "continue_without_lost_actors": True}
    with ParallelRolloutCollector(fns, ConstantPolicy(4), "ray", horizon=4, seed=5, num_workers=2, ray_options=options) as collector:
        first, second, third = (collector.collect() for _ in range(3))
    assert first.valid.all() and first.lost_env_indices.size == 0
    for batch in (second, third):
        np.testing.assert_array_equal(batch.lost_env_indices, [2, 3])
        assert not batch.valid[:, 2:].any() and batch.valid[:, :2].all()
        assert not batch.rewards[:, 2:].any() and not np.isin(batch.episode_env_indices, [2, 3]).any()


def _env_needing_the_variable(name: str):
    import os

    if os.environ.get(name) != "set-by-runtime-env":
        raise RuntimeError(f"{name} is not set: the runtime_env did not reach this actor")
    return CountingEnv()


def test_runtime_env_and_scheduling_strategy_pass_through_to_the_actors():
    import os

    name = "PARALLEL_ROLLOUTS_TEST_RUNTIME_ENV"
    assert name not in os.environ
    options = {"runtime_env": {"env_vars": {name: "set-by-runtime-env"}}, "scheduling_strategy": "SPREAD"}
    fns = [partial(_env_needing_the_variable, name)] * 2
    with ParallelRolloutCollector(fns, None, "ray", horizon=2, seed=0, num_workers=2, ray_options=options) as collector:
        assert collector.collect().valid.all()
    # Without it, the factory raises in the actor: the option is what made it pass.
    with pytest.raises(WorkerError, match=r"runtime_env did not reach this actor"):
        ParallelRolloutCollector(fns, None, "ray", horizon=2, seed=0, num_workers=2)
    with pytest.raises(ConfigurationError, match=r"`ray_options\['runtime_env'\]` must be a dict; got 'pip'"):
        ParallelRolloutCollector(fns, None, "ray", ray_options={"runtime_env": "pip"})


def test_close_kills_the_actors_it_created_and_leaves_the_joined_cluster_running():
    collector = ParallelRolloutCollector([partial(CountingEnv, env_id=i) for i in range(2)], None, "ray", horizon=2, seed=0, num_workers=2)
    pids = ray.get([actor.pid.remote() for actor in collector._backend._actors])
    collector.collect()
    collector.close()
    collector.close()
    for pid in pids:
        try:
            process = psutil.Process(pid)
            process.wait(10)
        except psutil.NoSuchProcess:
            pass
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert ray.is_initialized()
    # Re-create and collect again: nothing left over gets in the way.
    (batch,) = collect("ray", [partial(CountingEnv, env_id=i) for i in range(2)], ConstantPolicy(2), collects=1, horizon=2, seed=0)
    assert batch.observations.shape == (2, 2, 4)


def test_an_unpicklable_policy_is_rejected_at_construction():
    import threading

    lock = threading.Lock()

    def policy(observations, lock=lock):
        return np.zeros(observations.shape[0], dtype=np.int64)

    with pytest.raises(ConfigurationError, match=r"backend='ray' ships the policy to every actor, but it cannot be serialised"):
        ParallelRolloutCollector([CountingEnv], policy, "ray")


class DropoutValues:
    """A torch module whose values go through dropout: its mode changes what it returns."""

    def __new__(cls):
        import torch

        class Module(torch.nn.Module):
            def __init__(self):
                super().__init__()
                torch.manual_seed(0)
                self.layer = torch.nn.Linear(4, 1)
                self.dropout = torch.nn.Dropout(0.5)

            def forward(self, observations):
                with torch.no_grad():
                    hidden = self.dropout(torch.tensor(observations) + 1.0)
                    values = self.layer(hidden)[:, 0]
                return PolicyOutput(np.ones(observations.shape[0], dtype=np.int64), values=values)

        return Module()


def test_a_module_switched_to_eval_after_construction_runs_in_eval_mode_on_the_actors():
    module = DropoutValues()
    fns = [partial(CountingEnv, env_id=i, episode_length=50, num_actions=2) for i in range(2)]
    with ParallelRolloutCollector(fns, module, "ray", horizon=5, seed=0, num_workers=1) as collector:
        module.eval()
        batch = collector.collect()
    module.eval()
    (expected,) = collect("sync", fns, module, collects=1, horizon=5, seed=0)
    # In training mode, dropout would zero about half the inputs at random.
    assert_batches_identical(expected, batch)


class Threshold:
    """Acts 1 where the step count exceeds ``threshold``: an attribute that changes behaviour.

    It has a ``state_dict`` (as a policy wrapping a network does), which must not
    be all that reaches the actors.
    """

    def __init__(self, threshold):
        self.threshold = threshold

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass

    def __call__(self, observations):
        return (observations[:, 1] > self.threshold).astype(np.int64)


def test_an_attribute_changed_after_construction_reaches_the_actors():
    policy = Threshold(100.0)
    fns = [partial(CountingEnv, env_id=i, episode_length=50, num_actions=2) for i in range(3)]
    with ParallelRolloutCollector(fns, policy, "ray", horizon=4, seed=0, num_workers=2) as collector:
        assert (collector.collect().actions == 0).all()
        policy.threshold = -1.0
        assert (collector.collect().actions == 1).all()


class CountingPolicy:
    """Keeps state of its own: the number of calls so far, taken as the action."""

    def __init__(self):
        self.calls = 0

    def __call__(self, observations):
        self.calls += 1
        return np.full(observations.shape[0], self.calls % 3, dtype=np.int64)


def test_state_a_policy_keeps_in_itself_carries_on_across_collects():
    # The driver's copy never changes, so each actor's copy keeps its own count,
    # as the one policy object of the sync backend does.
    fns = [partial(CountingEnv, env_id=i, episode_length=4, num_actions=3) for i in range(2)]
    expected = collect("sync", fns, CountingPolicy(), horizon=5, seed=2)
    got = collect("ray", fns, CountingPolicy(), horizon=5, seed=2, num_workers=1)
    for first, second in zip(expected, got):
        assert_batches_identical(first, second)


def test_a_policy_that_becomes_unpicklable_is_refused_and_the_collector_stays_usable():
    import threading

    policy = Threshold(100.0)
    with ParallelRolloutCollector([CountingEnv] * 2, policy, "ray", horizon=2, seed=0, num_workers=1) as collector:
        policy.lock = threading.Lock()
        with pytest.raises(ConfigurationError, match=r"ships the policy to every actor, but it cannot be serialised \(TypeError"):
            collector.collect()
        del policy.lock
        assert collector.collect().actions.shape == (2, 2)


def test_tied_weights_stay_tied_and_follow_the_driver():
    import torch

    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.first = torch.nn.Linear(4, 1, bias=False)
            self.second = torch.nn.Linear(4, 1, bias=False)
            self.second.weight = self.first.weight

        def forward(self, observations):
            with torch.no_grad():
                first = self.first(torch.tensor(observations))[:, 0]
                second = self.second(torch.tensor(observations))[:, 0]
            return ((first > 0) & (second > 0)).long()

    module = Tied()
    fns = [partial(CountingEnv, env_id=i + 1, episode_length=50, num_actions=2) for i in range(2)]
    with ParallelRolloutCollector(fns, module, "ray", horizon=2, seed=0, num_workers=2) as collector:
        for sign, action in ((1.0, 1), (-1.0, 0)):
            with torch.no_grad():
                module.first.weight.fill_(sign)  # env ids are positive: the first input decides
            assert (collector.collect().actions == action).all()


def test_a_hung_env_in_an_actor_raises_step_timeout_instead_of_hanging():
    fns = [partial(CountingEnv, env_id=i) for i in range(4)]
    fns[3] = partial(FaultyEnv, env_id=3, phase="step", at=2, how="hang")
    collector = ParallelRolloutCollector(fns, ConstantPolicy(2), "ray", horizon=4, seed=0, num_workers=2, step_timeout=0.5)
    with pytest.raises(
        StepTimeoutError, match=r"Ray actor 1 \(envs 2..3\) did not finish a rollout of horizon=4 within horizon \* step_timeout = 2 s"
    ) as info:
        collector.collect()
    assert info.value.env_indices == (2, 3)
    with pytest.raises(CollectorClosedError):
        collector.collect()
    collector.close()  # bounded: the hung actor was killed (the module's timeout guards this)


@pytest.mark.parametrize("how", ["abort", "hang"])
def test_an_actor_lost_to_a_crash_or_a_hang_is_replaced_its_rows_invalid_and_the_rest_replays(how, tmp_path):
    from tests.test_restarts import CRASH_STEP, HORIZON, assert_valid_rows_replay, crashing_fns

    assert HORIZON < CRASH_STEP <= 2 * HORIZON  # in the second collect
    timeout = {"step_timeout": 1.0} if how == "hang" else {}
    with ParallelRolloutCollector(
        crashing_fns(how, str(tmp_path / "crashed")), None, "ray", horizon=HORIZON, seed=5, num_workers=2,
        max_restarts=1, **timeout,
    ) as collector:
        batches = [collector.collect() for _ in range(3)]
    first, lost, after = batches
    assert first.valid.all() and after.valid.all() and after.lost_env_indices.size == 0
    # An actor returns its rows only at the end: the lost slice loses that whole rollout.
    np.testing.assert_array_equal(lost.lost_env_indices, [2, 3])
    assert not lost.valid[:, 2:].any() and lost.valid[:, :2].all()
    assert_valid_rows_replay(batches)


def test_with_one_actor_a_float_policy_is_bit_identical_to_sync_and_with_several_close():
    """Pins the documented rule for when Ray's batch equals sync's bit for bit.

    The policy sees the same rows in the same call as in sync only when one actor
    holds every env; with several, each actor calls it on its slice, and a
    PyTorch MLP's float outputs may then differ in the last bits.
    """
    import torch

    torch.manual_seed(3)
    network = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))

    def policy(observations, network=network):
        with torch.no_grad():
            values = network(torch.tensor(observations))[:, 0]
        # Actions do not depend on the float output, so every other field must match exactly.
        return PolicyOutput((observations[:, 2] > 0).astype(np.int64), values=values)

    expected = collect("sync", [cartpole] * 5, policy, horizon=20, seed=4)
    for first, second in zip(expected, collect("ray", [cartpole] * 5, policy, horizon=20, seed=4, num_workers=1)):
        assert_batches_identical(first, second)
    for first, second in zip(expected, collect("ray", [cartpole] * 5, policy, horizon=20, seed=4, num_workers=2)):
        np.testing.assert_allclose(second.values, first.values, rtol=1e-5, atol=1e-6)
        second.values[...] = first.values
        assert_batches_identical(first, second)


def test_bad_ray_options_are_named():
    with pytest.raises(ConfigurationError, match=r"unknown `ray_options` key\(s\) \['gpus'\]"):
        ParallelRolloutCollector([CountingEnv], None, "ray", ray_options={"gpus": 1})
    with pytest.raises(ConfigurationError, match=r"`ray_options\['max_restarts'\]` must be an int >= 0; got -1"):
        ParallelRolloutCollector([CountingEnv], None, "ray", ray_options={"max_restarts": -1})


def test_without_ray_installed_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ConfigurationError, match=r"backend='ray' needs Ray, which is not installed.*parallel-rollouts\[ray\]"):
        ParallelRolloutCollector([CountingEnv], None, "ray")


def test_actors_the_cluster_cannot_place_are_an_error_not_a_hang(monkeypatch):
    from parallel_rollouts.runners import ray as distributed

    monkeypatch.setattr(distributed, "START_TIMEOUT", 3.0)
    with pytest.raises(ConfigurationError, match=r"2 of 2 Ray actors did not start within 3 s. Each asks for num_cpus=8"):
        ParallelRolloutCollector([CountingEnv] * 2, None, "ray", num_workers=2, ray_options={"num_cpus": 8})


def test_close_is_bounded_even_if_an_env_hangs_in_its_own_close():
    collector = ParallelRolloutCollector([CountingEnv, HangingCloseEnv], ConstantPolicy(2), "ray", horizon=2, seed=0, num_workers=2)
    collector.collect()
    hanging_actor = ray.get(collector._backend._actors[1].pid.remote())
    assert_returns(collector.close)
    try:
        psutil.Process(hanging_actor).wait(30)
    except psutil.NoSuchProcess:
        pass
    assert not psutil.pid_exists(hanging_actor) or psutil.Process(hanging_actor).status() == psutil.STATUS_ZOMBIE


@pytest.mark.parametrize("case", ["StickyAction-Pendulum", "FrameStack-CartPole"])
def test_every_column_replays_with_plain_gymnasium(case):
    """The oracle of tests/test_reference_replay.py, on Ray."""
    assert_replays(collect_for_replay(case, "ray"), partial(make_case, case))


def test_warnings_raised_in_an_actor_reach_the_driver_under_its_filters():
    from tests.test_data_integrity import OvershootEnv

    with ParallelRolloutCollector([OvershootEnv] * 2, ConstantPolicy(2), "ray", horizon=10, seed=0, num_workers=2) as collector:
        with pytest.warns(ObservationWarning, match=r"env 1 returned an observation at step t=2"):
            collector.collect()


def test_each_actor_draws_its_own_stream_and_the_same_seed_replays_it():
    from tests.policies import RandomBinaryPolicy

    fns = [partial(CountingEnv, env_id=i, episode_length=50, num_actions=2) for i in range(4)]
    first = collect("ray", fns, RandomBinaryPolicy(), collects=2, horizon=300, seed=6, num_workers=2)
    again = collect("ray", fns, RandomBinaryPolicy(), collects=2, horizon=300, seed=6, num_workers=2)
    # Envs 0, 1 run in actor 0 and envs 2, 3 in actor 1; one shared stream would agree on every step.
    assert 0.4 < np.mean(first[0].actions[:, 0] == first[0].actions[:, 2]) < 0.6
    for one, two in zip(first, again):
        np.testing.assert_array_equal(one.actions, two.actions)


def test_every_actor_lost_in_one_collect_is_replaced_and_the_rest_replays(tmp_path):
    from tests.test_restarts import CRASH_STEP, HORIZON, NUM_ENVS, assert_valid_rows_replay
    from tests.envs import CrashingCartPole

    fns = [partial(CrashingCartPole, CRASH_STEP, "exit", str(tmp_path / f"crashed-{env}")) for env in range(NUM_ENVS)]
    with ParallelRolloutCollector(fns, None, "ray", horizon=HORIZON, seed=5, num_workers=2, max_restarts=2) as collector:
        batches = [collector.collect() for _ in range(3)]
    first, lost, after = batches
    assert first.valid.all() and after.valid.all() and after.lost_env_indices.size == 0
    np.testing.assert_array_equal(lost.lost_env_indices, [0, 1, 2, 3])
    assert not lost.valid.any() and not lost.observations.any() and lost.episode_env_indices.size == 0
    assert_valid_rows_replay(batches)


def test_an_actor_killed_between_collects_loses_its_slice_of_the_next_and_the_one_after_is_whole():
    import os
    import signal

    from tests.test_restarts import HORIZON, NUM_ENVS, assert_valid_rows_replay

    with ParallelRolloutCollector(
        [cartpole] * NUM_ENVS, None, "ray", horizon=HORIZON, seed=5, num_workers=2, max_restarts=1
    ) as collector:
        batches = [collector.collect()]
        os.kill(ray.get(collector._backend._actors[1].pid.remote()), signal.SIGKILL)
        batches += [collector.collect(), collector.collect()]
    first, lost, after = batches
    # An actor runs its rollout unseen, so its death is seen only when the rollout is asked of it.
    np.testing.assert_array_equal(lost.lost_env_indices, [2, 3])
    assert not lost.valid[:, 2:].any() and lost.valid[:, :2].all() and not lost.observations[:, 2:].any()
    assert first.valid.all() and after.valid.all() and after.lost_env_indices.size == 0
    assert_valid_rows_replay(batches)


def _fns_whose_first_replacement_dies(tmp_path):
    """Env 3 crashes in the second collect and arms env 2's factory, which then ends the first
    replacement of their actor (1) while it makes its envs; a second replacement starts.
    Returns the factories and the file the dying replacement leaves behind."""
    from tests.envs import CrashingCartPole, DiesWhenRemade
    from tests.test_restarts import CRASH_STEP, NUM_ENVS

    armed, spent = tmp_path / "armed", tmp_path / "spent"
    fns = [cartpole] * NUM_ENVS
    fns[2] = DiesWhenRemade(str(armed), str(spent))
    fns[3] = partial(CrashingCartPole, CRASH_STEP, "exit", str(armed))
    return fns, spent


def test_a_replacement_actor_that_dies_while_starting_is_replaced_again(tmp_path):
    from tests.test_restarts import HORIZON, assert_valid_rows_replay

    fns, spent = _fns_whose_first_replacement_dies(tmp_path)
    with ParallelRolloutCollector(fns, None, "ray", horizon=HORIZON, seed=5, num_workers=2, max_restarts=2) as collector:
        batches = [collector.collect() for _ in range(3)]
    assert spent.exists(), "the first replacement did not die as the test meant it to"
    first, lost, after = batches
    np.testing.assert_array_equal(lost.lost_env_indices, [2, 3])
    assert first.valid.all() and after.valid.all() and after.lost_env_indices.size == 0
    assert_valid_rows_replay(batches)


def test_a_replacement_actor_dying_with_no_restarts_left_names_the_actor_each_time(tmp_path):
    from tests.test_restarts import HORIZON

    fns, _ = _fns_whose_first_replacement_dies(tmp_path)
    collector = ParallelRolloutCollector(fns, None, "ray", horizon=HORIZON, seed=5, num_workers=2, max_restarts=1)
    try:
        collector.collect()
        with pytest.raises(WorkerDiedError, match=r"(?s)more than max_restarts=1.*1\. Ray actor 1 \(envs 2\.\.3\).*2\. Ray actor 1 \(envs 2\.\.3\)"):
            collector.collect()
    finally:
        collector.close()


def test_asked_to_go_on_a_replacement_that_dies_at_start_up_leaves_its_envs_lost(tmp_path):
    from tests.test_restarts import HORIZON

    fns, spent = _fns_whose_first_replacement_dies(tmp_path)
    options = {"max_restarts": 1, "continue_without_lost_actors": True}
    with ParallelRolloutCollector(fns, None, "ray", horizon=HORIZON, seed=5, num_workers=2, ray_options=options) as collector:
        first, second, third = (collector.collect() for _ in range(3))
    assert first.valid.all()
    for batch in (second, third):
        np.testing.assert_array_equal(batch.lost_env_indices, [2, 3])
        assert not batch.valid[:, 2:].any() and batch.valid[:, :2].all()
    assert spent.exists(), "the first replacement did not die as the test meant it to"


@pytest.mark.parametrize("num_workers", [1, 2])
def test_a_recurrent_policy_gives_the_sync_batch_on_ray_across_collects(num_workers):
    """The state lives in each actor between collects; the batch carries each slice's
    initial state, episode starts, final and bootstrap states as sync's does."""
    import torch

    from tests.recurrent_policies import GRUPolicy, counting_policy

    torch.set_num_threads(1)
    fns = [partial(CountingEnv, env_id=i, episode_length=3 + i) for i in range(4)]
    for make_policy in (GRUPolicy, counting_policy):
        expected = collect("sync", fns, make_policy(), horizon=9, seed=3, store_states=True)
        got = collect("ray", fns, make_policy(), horizon=9, seed=3, store_states=True, num_workers=num_workers)
        for first, second in zip(expected, got):
            assert_batches_identical(first, second)
        assert got[1].episode_starts[0].tolist() == expected[0].dones[-1].tolist()


def test_ray_with_max_policy_lag_1_gives_the_turn_taking_loop_s_batches():
    """The actors start the next rollout when a batch is handed out, with the snapshot shipped
    then; the batches equal those of collecting and learning in turns with the same snapshots."""
    from tests.overlap_policies import SamplingLinear, overlapped, turn_taking_with_delayed_updates, without_versions

    runs = {}
    for lag, loop in ((0, turn_taking_with_delayed_updates), (1, overlapped)):
        policy = SamplingLinear()
        with ParallelRolloutCollector([cartpole] * 4, policy, "ray", horizon=16, seed=2, num_workers=2, max_policy_lag=lag) as collector:
            runs[lag] = loop(collector, policy, 4)
    assert [int(batch.policy_versions[0, 0]) for batch in runs[1]] == [0, 0, 1, 2]
    for first, second in zip(runs[0], runs[1]):
        assert_batches_identical(without_versions(first), without_versions(second))

