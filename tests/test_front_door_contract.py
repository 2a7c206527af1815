"""One contract for the front doors: worker options parsed once, one refusal of a non-env,
one set of loss errors (``checks/failures.py``)."""

from __future__ import annotations

import multiprocessing
from functools import partial

import pytest

from parallel_rollouts import ConfigurationError, ParallelRolloutCollector, ParallelVectorEnv, SpaceError, WorkerError
from parallel_rollouts.checks.factories import not_an_env
from parallel_rollouts.checks.failures import losses_beyond_restarts, timed_out, worker_died
from parallel_rollouts.config.worker_options import WorkerOptions
from parallel_rollouts.conformance.target import as_env
from parallel_rollouts.errors import StepTimeoutError, WorkerDiedError
from tests.envs import CountingEnv

parse = partial(WorkerOptions.parse, num_factories=4, backend="async")


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"num_workers": 0}, r"`num_workers` must be an int between 1 and the number of envs \(4\); got 0\."),
        ({"num_workers": 5}, r"`num_workers` must be an int between 1 and the number of envs \(4\); got 5\."),
        ({"num_workers": True}, r"`num_workers` must be an int .*; got True\."),
        ({"num_workers": 2.0}, r"`num_workers` must be an int .*; got 2\.0\."),
        ({"context": "teleport"}, r"`context` must be a multiprocessing start method \[.*\] or a context; got 'teleport'"),
        ({"context": 3}, r"`context` must be a start method name or a multiprocessing context; got 3\."),
        ({"step_timeout": 0}, r"`step_timeout` must be a positive number of seconds or None; got 0\."),
        ({"step_timeout": "1"}, r"`step_timeout` must be a positive number of seconds or None; got '1'\."),
        ({"step_timeout": True}, r"`step_timeout` must be a positive number of seconds or None; got True\."),
        ({"max_restarts": -1}, r"`max_restarts` must be an int >= 0 or None; got -1\."),
        ({"max_restarts": 1.5}, r"`max_restarts` must be an int >= 0 or None; got 1\.5\."),
    ],
    ids=lambda value: value if isinstance(value, str) and len(value) < 3 else None,
)
def test_each_bad_worker_option_is_named_with_what_it_must_be_and_what_it_got(given, message):
    with pytest.raises(ConfigurationError, match=message):
        parse(**given)


def test_worker_options_keep_what_was_given_and_default_max_restarts_to_zero():
    options = parse(num_workers=2, context="spawn", step_timeout=1.5, max_restarts=3)
    assert options == WorkerOptions(num_workers=2, context="spawn", step_timeout=1.5, max_restarts=3)
    assert parse() == WorkerOptions(None, None, None, 0)
    assert options.multiprocessing_context().get_start_method() == "spawn"
    fork_server = multiprocessing.get_context("forkserver")
    assert parse(context=fork_server).multiprocessing_context() is fork_server
    with pytest.raises(AttributeError):
        options.num_workers = 3  # frozen: handed whole to every runner, never completed later


def test_an_option_for_another_backend_is_refused_naming_the_backends_it_applies_to():
    with pytest.raises(ConfigurationError, match=r"`context` applies to backend 'async' only; got backend='ray'\."):
        WorkerOptions.parse(num_factories=2, backend="ray", context="spawn")
    # A front door with fewer backends names only its own.
    with pytest.raises(ConfigurationError, match=r"`step_timeout` applies to backend 'async' only; got backend='sync'\."):
        WorkerOptions.parse(num_factories=2, backend="sync", backends=("sync", "async"), step_timeout=1.0)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda fns, **kw: ParallelRolloutCollector(fns, None, "async", **kw), id="collector"),
        pytest.param(lambda fns, **kw: ParallelVectorEnv(fns, backend="async", **kw), id="vector-env"),
    ],
)
@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"num_workers": 3}, r"`num_workers` must be an int between 1 and the number of envs \(2\); got 3\."),
        ({"step_timeout": -1}, r"`step_timeout` must be a positive number of seconds or None; got -1\."),
        ({"context": "teleport"}, r"`context` must be a multiprocessing start method"),
    ],
)
def test_every_front_door_refuses_a_bad_option_with_the_same_message_before_starting_a_worker(make, given, message):
    with pytest.raises(ConfigurationError, match=message):
        make([CountingEnv, CountingEnv], **given)


def _returns_a_number():
    return 5


def _front_door_refusals() -> list[str]:
    """The refusal of a factory returning ``5`` from each front door, on ``sync``."""
    messages = []
    for make in (
        lambda fns: ParallelRolloutCollector(fns, None, "sync"),
        lambda fns: ParallelVectorEnv(fns, backend="sync"),
    ):
        with pytest.raises(SpaceError) as info:
            make([CountingEnv, _returns_a_number])
        messages.append(str(info.value))
    return messages


def test_a_factory_returning_a_non_env_is_refused_by_one_function_from_every_front_door():
    expected = str(not_an_env("env_fns[1]", 5, vector_envs=True))
    assert expected.startswith("env_fns[1] returned int, not a gymnasium.Env, a gymnasium.vector.VectorEnv or a PettingZoo ParallelEnv;")
    assert _front_door_refusals() == [expected, expected]
    with pytest.raises(ConfigurationError) as info:
        as_env(5)
    assert str(info.value) == str(not_an_env("the env factory", 5, vector_envs=True))


def test_sb3_front_door_refuses_a_non_env_with_the_single_env_message():
    sb3 = pytest.importorskip("parallel_rollouts.sb3")
    # Refused inside the factory it wraps around the user's, so it reaches the caller as that factory's failure.
    with pytest.raises(WorkerError) as info:
        sb3.ParallelVecEnv([CountingEnv, _returns_a_number], backend="sync", seed=0)
    (failure,) = info.value.failures
    assert (failure.env_index, failure.phase, failure.exception_type) == (1, "make", "SpaceError")
    assert failure.message == str(not_an_env("env_fns[1]", 5, vector_envs=False))
    assert "single envs only here" in failure.message


def test_loss_errors_name_the_worker_its_envs_and_what_became_of_it():
    died = worker_died("Ray actor 1 (envs 2..3)", range(2, 4), "died", "while running its rollout.")
    assert isinstance(died, WorkerDiedError) and died.env_indices == (2, 3)
    assert str(died).startswith("Ray actor 1 (envs 2..3) died while running its rollout.")
    late = timed_out("Worker 0 (envs 0..1)", "within step_timeout=1 s per step", range(2), outcome="The collector is now unusable.")
    assert isinstance(late, StepTimeoutError) and late.env_indices == (0, 1)
    assert str(late) == "Worker 0 (envs 0..1) did not finish within step_timeout=1 s per step; its envs may hang. The collector is now unusable."


def test_losses_beyond_restarts_raise_the_loss_without_restarts_and_every_loss_once_they_are_spent():
    first = worker_died("Worker 0 (envs 0..0)", [0], "exited with code 3", "during step.")
    second = worker_died("Worker 1 (envs 1..1)", [1], "exited with code 3", "during step.")
    assert losses_beyond_restarts([first], [first], max_restarts=0, restarts_left=0) is first
    assert losses_beyond_restarts([first], [first], max_restarts=2, restarts_left=2) is None
    exhausted = losses_beyond_restarts([second], [first, second], max_restarts=1, restarts_left=0)
    assert isinstance(exhausted, WorkerDiedError) and exhausted.env_indices == (0, 1)
    assert str(exhausted).startswith("workers were lost 2 times, more than max_restarts=1 allows; each loss, in order:")
    assert "1. Worker 0 (envs 0..0) exited with code 3" in str(exhausted)
    assert "2. Worker 1 (envs 1..1) exited with code 3" in str(exhausted)


def test_backend_is_second_by_position_or_by_keyword_on_both_vector_env_front_doors():
    import inspect

    from parallel_rollouts.sb3 import ParallelVecEnv

    for front_door in (ParallelVectorEnv, ParallelVecEnv):
        parameters = list(inspect.signature(front_door).parameters.values())
        assert [parameter.name for parameter in parameters[:2]] == ["env_fns", "backend"], front_door
        assert parameters[1].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD, front_door
    envs = ParallelVectorEnv([CountingEnv], "sync")
    try:
        assert envs.backend == "sync"
    finally:
        envs.close()
