"""The command line: `python -m parallel_rollouts check|advise`, its output and its exit status."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

BROKEN_MODULE = textwrap.dedent(
    """
    import time

    import gymnasium


    class SharedBuffer(gymnasium.Wrapper):
        # Returns one array, rewritten in place at every step.
        def step(self, action):
            observation, *rest = self.env.step(action)
            self.buffer = getattr(self, "buffer", observation)
            self.buffer[:] = observation
            return self.buffer, *rest


    def make():
        return SharedBuffer(gymnasium.make("CartPole-v1"))


    def make_good():
        return gymnasium.make("CartPole-v1")


    class ExitInStep(gymnasium.Wrapper):
        def step(self, action):
            raise SystemExit(0)


    def make_exiting():
        return ExitInStep(gymnasium.make("CartPole-v1"))


    class HangInReset(gymnasium.Wrapper):
        # Says that it has started waiting, then waits for ever.
        def reset(self, **kwargs):
            open("waiting", "w").close()
            while True:
                time.sleep(3600)


    def make_hanging():
        return HangInReset(gymnasium.make("CartPole-v1"))


    class ResetRaises(gymnasium.Wrapper):
        def reset(self, **kwargs):
            raise ValueError("no server at localhost:9000")


    def make_reset_raising():
        return ResetRaises(gymnasium.make("CartPole-v1"))


    def make_here_only():
        # Builds in the process that was started, never in a worker process it starts.
        import multiprocessing

        if multiprocessing.parent_process() is not None:
            raise RuntimeError("this env builds in the main process only")
        return gymnasium.make("CartPole-v1")
    """
)

UNGUARDED_SCRIPT = textwrap.dedent(
    """
    import gymnasium
    from parallel_rollouts import {call}


    def make():
        return gymnasium.make("CartPole-v1")


    result = {call}(make{arguments})
    print(result)
    """
)


def _command(*arguments: str) -> tuple[list[str], dict]:
    return [sys.executable, "-m", "parallel_rollouts", *arguments], {**os.environ, "PYTHONPATH": str(REPO_ROOT)}


def _run(*arguments: str, cwd: Path) -> subprocess.CompletedProcess:
    command, environment = _command(*arguments)
    return subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=300)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "my_envs.py").write_text(BROKEN_MODULE)
    return tmp_path


def test_check_exits_zero_on_a_conforming_env_and_prints_the_table(workdir):
    result = _run("check", "CartPole-v1", "--max-steps", "200", "--json", "out.json", cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert "Conformance of CartPole-v1" in result.stdout and "OK: 10 checks, 0 failed" in result.stdout
    written = json.loads((workdir / "out.json").read_text())
    assert written["check"]["ok"] is True and len(written["check"]["checks"]) == 10


def test_check_exits_one_when_a_check_fails_with_a_factory_from_the_current_directory(workdir):
    result = _run("check", "my_envs:make", "--max-steps", "200", cwd=workdir)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "no observation aliasing" in result.stdout and "FAIL" in result.stdout
    assert "FAILED: 10 checks, 1 failed" in result.stdout


def test_an_unknown_env_exits_two_with_the_reason(workdir):
    result = _run("check", "NoSuchEnv-v0", cwd=workdir)
    assert result.returncode == 2
    assert "not a registered Gymnasium env" in result.stderr


@pytest.mark.parametrize(
    ("target", "message"),
    [
        pytest.param("../my_envs:make", "names '../my_envs', which is not a module name", id="path"),
        pytest.param("my_envs:nothing", "module 'my_envs' has no 'nothing', and no env id 'nothing' is registered",
                     id="missing"),
        pytest.param("my_envs:gymnasium", "my_envs.gymnasium is a module, not callable", id="not-callable"),
        pytest.param("script:make", "names module 'script', which raised SystemExit(3) when imported", id="import"),
        pytest.param("builtins:dict", "the env factory returned dict, not a gymnasium.Env", id="not-an-env"),
    ],
)
def test_a_target_that_cannot_be_resolved_exits_two_naming_it(workdir, target, message):
    (workdir / "script.py").write_text("import sys\nsys.exit(3)\n")
    result = _run("check", target, cwd=workdir)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        pytest.param("builtins:exit", "the factory raised SystemExit(None)", id="factory"),
        pytest.param("my_envs:make_exiting", "the env raised SystemExit(0)", id="env"),
    ],
)
def test_an_env_or_factory_calling_exit_is_a_failed_check(workdir, target, reason):
    result = _run("check", target, "--max-steps", "50", cwd=workdir)
    assert result.returncode == 1, result.stdout + result.stderr
    assert reason in result.stdout and "FAILED:" in result.stdout


@pytest.mark.timeout(300)
def test_an_env_hanging_in_reset_is_a_failed_check_at_the_timeout(workdir):
    result = _run("check", "my_envs:make_hanging", "--timeout", "1", "--json", "out.json", cwd=workdir)
    assert result.returncode == 1, result.stdout + result.stderr
    checks = {check["name"]: check for check in json.loads((workdir / "out.json").read_text())["check"]["checks"]}
    assert checks["observations in space"]["status"] == "fail"
    assert checks["observations in space"]["reason"].startswith(
        "did not finish within 1 s: stopped in my_envs.HangInReset.reset"
    )


def test_strict_fails_on_a_warning(workdir):
    result = _run("check", "tests.conformance_envs:WalkEnv", "--max-steps", "10", "--strict", cwd=REPO_ROOT)
    assert "OK: 10 checks, 0 failed, 1 warned" in result.stdout, result.stdout + result.stderr
    assert result.returncode == 1
    assert "--strict: 1 check warned ('same seed, same trajectory')" in result.stderr  # "1 check", not "1 check(s)"


@pytest.mark.timeout(300)
def test_ctrl_c_stops_check_with_status_130(workdir):
    command, environment = _command("check", "my_envs:make_hanging")
    with subprocess.Popen(command, cwd=workdir, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as process:
        while not (workdir / "waiting").exists():  # the env is in reset, inside a check; pytest-timeout bounds this
            assert process.poll() is None, process.communicate()
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stdout + stderr
    assert stderr.strip().endswith("parallel-rollouts: interrupted") and "Traceback" not in stderr


def test_an_env_whose_reset_raises_is_told_once_with_the_reset_to_run_by_hand(workdir):
    result = _run("check", "my_envs:make_reset_raising", "--max-steps", "50", cwd=workdir)
    assert result.returncode == 1, result.stdout + result.stderr
    flat = " ".join(result.stdout.split())
    assert "observations in space FAIL the env's reset(seed=0) raised ValueError('no server at localhost:9000'), " \
           "in my_envs.ResetRaises.reset, line " in flat, result.stdout
    # The command stays on one line, to copy.
    assert '`python -c "import my_envs; my_envs.make_reset_raising().reset(seed=0)"`' in result.stdout
    assert flat.count("ValueError") == 1 and flat.count("fix:") == 1, result.stdout
    assert "registers" not in flat and "import ale_py" not in flat
    assert flat.count("not run: it resets the env, and the env's reset raised in 'observations in space'") == 5
    assert "FAILED: 10 checks, 1 failed, 5 warned" in result.stdout
    assert "parallel-rollouts: check: no global random state (not run)" in result.stderr.splitlines()


def test_a_factory_that_raises_is_counted_as_one_check(workdir):
    result = _run("check", "builtins:exit", cwd=workdir)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.rstrip().endswith("FAILED: 1 check, 1 failed, 0 warned"), result.stdout


@pytest.mark.parametrize("command", ["check", "advise"])
def test_help_shows_every_options_default(command):
    from parallel_rollouts.conformance.cli import _parser

    subparsers = next(action for action in _parser()._actions if action.dest == "command")
    options = [action for action in subparsers.choices[command]._actions
               if action.option_strings and action.dest != "help"]
    assert len(options) == {"check": 16, "advise": 9}[command]
    for option in options:
        assert "(default: " in (option.help or ""), option.option_strings
    text = _run(command, "--help", cwd=REPO_ROOT).stdout
    assert "(default: 128)" in text and "(default: 8;" in text and "(default: 5, 7 with" in " ".join(text.split())
    if command == "check":
        flat = " ".join(text.split())
        assert "--spawn-timeout SECONDS seconds the freshly spawned process may take to build and run the env " \
               "(default: 120)" in flat, text
        assert "--timeout SECONDS seconds each check may run the env in this process (default: 60)" in flat


def test_env_kwargs_are_passed_to_gymnasium_make(workdir):
    result = _run("check", "CartPole-v1", "--env-kwargs", '{"max_episode_steps": 7}', "--max-steps", "50", cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert "max_episode_steps=7" in result.stdout


def test_advise_prints_what_it_measured_and_a_recommendation(workdir):
    result = _run(
        "advise", "my_envs:make_good", "--num-envs", "2", "--horizon", "8", "--rounds", "2",
        "--trial-seconds", "0.05", "--json", "advice.json", cwd=workdir,
    )
    assert result.returncode == 0, result.stderr
    assert "Backend advice for my_envs:make_good: 2 envs, horizon 8" in result.stdout
    assert "Recommendation: backend=" in result.stdout
    advice = json.loads((workdir / "advice.json").read_text())["advice"]
    assert advice["recommended"] in [option["label"] for option in advice["options"]]
    assert all(len(option["rates"]) == 2 for option in advice["options"] if option["error"] is None)


def test_advise_on_an_env_that_raises_exits_two_with_the_fix(workdir):
    result = _run("advise", "my_envs:make_exiting", "--num-envs", "2", "--rounds", "1", cwd=workdir)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "parallel-rollouts: error: the env raised SystemExit(0) as its step was timed" in result.stderr
    assert "must not call sys.exit()" in result.stderr and "Traceback" not in result.stderr


def test_advise_exits_one_and_recommends_nothing_when_an_option_could_not_be_measured(workdir):
    result = _run(
        "advise", "my_envs:make_here_only", "--num-envs", "2", "--horizon", "8", "--rounds", "2",
        "--trial-seconds", "0.05", "--json", "advice.json", cwd=workdir,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "No recommendation: 2 of 3 options could not be measured (async, per step, async, rollout workers)" \
        in result.stdout
    assert "Recommendation:" not in result.stdout
    assert "this env builds in the main process only" in result.stdout
    advice = json.loads((workdir / "advice.json").read_text())["advice"]
    assert advice["complete"] is False and advice["recommended"] is None


def _run_script(workdir: Path, call: str, arguments: str) -> subprocess.CompletedProcess:
    (workdir / "unguarded.py").write_text(UNGUARDED_SCRIPT.format(call=call, arguments=arguments))
    return subprocess.run(
        [sys.executable, "unguarded.py"], cwd=workdir, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )


def test_check_env_in_a_script_without_the_main_guard_names_the_guard_and_starts_no_process(workdir):
    result = _run_script(workdir, "check_env", ", max_steps=50")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("Conformance of") == 1  # no spawned process ran the script again
    assert "rebuilds in a spawned process         FAIL  not run: `check_env` is called at the top level of" \
        in result.stdout
    flat = " ".join(result.stdout.split())
    assert "unguarded.py (line 10), outside `if __name__ == \"__main__\":`" in flat
    assert "fix: put the script's code under `if __name__ == \"__main__\":`" in flat
    assert "bootstrapping phase" not in result.stdout + result.stderr


def test_advise_in_a_script_without_the_main_guard_measures_nothing_and_names_the_guard(workdir):
    result = _run_script(workdir, "advise", ", 2, rounds=1, trial_seconds=0.05")
    assert result.returncode == 1
    assert "ConfigurationError: `advise` is called at the top level of" in result.stderr
    assert "outside `if __name__ == \"__main__\":`" in result.stderr and "Nothing was measured" in result.stderr
    assert "Backend advice" not in result.stdout


def test_a_spawned_process_importing_a_script_that_calls_check_env_refuses_the_call(workdir):
    # A guard the source check cannot read as one: the spawned process stops the call itself.
    script = UNGUARDED_SCRIPT.format(call="check_env", arguments=", max_steps=50").replace(
        "result = check_env", "if __name__ != 'a module name no script has':\n    result = check_env"
    ).replace("\nprint(result)", "\n    print(result.result('rebuilds in a spawned process'))")
    (workdir / "odd_guard.py").write_text(script)
    result = subprocess.run(
        [sys.executable, "odd_guard.py"], cwd=workdir, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    assert result.stdout.count("CheckResult(") == 1, result.stdout  # the spawned process printed no report
    assert "exited with code 1 before answering" in result.stdout
    assert "This is such a process" in result.stderr


def test_progress_goes_to_stderr_one_line_per_check_option_and_round_and_quiet_drops_it(workdir):
    check = _run("check", "CartPole-v1", "--max-steps", "50", "--json", "out.json", cwd=workdir)
    assert check.returncode == 0, check.stderr
    lines = check.stderr.splitlines()
    assert lines[0] == "parallel-rollouts: check: factory builds an env"
    # Every check's line, in the report's order, the last ones included.
    names = [result["name"] for result in json.loads((workdir / "out.json").read_text())["check"]["checks"]]
    assert names[-2:] == ["no global random state", "closes cleanly"]
    assert [line for line in lines if line.startswith("parallel-rollouts: check: ")][1:] == \
        [f"parallel-rollouts: check: {name}" for name in names]
    assert "parallel-rollouts: check:" not in check.stdout
    advise = _run("advise", "my_envs:make_good", "--num-envs", "2", "--horizon", "8", "--rounds", "2",
                  "--trial-seconds", "0.05", cwd=workdir)
    assert advise.returncode == 0, advise.stderr
    lines = advise.stderr.splitlines()
    assert "parallel-rollouts: advise: starting option 1 of 3: sync" in lines
    assert any(re.fullmatch(r"parallel-rollouts: advise: starting option 3 of 3: async, rollout workers, "
                            r"(1 worker|([02-9]|\d\d+) workers)", line) for line in lines), lines
    assert "parallel-rollouts: advise: 3 options, then 2 rounds of about 0.05 s each per option (about 0 s)" in lines
    assert [line for line in lines if " round " in line][-1].startswith("parallel-rollouts: advise: round 2 of 2 timed")
    quiet = _run("check", "CartPole-v1", "--max-steps", "50", "--quiet", cwd=workdir)
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_the_console_script_is_declared():
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()
    assert 'parallel-rollouts = "parallel_rollouts.conformance.cli:main"' in pyproject
