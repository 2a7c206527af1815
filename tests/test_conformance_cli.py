"""The command line: `python -m parallel_rollouts check|advise`, its output and its exit status."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

BROKEN_MODULE = textwrap.dedent(
    """
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
    """
)


def _run(*arguments: str, cwd: Path) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "parallel_rollouts", *arguments],
        cwd=cwd, env=environment, capture_output=True, text=True, timeout=300,
    )


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "my_envs.py").write_text(BROKEN_MODULE)
    return tmp_path


def test_check_exits_zero_on_a_conforming_env_and_prints_the_table(workdir):
    result = _run("check", "CartPole-v1", "--max-steps", "200", "--json", "out.json", cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert "Conformance of CartPole-v1" in result.stdout and "OK: 9 checks, 0 failed" in result.stdout
    written = json.loads((workdir / "out.json").read_text())
    assert written["check"]["ok"] is True and len(written["check"]["checks"]) == 9


def test_check_exits_one_when_a_check_fails_with_a_factory_from_the_current_directory(workdir):
    result = _run("check", "my_envs:make", "--max-steps", "200", cwd=workdir)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "no observation aliasing" in result.stdout and "FAIL" in result.stdout
    assert "FAILED: 9 checks, 1 failed" in result.stdout


def test_an_unknown_env_exits_two_with_the_reason(workdir):
    result = _run("check", "NoSuchEnv-v0", cwd=workdir)
    assert result.returncode == 2
    assert "not a registered Gymnasium env" in result.stderr


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


def test_the_console_script_is_declared():
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()
    assert 'parallel-rollouts = "parallel_rollouts.conformance.cli:main"' in pyproject
