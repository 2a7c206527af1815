"""check_env always reports: whatever the env raises, if it hangs, if it leaves processes behind.

The user's Ctrl-C is the one thing that still ends it (with ``KeyboardInterrupt``).
"""

from __future__ import annotations

import re
import signal
import threading

import pytest

from parallel_rollouts import ConfigurationError, check_env
from parallel_rollouts.conformance import CheckStatus
from parallel_rollouts.conformance.aliasing import NO_ALIASING
from parallel_rollouts.conformance.autoreset import AUTORESET
from parallel_rollouts.conformance.determinism import SAME_SEED, SAME_SEED_SPAWNED
from parallel_rollouts.conformance.global_random import NO_GLOBAL_RANDOM
from parallel_rollouts.conformance.pickling import REBUILDS
from parallel_rollouts.conformance.spaces_check import SPACES_HONOURED
from tests import conformance_envs as envs

# The names users look these checks up by (``report.result(name)``).
BUILDS = "factory builds an env"
CLOSES = "closes cleanly"


@pytest.mark.parametrize(
    ("factory", "raised", "fix"),
    [
        pytest.param(envs.ExitInStepEnv, r"raised SystemExit\(0\)", "must not call sys.exit", id="SystemExit"),
        pytest.param(envs.InterruptInStepEnv, "raised KeyboardInterrupt during", "must not raise KeyboardInterrupt",
                     id="KeyboardInterrupt"),
        pytest.param(envs.BaseExceptionEnv, r"raised EnvBug\('step broke'\)", "must survive", id="BaseException"),
    ],
)
def test_an_env_raising_a_base_exception_fails_the_checks_it_raised_in(factory, raised, fix):
    report = check_env(factory, max_steps=30)
    result = report.result(SAME_SEED)
    assert result.status is CheckStatus.FAIL, report
    assert result.reason.startswith("the env ") and f"{factory.__name__}.step, line" in result.reason
    assert re.search(raised, result.reason), result.reason
    assert fix in result.fix
    assert not report.ok
    assert report.result(CLOSES).status is CheckStatus.PASS  # the checks after it still ran


def test_a_fix_said_for_one_check_is_not_printed_again_for_the_next():
    # Every run steps the env, so each check that runs it fails with the same error and fix.
    report = check_env(envs.ExitInStepEnv, max_steps=30)
    text = str(report)
    assert len(report.failures) > 1 and len({result.fix for result in report.failures}) == 1
    assert text.count("must not call sys.exit") == 1, text
    assert "fix: as for 'observations in space' above" in text
    assert all("must not call sys.exit" in result.fix for result in report.failures)  # the data keeps each


# The checks after the env's reset raised that reset the env, and so were not run.
AFTER_A_RESET = (REBUILDS, SAME_SEED, SAME_SEED_SPAWNED, NO_ALIASING, NO_GLOBAL_RANDOM)


def test_an_env_whose_reset_raises_fails_once_naming_its_reset_and_the_checks_after_it_are_not_run():
    report = check_env(envs.ResetRaisingEnv, max_steps=30)
    result = report.result(SPACES_HONOURED)
    assert [failure.name for failure in report.failures] == [SPACES_HONOURED], report
    assert result.reason == (
        "the env's reset(seed=0) raised ValueError('no server at localhost:9000'), in "
        f"tests.conformance_envs.ResetRaisingEnv.reset, line {envs.ResetRaisingEnv.reset.__code__.co_firstlineno + 1}"
    )
    assert "the env was built, but its reset(seed=0) raised" in result.fix
    assert ('run `python -c "import tests.conformance_envs; tests.conformance_envs.ResetRaisingEnv().reset(seed=0)"` '
            "to see the whole traceback") in result.fix
    assert "registers" not in result.fix and "import ale_py" not in str(report)
    for name in AFTER_A_RESET:
        assert report.result(name).status is CheckStatus.WARN, report
        assert report.result(name).reason == (
            "not run: it resets the env, and the env's reset raised in 'observations in space' (see above)"
        )
    assert report.result(CLOSES).status is CheckStatus.PASS  # needs no reset: still run
    text = str(report)
    assert text.count("ValueError") == 1 and text.count("fix:") == 1, text


def test_the_reset_to_make_by_hand_is_a_command_line_when_one_can_be_written():
    from parallel_rollouts.conformance.check import _reset_by_hand
    from parallel_rollouts.conformance.target import resolve_target
    from parallel_rollouts.conformance.trajectory import ResetCall

    by_id = _reset_by_hand(resolve_target("CartPole-v1", {"max_episode_steps": 7}), ResetCall(3))
    assert by_id == 'run `python -c "import gymnasium; gymnasium.make(\'CartPole-v1\', max_episode_steps=7).reset(seed=3)"`'
    assert _reset_by_hand(resolve_target(lambda: envs.WalkEnv()), ResetCall(0)) == \
        "build an env with the factory and call `env.reset(seed=0)` by hand"


def test_a_vector_env_whose_reset_raises_fails_the_autoreset_check_and_no_other():
    report = check_env(envs.reset_raising_vector, max_steps=30)
    assert [failure.name for failure in report.failures] == [AUTORESET], report
    assert report.result(AUTORESET).reason.startswith("the env's reset(seed=0) raised ValueError(")
    assert "tests.conformance_envs.reset_raising_vector().reset(seed=0)" in report.result(AUTORESET).fix
    for name in (SPACES_HONOURED, *AFTER_A_RESET):
        assert report.result(name).reason.startswith("not run: it resets the env"), report


def test_an_env_whose_reset_raises_in_a_spawned_process_only_is_told_so_without_the_registering_fix():
    report = check_env(envs.SpawnedResetRaisingEnv, max_steps=30)
    result = report.result(REBUILDS)
    assert [failure.name for failure in report.failures] == [REBUILDS], report
    assert result.reason.startswith(
        "in a fresh spawned process: the env's reset(seed=0) raised RuntimeError('the simulator licence is in the "
        "parent process only'), in tests.conformance_envs.SpawnedResetRaisingEnv.reset, line "
    ), result.reason
    assert "registers" not in result.fix and "to see the whole traceback" in result.fix
    assert report.result(SAME_SEED).status is CheckStatus.PASS  # this process's resets work: the checks ran


def test_a_factory_that_raises_is_a_failed_check_naming_the_fix():
    report = check_env(envs.unregistered_namespace, max_steps=30)
    assert [result.name for result in report.results] == [BUILDS]
    result = report.result(BUILDS)
    assert result.status is CheckStatus.FAIL and not report.ok
    assert "the factory raised NamespaceNotFound" in result.reason and "NoSuchNamespace" in result.reason
    assert "none was run" in result.reason
    assert "import ale_py" in result.fix
    assert "FAILED: 1 check, 1 failed, 0 warned" in str(report)  # not "1 checks"


@pytest.mark.timeout(120)  # pytest-timeout arms its own SIGALRM timer: check_env must keep it
def test_an_env_hanging_in_reset_fails_at_the_timeout_and_the_checks_after_it_are_not_run():
    previous_handler = signal.getsignal(signal.SIGALRM)
    report = check_env(envs.HangInResetEnv, max_steps=30, timeout=1)
    result = report.result(SPACES_HONOURED)
    assert result.status is CheckStatus.FAIL, report
    assert "did not finish within 1 s: stopped in tests.conformance_envs.HangInResetEnv.reset" in result.reason
    assert "--timeout" in result.fix
    for name in (REBUILDS, SAME_SEED, SAME_SEED_SPAWNED, NO_ALIASING, NO_GLOBAL_RANDOM):
        assert report.result(name).status is CheckStatus.WARN
        assert report.result(name).reason.startswith("not run: the env did not finish 'observations in space'")
    assert signal.getsignal(signal.SIGALRM) is previous_handler


@pytest.mark.timeout(120)
def test_an_env_that_swallows_the_timeout_still_fails_at_it():
    report = check_env(envs.SwallowingHangEnv, max_steps=30, timeout=1)
    result = report.result(SPACES_HONOURED)
    assert result.status is CheckStatus.FAIL, report
    assert result.reason.startswith("did not finish within 1 s"), result.reason


def test_a_sigalrm_from_elsewhere_does_not_end_the_block():
    from parallel_rollouts.conformance.watchdog import deadline

    with deadline(100.0) as limit:
        signal.raise_signal(signal.SIGALRM)
    assert limit.enforced and not limit.expired


def test_a_timer_armed_before_is_kept():
    from parallel_rollouts.conformance.watchdog import deadline

    fired = []
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
    try:
        signal.setitimer(signal.ITIMER_REAL, 1000.0)
        with deadline(500.0) as limit:
            assert signal.getitimer(signal.ITIMER_REAL)[0] <= 500.0
        assert limit.enforced and not limit.expired
        assert 500.0 < signal.getitimer(signal.ITIMER_REAL)[0] <= 1000.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert fired == []


def test_outside_the_main_thread_the_checks_run_without_a_timeout():
    reports = []
    thread = threading.Thread(target=lambda: reports.append(check_env(envs.WalkEnv, max_steps=30, timeout=1)))
    thread.start()
    thread.join(300)
    assert reports and reports[0].ok, reports


def test_leftover_child_processes_are_a_warning_naming_their_pids():
    envs.STARTED.clear()
    try:
        report = check_env(envs.LeakyEnv, max_steps=30)
        result = report.result(CLOSES)
        assert result.status is CheckStatus.WARN, report
        leaked = [child.pid for child in envs.STARTED if child.poll() is None]
        assert leaked and all(f"pid {pid} (" in result.reason for pid in leaked), (leaked, result.reason)
        assert "still running after every env was closed" in result.reason and "close()" in result.fix
        assert report.ok  # a warning
    finally:
        for child in envs.STARTED:
            child.kill()
            child.wait(30)


def test_an_env_that_stops_its_children_in_close_passes():
    report = check_env(envs.ProcessEnv, max_steps=30)
    assert report.result(CLOSES).status is CheckStatus.PASS, report


def test_a_close_that_raises_fails_closes_cleanly():
    report = check_env(envs.RaisingCloseEnv, max_steps=30)
    result = report.result(CLOSES)
    assert result.status is CheckStatus.FAIL
    assert "raised RuntimeError('the simulator is already gone')" in result.reason


@pytest.mark.parametrize("factory", [envs.CtrlCInStepEnv, envs.SwallowingCtrlCEnv], ids=["raised", "swallowed"])
def test_the_users_ctrl_c_during_a_check_still_stops_check_env(factory):
    with pytest.raises(KeyboardInterrupt):
        check_env(factory, max_steps=30)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.parametrize("bad", [0, -1.0, True, "5"])
def test_a_bad_timeout_names_the_argument(bad):
    with pytest.raises(ConfigurationError, match="`timeout` must be a positive number of seconds"):
        check_env(envs.WalkEnv, timeout=bad)
