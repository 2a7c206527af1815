"""``max_policy_lag=1`` on a thread of this process: a policy that samples from PyTorch's global generator
is said once, with why it matters and the fix; one with its own generator is not."""

from __future__ import annotations

import sys
import warnings

import pytest

from parallel_rollouts import GlobalGeneratorWarning, ParallelRolloutCollector
from parallel_rollouts.runners.global_generator import GlobalGeneratorWatch
from tests import conformance_envs as envs

torch = pytest.importorskip("torch")
from tests.torch_policies import GlobalGeneratorSampler, OwnGeneratorSampler


def _generator_warnings(policy, collects: int = 3, **kwargs) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ParallelRolloutCollector([envs.WalkEnv] * 2, policy, "sync", 4, 0, max_policy_lag=1, **kwargs) as collector:
            for _ in range(collects):
                collector.collect()
                torch.rand(2)  # the learner's own draws, beside the next batch
    return [str(w.message) for w in caught if issubclass(w.category, GlobalGeneratorWarning)]


def test_a_policy_sampling_from_the_global_generator_is_said_once_with_the_fix():
    messages = _generator_warnings(GlobalGeneratorSampler())
    assert len(messages) == 1, messages
    assert messages[0].startswith("PyTorch's global generator moved while the first batch was collected on the "
                                  "background thread (max_policy_lag=1)")
    assert "batches no longer follow from the seed" in messages[0]
    assert "Give the policy a generator of its own: `self.generator = torch.Generator().manual_seed(seed)`" \
        in messages[0]


def test_a_policy_with_its_own_generator_is_not_warned_about():
    assert _generator_warnings(OwnGeneratorSampler()) == []


def test_without_the_lag_nothing_is_watched():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ParallelRolloutCollector([envs.WalkEnv] * 2, GlobalGeneratorSampler(), "sync", 4, 0) as collector:
            collector.collect()
    assert not [w for w in caught if issubclass(w.category, GlobalGeneratorWarning)]


def test_the_watch_never_imports_torch(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch")
    watch = GlobalGeneratorWatch()
    assert watch.before() is None
    watch.after(None)
    assert "torch" not in sys.modules and not watch.done
