"""The public surface: a curated, sorted __all__, and the active core is reported."""

import os
import subprocess
import sys

import numpy as np
import pytest

import parallel_rollouts
from parallel_rollouts import ParallelRolloutCollector, PolicyOutput, errors
from tests.envs import cartpole


def test_all_is_sorted_and_every_name_exists():
    assert list(parallel_rollouts.__all__) == sorted(parallel_rollouts.__all__)
    for name in parallel_rollouts.__all__:
        assert hasattr(parallel_rollouts, name), name
    public_errors = [name for name in errors.__all__]
    assert set(public_errors) <= set(parallel_rollouts.__all__)


def test_every_public_name_is_documented_and_says_its_contract():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    documentation = (root / "README.md").read_text(encoding="utf-8") + "".join(
        path.read_text(encoding="utf-8") for path in sorted((root / "docs").glob("*.md"))
    )
    undocumented = [name for name in parallel_rollouts.__all__ if name != "__version__" and f"{name}" not in documentation]
    assert not undocumented, f"public names the README and docs never mention: {undocumented}"
    without_docstring = [
        name for name in parallel_rollouts.__all__
        if callable(getattr(parallel_rollouts, name)) and not (getattr(parallel_rollouts, name).__doc__ or "").strip()
    ]
    assert not without_docstring, f"public names without a docstring: {without_docstring}"


@pytest.mark.parametrize(
    "statement",
    [
        "from parallel_rollouts import make_collector, check_env, advise, active_core, ParallelRolloutCollector",
        "from parallel_rollouts.seeding import episode_seed",
        "import parallel_rollouts.seeding as seeding; assert seeding.episode_seed(0, 1, 2) >= 0",
        "from parallel_rollouts.sb3 import ParallelVecEnv",
        "from parallel_rollouts.collector import ParallelRolloutCollector",
        "from parallel_rollouts.vector_env import ParallelVectorEnv",
        "from parallel_rollouts.make import make_collector",
        "from parallel_rollouts.errors import WorkerDiedError",
    ],
)
def test_every_documented_import_path_works_in_a_fresh_interpreter(statement):
    """Moved modules keep their documented paths (an alias gives the module at its new path)."""
    subprocess.run([sys.executable, "-c", statement], check=True, capture_output=True, text=True, timeout=120)


def test_an_old_path_is_the_module_at_its_new_one():
    import parallel_rollouts.config.seeding
    import parallel_rollouts.seeding

    assert parallel_rollouts.seeding is parallel_rollouts.config.seeding


def test_exceptions_subclass_the_builtin_a_caller_catches():
    assert issubclass(errors.ConfigurationError, ValueError)
    assert issubclass(errors.SpaceError, errors.ConfigurationError)
    assert issubclass(errors.ActionError, ValueError)
    assert issubclass(errors.ObservationError, ValueError)
    assert issubclass(errors.CoreUnavailableError, ImportError)
    assert issubclass(errors.WorkerError, RuntimeError)
    assert issubclass(errors.StepTimeoutError, TimeoutError)
    assert issubclass(errors.WorkerDiedError, errors.WorkerError)
    for name in errors.__all__:
        item = getattr(errors, name)
        if isinstance(item, type) and issubclass(item, Exception):
            assert issubclass(item, errors.ParallelRolloutsError)


def _active_core_in_subprocess(environment):
    code = "import parallel_rollouts, sys; sys.stdout.write(parallel_rollouts.active_core())"
    env = {**os.environ, **environment}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout


def test_the_environment_variable_forces_the_pure_python_core():
    assert _active_core_in_subprocess({"PARALLEL_ROLLOUTS_PURE_PYTHON": "1"}) == "python"
    assert _active_core_in_subprocess({"PARALLEL_ROLLOUTS_PURE_PYTHON": "0"}) == "compiled"


def test_the_collector_reports_its_core():
    with ParallelRolloutCollector([cartpole], core="python", horizon=2, seed=0) as collector:
        assert collector.core == "python"
        assert "core='python'" in repr(collector)
    with ParallelRolloutCollector([cartpole], core="auto", horizon=2, seed=0) as collector:
        assert collector.core == parallel_rollouts.active_core()


def test_pytorch_tensors_are_accepted_from_the_policy():
    import torch  # the dev setup installs torch; a missing torch is a failure, not a skip

    def policy(observations):
        obs = torch.tensor(observations)  # copies: the observations are read-only views
        actions = (obs[:, 2] > 0).long()
        return PolicyOutput(actions, values=obs[:, 0].double(), log_probs=torch.zeros(obs.shape[0], 1))

    with ParallelRolloutCollector([cartpole] * 3, policy, "sync", horizon=10, seed=0) as collector:
        batch = collector.collect()
    np.testing.assert_array_equal(batch.actions, (batch.observations[:, :, 2] > 0).astype(np.int64))
    np.testing.assert_array_equal(batch.values, batch.observations[:, :, 0])
    assert batch.log_probs.dtype == np.float32 and not batch.log_probs.any()


def test_properties_describe_the_collector():
    with ParallelRolloutCollector([cartpole] * 2, backend="serial", horizon=3, seed=4) as collector:
        assert (collector.num_envs, collector.horizon, collector.backend, collector.seed) == (2, 3, "serial", 4)
        assert collector.observation_space.shape == (4,)
        assert collector.action_space.n == 2
        assert not collector.closed
    assert collector.closed
