"""``advise`` for the user's policy: given as ``module:factory`` (Python and ``--policy`` alike), and said
plainly when the advice is for random actions."""

from __future__ import annotations

import pytest

from parallel_rollouts import ConfigurationError, advise
from parallel_rollouts.conformance.advice import Advice, Option, OptionResult
from parallel_rollouts.conformance.cli import main
from parallel_rollouts.conformance.policy_target import resolve_policy
from tests import advise_policies
from tests import conformance_envs as envs

TINY = {"rounds": 1, "trial_seconds": 0.02, "horizon": 8}


def test_a_policy_named_module_factory_is_built_once_and_timed_in_every_option():
    advise_policies.calls["count"] = 0
    advice = advise(envs.WalkEnv, 2, policy="tests.advise_policies:make_counting", **TINY)
    assert advice.complete, advice.format()
    assert advice.random_actions is False and advice.to_dict()["random_actions"] is False
    assert advice.policy == "tests.advise_policies:make_counting (built tests.advise_policies.CountingPolicy)"
    assert advise_policies.calls["count"] > 0  # the in-process options ran it here
    assert "This advice is for random actions" not in advice.format()


def _advice(random_actions: bool) -> Advice:
    option = Option("sync", "sync", "main", None, [envs.WalkEnv])
    return Advice(
        "WalkEnv", 2, 8, 2, 1, 0.02, resolve_policy(None).description if random_actions else "my.policy", 1e-5,
        [OptionResult(option, [100.0], 0.1, 1)], random_actions=random_actions,
    )


def test_advice_for_random_actions_says_so_and_names_the_flag_that_times_a_policy():
    text = " ".join(_advice(random_actions=True).format().split())
    assert "policy: none given: random actions (each env samples its seeded action space)" in text
    assert "This advice is for random actions. Your policy's cost per call changes the answer" in text
    assert "--policy module:factory (Python: advise(..., policy=your_policy))" in text
    assert "This advice is for random actions" not in _advice(random_actions=False).format()


@pytest.mark.parametrize(
    ("given", "message"),
    [
        pytest.param("tests.advise_policies", r"is not 'module:factory': write the module dotted, a colon", id="no-colon"),
        pytest.param("no_such_module_here:make", r"names module 'no_such_module_here', which cannot be imported "
                     r"\(.*\)\. Run from the directory that holds it", id="no-module"),
        pytest.param("tests.advise_policies:make_missing", r"module 'tests.advise_policies' has no 'make_missing'\. "
                     r"Name a zero-argument function in it that returns your policy", id="no-attribute"),
        pytest.param("tests.advise_policies:NOT_CALLABLE", r"tests.advise_policies.NOT_CALLABLE is a int, not a "
                     r"function", id="not-callable"),
        pytest.param("tests.advise_policies:policy_itself", r"tests.advise_policies.policy_itself takes observations, "
                     r"but 'module:factory' names a zero-argument function that returns the policy, not the policy "
                     r"itself\. Add `def make_policy\(\): return policy_itself` to tests.advise_policies", id="the-policy"),
        pytest.param("tests.advise_policies:make_raising", r"the policy factory tests.advise_policies.make_raising\(\) "
                     r"raised RuntimeError\('no checkpoint at runs/latest.pt'\) as it was called with no arguments, in "
                     r"tests.advise_policies.make_raising, line \d+\. Fix the factory", id="raises"),
        pytest.param("tests.advise_policies:make_nothing", r"the policy factory tests.advise_policies.make_nothing\(\) "
                     r"returned NoneType None, which is not callable; it must return a callable that takes the "
                     r"observations", id="returns-none"),
        pytest.param(42, r"`policy` must be a callable .* got int 42", id="not-a-policy"),
    ],
)
def test_a_policy_that_names_no_policy_is_refused_naming_the_culprit_and_the_fix(given, message):
    with pytest.raises(ConfigurationError, match=message):
        resolve_policy(given)


def test_the_command_line_takes_the_policy_and_exits_two_before_timing_anything(capsys):
    status = main(["advise", "CartPole-v1", "--quiet", "--policy", "tests.advise_policies:make_raising"])
    assert status == 2
    error = capsys.readouterr().err
    assert error.startswith("parallel-rollouts: error: the policy factory tests.advise_policies.make_raising() raised")
    assert "Traceback" not in error
