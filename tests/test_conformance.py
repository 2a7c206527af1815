"""check_env: every check fails on an env built to break it, and passes on correct and real envs."""

from __future__ import annotations

import random
import re
import warnings
from functools import partial

import numpy as np
import pytest

from parallel_rollouts import ConfigurationError, check_env
from parallel_rollouts.conformance import CheckStatus
from parallel_rollouts.conformance.aliasing import NO_ALIASING
from parallel_rollouts.conformance.autoreset import AUTORESET
from parallel_rollouts.conformance.closing import CLOSES
from parallel_rollouts.conformance.determinism import SAME_SEED, SAME_SEED_SPAWNED
from parallel_rollouts.conformance.global_random import NO_GLOBAL_RANDOM
from parallel_rollouts.conformance.pickling import PICKLES, REBUILDS
from parallel_rollouts.conformance.spaces_check import ACTION_SAMPLING, SPACES_HONOURED, STORABLE
from tests import conformance_envs as envs
from tests import vector_envs
from tests.leaks import ResourceSnapshot

SINGLE_ENV_CHECKS = {
    STORABLE, PICKLES, REBUILDS, ACTION_SAMPLING, SPACES_HONOURED, SAME_SEED, SAME_SEED_SPAWNED, NO_ALIASING,
    NO_GLOBAL_RANDOM, CLOSES,
}

# Each broken env, the check it breaks, and words the reason must contain.
BROKEN = [
    pytest.param(envs.SeedIgnoringEnv, SAME_SEED, "two envs from the factory", id="seed-ignored"),
    pytest.param(envs.SeedOnceEnv, SAME_SEED, "already run does not restart", id="seeded-once"),
    pytest.param(envs.ProcessDependentEnv, SAME_SEED_SPAWNED, "fresh spawned process", id="process-dependent"),
    pytest.param(envs.AliasingEnv, NO_ALIASING, "same array", id="aliasing"),
    pytest.param(envs.GlobalNumpyRandomEnv, NO_GLOBAL_RANDOM, "NumPy's legacy np.random:", id="global-numpy"),
    pytest.param(envs.GlobalPythonRandomEnv, NO_GLOBAL_RANDOM, "Python's random:", id="global-python"),
    pytest.param(envs.UnseededActionsEnv, ACTION_SAMPLING, "sampled differently", id="unseeded-actions"),
    pytest.param(envs.MissionEnv, STORABLE, "FilterObservation", id="text-entry"),
    pytest.param(partial(envs.OutOfSpaceEnv, "shape"), SPACES_HONOURED, r"shape \(4,\), the space declares \(3,\)", id="shape"),
    pytest.param(partial(envs.OutOfSpaceEnv, "nan"), SPACES_HONOURED, "holds NaN", id="nan"),
    pytest.param(partial(envs.OutOfSpaceEnv, "reward"), SPACES_HONOURED, "reward 'high' is not a real number", id="reward"),
    pytest.param(envs.DiscreteOutOfRangeEnv, SPACES_HONOURED, "step at call 3: observation holds 7 outside the declared bounds$", id="discrete-range"),
    pytest.param(envs.unpicklable_factory(), PICKLES, "cannot pickle '_thread.lock'", id="unpicklable"),
    pytest.param(
        partial(vector_envs.scripted_vector, "same_step", "next_step"), AUTORESET,
        "declares autoreset_mode NEXT_STEP, but it behaves as SAME_STEP", id="vector-same-step-as-next",
    ),
    pytest.param(
        partial(vector_envs.scripted_vector, "disabled", None), AUTORESET,
        "declares no metadata\\['autoreset_mode'\\].*behaves as DISABLED", id="vector-disabled-undeclared",
    ),
]


def _statuses(report) -> dict[str, CheckStatus]:
    return {result.name: result.status for result in report.results}


@pytest.mark.parametrize(("factory", "check", "reason"), BROKEN)
def test_each_check_fails_on_the_env_built_to_break_it(factory, check, reason):
    report = check_env(factory, max_steps=60)
    result = report.result(check)
    assert result.status is CheckStatus.FAIL, report
    assert result.fix, "a failed check says how to fix it"
    assert not report.ok
    assert re.search(reason, result.reason), result.reason


def test_a_correct_env_passes_every_check():
    report = check_env(envs.WalkEnv, max_steps=60)
    assert report.ok, report
    assert set(_statuses(report)) == SINGLE_ENV_CHECKS
    assert set(_statuses(report).values()) == {CheckStatus.PASS}, report
    timing = report.timing
    assert timing.steps > 0 and timing.resets > 0
    assert timing.step_mean_s > 0 and timing.step_p99_s > 0 and timing.reset_mean_s > 0
    assert "timing" in str(report) and "OK: 10 checks, 0 failed" in str(report)


def test_an_id_registered_here_only_fails_to_rebuild_in_a_spawned_process():
    report = check_env(envs.register_local_only(), max_steps=30)
    result = report.result(REBUILDS)
    assert result.status is CheckStatus.FAIL
    assert "ConformanceLocalOnly" in result.reason and "import inside it what registers" in result.fix
    assert report.result(SAME_SEED).status is CheckStatus.PASS  # it is deterministic here


def test_float_bounds_and_dtype_only_warn_as_the_collector_does():
    bounds = check_env(partial(envs.OutOfSpaceEnv, "float_bounds"), max_steps=30)
    assert bounds.result(SPACES_HONOURED).status is CheckStatus.WARN
    assert "50.0 outside the declared bounds" in bounds.result(SPACES_HONOURED).reason
    dtype = check_env(partial(envs.OutOfSpaceEnv, "dtype"), max_steps=30)
    assert dtype.result(SPACES_HONOURED).status is CheckStatus.WARN
    assert "dtype float64, the space declares float32" in dtype.result(SPACES_HONOURED).reason
    assert bounds.ok and dtype.ok


def test_no_episode_end_within_the_budget_is_a_warning_not_a_pass():
    report = check_env(envs.WalkEnv, max_steps=10)  # episodes last 20 steps
    assert report.result(SAME_SEED).status is CheckStatus.WARN
    assert "no episode ended" in report.result(SAME_SEED).reason


def test_the_global_random_state_of_the_caller_is_left_as_it_was():
    np.random.seed(7)
    random.seed(7)
    expected = (np.random.get_state()[1].copy(), random.getstate())
    check_env(envs.GlobalNumpyRandomEnv, max_steps=20)
    assert np.array_equal(np.random.get_state()[1], expected[0]) and random.getstate() == expected[1]


def test_an_env_that_raises_fails_the_check_it_raised_in():
    report = check_env(partial(vector_envs.cartpole_declaring, "disabled", "next_step"), max_steps=100)
    assert report.result(AUTORESET).status is CheckStatus.FAIL
    assert "raised AssertionError" in report.result(AUTORESET).reason


def test_nothing_is_left_behind():
    snapshot = ResourceSnapshot.take()
    check_env(envs.WalkEnv, max_steps=20)
    check_env(envs.unpicklable_factory(), max_steps=20)
    snapshot.assert_nothing_leaked()


def test_a_spawned_process_that_hangs_is_killed_at_the_timeout():
    snapshot = ResourceSnapshot.take()
    report = check_env(envs.slow_factory, max_steps=5, spawn_timeout=2.0)
    result = report.result(REBUILDS)
    assert result.status is CheckStatus.FAIL and "no answer within 2 s" in result.reason
    snapshot.assert_nothing_leaked()


@pytest.mark.parametrize(
    "bad", [{"max_steps": 0}, {"episodes": 0}, {"spawn_timeout": 0}, {"max_steps": 2.5}],
)
def test_bad_limits_name_the_argument(bad):
    name = next(iter(bad))
    with pytest.raises(ConfigurationError, match=name):
        check_env(envs.WalkEnv, **bad)


def test_a_target_that_is_not_an_env_says_what_is_expected():
    with pytest.raises(ConfigurationError, match="env instance cannot be rebuilt"):
        check_env(envs.WalkEnv())
    with pytest.raises(ConfigurationError, match="not a registered Gymnasium env"):
        check_env("NoSuchEnv-v0")
    with pytest.raises(ConfigurationError, match="`env_kwargs` and `wrappers` apply to registered env ids only"):
        check_env(envs.WalkEnv, env_kwargs={"max_episode_steps": 5})


# Real envs pass.


def test_cartpole_by_id_passes_every_check():
    report = check_env("CartPole-v1", env_kwargs={"max_episode_steps": 50})
    assert set(_statuses(report).values()) == {CheckStatus.PASS}, report


def test_a_module_factory_target_is_imported_in_the_spawned_process_too():
    report = check_env("tests.conformance_envs:WalkEnv", max_steps=60)
    assert set(_statuses(report).values()) == {CheckStatus.PASS}, report


def test_mujoco_passes():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = check_env("HalfCheetah-v5", env_kwargs={"max_episode_steps": 40}, max_steps=100)
    assert set(_statuses(report).values()) == {CheckStatus.PASS}, report


def test_atari_with_gymnasium_wrappers_passes():
    report = check_env(envs.atari_pong, max_steps=80, episodes=1)
    assert set(_statuses(report).values()) == {CheckStatus.PASS}, report


def test_a_plugin_id_is_rebuilt_in_the_spawned_process_without_registering_it_there():
    # "ale_py:ALE/Pong-v5" is resolved here; the spawned process gets the spec, not the id.
    report = check_env("ale_py:ALE/Pong-v5", env_kwargs={"max_episode_steps": 40}, max_steps=20, episodes=1)
    assert report.result(REBUILDS).status is CheckStatus.PASS, report
    assert report.result(SAME_SEED_SPAWNED).status is CheckStatus.PASS, report


def test_raw_minigrid_fails_naming_the_wrappers_that_fix_it():
    report = check_env(envs.minigrid_raw, max_steps=40)
    result = report.result(STORABLE)
    assert result.status is CheckStatus.FAIL
    assert "FilterObservation" in result.reason and "ImgObsWrapper" in result.reason


@pytest.mark.parametrize("factory", [envs.minigrid_image, envs.minigrid_filtered], ids=["ImgObsWrapper", "FilterObservation"])
def test_wrapped_minigrid_passes(factory):
    report = check_env(factory, max_steps=40)
    assert set(_statuses(report).values()) == {CheckStatus.PASS}, report


@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
def test_gymnasium_vector_envs_pass_in_each_autoreset_mode(mode):
    report = check_env(partial(vector_envs.sync_vector, "cartpole", 3, mode), max_steps=60)
    statuses = _statuses(report)
    assert AUTORESET in statuses
    assert set(statuses.values()) == {CheckStatus.PASS}, report


def test_a_vector_env_reusing_its_buffer_is_a_warning():
    report = check_env(envs.aliasing_vector, max_steps=40)
    assert report.result(NO_ALIASING).status is CheckStatus.WARN
    assert "copy=False" in report.result(NO_ALIASING).reason
    assert report.ok
