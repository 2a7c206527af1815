"""Bad input gets a clear error naming the culprit, and nothing is half-written."""

from functools import partial

import numpy as np
import pytest
from gymnasium import spaces

import parallel_rollouts.core.selector as core_module
from parallel_rollouts import (
    ActionError,
    CollectorClosedError,
    ConfigurationError,
    CoreUnavailableError,
    ObservationError,
    ParallelRolloutCollector,
    PolicyOutput,
    SpaceError,
    WorkerError,
)
from tests.envs import ConstantPolicy, CountingEnv, FaultyEnv, SpaceEnv, cartpole

BACKENDS = ["serial", "sync"]


def counting_fns(n, **kwargs):
    return [partial(CountingEnv, env_id=i, **kwargs) for i in range(n)]


# -- construction ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"horizon": 0}, r"`horizon` must be an int >= 1; got 0"),
        ({"horizon": 2.5}, r"`horizon` must be an int >= 1; got 2.5"),
        ({"backend": "threads"}, r"`backend` must be one of \('serial', 'sync', 'async', 'ray'\); got 'threads'"),
        ({"core": "fast"}, r"`core` must be one of \('auto', 'compiled', 'python'\); got 'fast'"),
        ({"info_keys": "quality"}, r"`info_keys` must be a sequence of strings"),
        ({"info_keys": ("a", "b", "a")}, r"`info_keys` names 'a' twice"),
        ({"policy": 3}, r"`policy` must be callable or None; got 3"),
        ({"num_workers": 2}, r"`num_workers` applies to backend 'async' or 'ray' only; got backend='sync'"),
        ({"step_timeout": 1.0}, r"`step_timeout` applies to backend 'async' or 'ray' only"),
        ({"ray_options": {}}, r"`ray_options` applies to backend 'ray' only"),
    ],
)
def test_bad_constructor_arguments_are_named(kwargs, match):
    with pytest.raises(ConfigurationError, match=match):
        ParallelRolloutCollector(counting_fns(2), **{"backend": "sync", **kwargs})


def test_bad_seeds_are_rejected():
    with pytest.raises(ConfigurationError, match=r"`seed` must be a non-negative int or None; got -1"):
        ParallelRolloutCollector(counting_fns(1), seed=-1)
    with pytest.raises(ConfigurationError, match=r"`seed` must be a non-negative int or None; got 'abc'"):
        ParallelRolloutCollector(counting_fns(1), seed="abc")


def test_env_fns_must_be_a_non_empty_sequence_of_factories():
    with pytest.raises(ConfigurationError, match=r"`env_fns` is empty"):
        ParallelRolloutCollector([])
    with pytest.raises(ConfigurationError, match=r"env_fns\[1\] is the string 'CartPole-v1', not an env factory\. .*make_collector\('CartPole-v1'"):
        ParallelRolloutCollector([cartpole, "CartPole-v1"])
    with pytest.raises(ConfigurationError, match=r"env_fns\[0\] is an env instance \(CountingEnv\), not a factory"):
        ParallelRolloutCollector([CountingEnv()])
    with pytest.raises(ConfigurationError, match=r"`env_fns` must be a sequence"):
        ParallelRolloutCollector(cartpole)


def test_factory_returning_something_else_is_named():
    with pytest.raises(SpaceError, match=r"env_fns\[1\] returned int, not a gymnasium.Env"):
        ParallelRolloutCollector([cartpole, lambda: 42], backend="sync")


@pytest.mark.parametrize("backend", BACKENDS)
def test_envs_with_different_spaces_are_rejected_naming_the_env(backend):
    fns = [
        partial(SpaceEnv, spaces.Box(0, 1, (3,)), spaces.Discrete(2)),
        partial(SpaceEnv, spaces.Box(0, 1, (3,)), spaces.Discrete(2)),
        partial(SpaceEnv, spaces.Box(0, 1, (4,)), spaces.Discrete(2)),
    ]
    with pytest.raises(SpaceError, match=r"env 2 declares the observation space Box\(0.0, 1.0, \(4,\), float32\)"):
        ParallelRolloutCollector(fns, backend=backend)


@pytest.mark.parametrize(
    "space, match",
    [
        (spaces.Text(5), r"Text spaces are not supported"),
        (spaces.Dict({"a": spaces.Discrete(2), "b": spaces.Sequence(spaces.Discrete(2))}), r"Sequence spaces are not supported at \['b'\]"),
    ],
)
def test_unsupported_spaces_are_rejected_at_construction(space, match):
    with pytest.raises(SpaceError, match=match):
        ParallelRolloutCollector([partial(SpaceEnv, space, spaces.Discrete(2))])


def test_compiled_core_missing_is_an_error_not_a_fallback(monkeypatch):
    monkeypatch.setattr(core_module, "_compiled_core", None)
    monkeypatch.setattr(core_module, "_COMPILED_IMPORT_ERROR", ImportError("no module named _core"))
    with pytest.raises(CoreUnavailableError, match=r"core='compiled' was requested but cannot be used\. no module named _core"):
        ParallelRolloutCollector(counting_fns(1), core="compiled")


# -- the policy's output --------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "actions, match",
    [
        (np.zeros(3, np.int64), r"actions have shape \(3,\); expected \(2,\)"),
        (np.zeros((2, 1), np.int64), r"actions have shape \(2, 1\); expected \(2,\)"),
        (np.zeros(2, np.float32), r"actions have dtype float32; the action space Discrete\(4\) needs integers"),
        (np.array([0, 4]), r"action for env 1 is outside the action space Discrete\(4\): got 4"),
        (np.array([-1, 0]), r"action for env 0 is outside the action space Discrete\(4\): got -1"),
        (np.array(["a", "b"]), r"actions have dtype <U1"),
    ],
)
def test_bad_actions_are_rejected_before_any_env_steps(backend, actions, match, core):
    returned = {"actions": actions}
    collector = ParallelRolloutCollector(
        counting_fns(2, episode_length=50), lambda obs: returned["actions"], backend, horizon=3, seed=0, core=core
    )
    with collector:
        envs = collector._backend.stepper._envs
        with pytest.raises(ActionError, match=match):
            collector.collect()
        assert all(env._step == 0 for env in envs), "no env may be stepped with a rejected action"
        # A rejected action does not break the collector: the next collect starts where the envs are.
        returned["actions"] = np.ones(2, dtype=np.int64)
        batch = collector.collect()
        np.testing.assert_array_equal(batch.observations[:, :, 1], [[0, 0], [1, 1], [2, 2]])


def test_box_actions_outside_bounds_or_nan_are_rejected():
    fns = [partial(SpaceEnv, spaces.Box(0, 1, (2,)), spaces.Box(-1, 1, (2,), np.float32))] * 2
    for bad, match in (
        (np.array([[0, 0], [0, 1.5]]), r"action for env 1 is outside .* Clip continuous actions"),
        (np.array([[np.nan, 0], [0, 0]]), r"action for env 0 is outside"),
    ):
        with ParallelRolloutCollector(fns, lambda obs, bad=bad: bad, "sync", horizon=2, seed=0) as collector:
            with pytest.raises(ActionError, match=match):
                collector.collect()


def test_nested_actions_missing_a_key_are_named():
    fns = [partial(SpaceEnv, spaces.Box(0, 1, (2,)), spaces.Dict({"a": spaces.Discrete(2), "b": spaces.Discrete(3)}))]
    with ParallelRolloutCollector(fns, lambda obs: {"a": np.zeros(1, np.int64)}, "sync", horizon=2, seed=0) as collector:
        with pytest.raises(ActionError, match=r"no entry \['b'\]"):
            collector.collect()


def test_values_and_log_probs_must_have_one_entry_per_env():
    with ParallelRolloutCollector(counting_fns(2), lambda o: PolicyOutput(np.zeros(2, np.int64), values=np.zeros(3)), "sync", horizon=2, seed=0) as collector:
        with pytest.raises(ActionError, match=r"`values` have shape \(3,\); expected \(2,\)"):
            collector.collect()
    calls = []

    def sometimes(observations):
        calls.append(1)
        return PolicyOutput(np.zeros(2, np.int64), values=np.zeros(2) if len(calls) == 1 else None)

    with ParallelRolloutCollector(counting_fns(2), sometimes, "sync", horizon=3, seed=0) as collector:
        with pytest.raises(ActionError, match=r"returned `values` on some steps but not others"):
            collector.collect()


def test_a_policy_exception_reaches_the_caller_unwrapped_and_the_collector_stays_usable():
    state = {"fail": True}

    def policy(observations):
        if state["fail"] and observations[0, 1] == 2:
            raise KeyError("policy bug")
        return np.ones(observations.shape[0], np.int64)

    with ParallelRolloutCollector(counting_fns(2, episode_length=10), policy, "sync", horizon=4, seed=0) as collector:
        with pytest.raises(KeyError, match="policy bug"):
            collector.collect()
        state["fail"] = False
        batch = collector.collect()
    # The envs took two steps before the failure; the next rollout continues from step 2.
    np.testing.assert_array_equal(batch.observations[:, 0, 1], [2, 3, 4, 5])


# -- the envs' output -----------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_observation_of_the_wrong_shape_names_the_env_and_breaks_the_collector(backend, core):
    fns = counting_fns(3)
    fns[1] = partial(FaultyEnv, env_id=1, phase="step", at=2, how="bad_shape")
    collector = ParallelRolloutCollector(fns, ConstantPolicy(3), backend, horizon=4, seed=0, core=core)
    with pytest.raises(ObservationError, match=r"env 1 returned an observation at step t=1 \(observations row t=2\) that its observation space .* cannot store: got shape \(7,\) \(dtype float32\); expected shape \(4,\)"):
        collector.collect()
    with pytest.raises(CollectorClosedError, match=r"broken by an earlier failure \(ObservationError"):
        collector.collect()
    collector.close()
    collector.close()
    assert collector.closed


@pytest.mark.parametrize("backend", BACKENDS)
def test_observation_outside_its_space_names_the_env(backend, core):
    fns = counting_fns(2)
    fns[1] = partial(FaultyEnv, env_id=1, phase="step", at=2, how="out_of_space")
    with ParallelRolloutCollector(
        fns, ConstantPolicy(2), backend, horizon=4, seed=0, core=core, observation_check="raise"
    ) as collector:
        with pytest.raises(ObservationError, match=r"env 1 returned an? (terminal )?observation at step t=1 .*outside its observation space"):
            collector.collect()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("phase, at, label", [("step", 2, "step"), ("reset", 1, "make|reset"), ("reset", 2, "autoreset|reset")])
def test_env_exceptions_become_worker_errors_naming_the_env(backend, phase, at, label):
    fns = counting_fns(3, episode_length=2)
    fns[2] = partial(FaultyEnv, env_id=2, phase=phase, at=at, episode_length=2)

    def run():
        with ParallelRolloutCollector(fns, ConstantPolicy(3), backend, horizon=4, seed=0) as collector:
            collector.collect()

    with pytest.raises(WorkerError, match=rf"env 2 raised ValueError in `({label})`: env 2 fails in {phase} on call {at}") as info:
        run()
    assert info.value.env_indices == (2,)
    assert "_maybe_fail" in info.value.remote_traceback
    assert isinstance(info.value, RuntimeError)


@pytest.mark.parametrize("backend", BACKENDS)
def test_several_envs_failing_in_one_step_are_all_reported(backend):
    fns = [partial(FaultyEnv, env_id=i, phase="step", at=1) for i in range(3)]
    with ParallelRolloutCollector(fns, ConstantPolicy(3), backend, horizon=2, seed=0) as collector:
        with pytest.raises(WorkerError, match=r"3 envs failed:") as info:
            collector.collect()
    assert info.value.env_indices == (0, 1, 2)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bad", [{"reward": None}, {"terminated": np.array([True, False])}], ids=["reward-none", "flag-array"])
def test_a_reward_or_flag_that_is_not_a_scalar_names_the_env(backend, bad):
    class BadStep(CountingEnv):
        def step(self, action):
            observation, reward, terminated, truncated, info = super().step(action)
            values = {"reward": reward, "terminated": terminated, **bad}
            return observation, values["reward"], values["terminated"], truncated, info

    fns = counting_fns(3)
    fns[2] = partial(BadStep, env_id=2)
    with ParallelRolloutCollector(fns, ConstantPolicy(3), backend, horizon=2, seed=0) as collector:
        with pytest.raises(WorkerError, match=r"env 2 raised (TypeError|ValueError) in `step`") as info:
            collector.collect()
    assert info.value.env_indices == (2,)


def test_missing_info_key_names_the_env_and_key():
    with ParallelRolloutCollector(counting_fns(2), ConstantPolicy(2), "sync", horizon=2, seed=0, info_keys=("nope",)) as collector:
        with pytest.raises(WorkerError, match=r"env 0 raised KeyError in `info`: .*info has no key 'nope'"):
            collector.collect()


def test_closed_collector_refuses_to_collect():
    collector = ParallelRolloutCollector(counting_fns(1), backend="sync", horizon=2, seed=0)
    collector.close()
    with pytest.raises(CollectorClosedError, match=r"this collector is closed"):
        collector.collect()
