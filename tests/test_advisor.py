"""The backend advisor: it measures every option it lists, interleaved, and recommends a measured one.

Tiny budgets: these tests check what was measured and how it is reported, never how fast.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

from parallel_rollouts import ConfigurationError, advise
from parallel_rollouts.conformance.advice import NEAR_TIE, Advice, Option, OptionResult
from tests import conformance_envs as envs
from tests import vector_envs
from parallel_rollouts.processes.slicing import usable_cores
from tests.leaks import ResourceSnapshot

TINY = {"rounds": 2, "trial_seconds": 0.02, "horizon": 8}


def test_every_option_is_measured_in_every_round_and_the_best_median_is_recommended():
    snapshot = ResourceSnapshot.take()
    advice = advise(envs.WalkEnv, 4, **TINY)
    snapshot.assert_nothing_leaked()
    labels = [result.option.label for result in advice.results]
    assert labels == ["sync", "async, per step", "async, rollout workers"]
    for result in advice.results:
        assert result.error is None, result.error
        assert len(result.rates) == 2 and all(rate > 0 for rate in result.rates)
        assert result.collects >= 2
    best = advice.recommended
    assert advice.paired_score(best) == max(advice.paired_score(result) for result in advice.results)
    assert advice.env_step_seconds > 0 and advice.usable_cores >= 1
    text = str(advice)
    assert "Recommendation: " + best.option.as_arguments() in text
    assert "2 interleaved rounds" in text


def test_an_env_with_a_vector_implementation_adds_the_vector_source():
    advice = advise("CartPole-v1", 2, **TINY)
    sources = {result.option.source for result in advice.results}
    assert "vector env" in sources
    vector = next(result for result in advice.results if result.option.source == "vector env")
    assert vector.measured, vector.error


def test_a_vector_env_factory_is_one_source_of_its_own_envs():
    advice = advise(partial(vector_envs.sync_vector, "cartpole", 3, "same_step"), **TINY)
    assert advice.num_envs == 3
    assert all(result.measured for result in advice.results), [result.error for result in advice.results]
    with pytest.raises(ConfigurationError, match="vector env of 3 sub-envs"):
        advise(partial(vector_envs.sync_vector, "cartpole", 3, "same_step"), 5, **TINY)


def test_rollout_workers_do_not_apply_to_a_policy_that_does_not_pickle():
    unpicklable_policy = _LockedPolicy()
    advice = advise(envs.WalkEnv, 2, policy=unpicklable_policy, **TINY)
    workers = next(result for result in advice.results if result.option.policy_placement == "workers")
    assert not workers.measured and not workers.applicable and "does not pickle" in workers.error
    assert "does not apply: the policy does not pickle" in str(advice)
    assert advice.complete and advice.unmeasured == []
    assert advice.recommended.option.policy_placement == "main"


def test_no_recommendation_when_an_option_could_not_be_measured():
    advice = advise(envs.WalkEnv, 2, policy=_FailsInWorkers(), **TINY)
    workers = next(result for result in advice.results if result.option.policy_placement == "workers")
    assert workers.applicable and not workers.measured, workers.error
    assert advice.unmeasured == [workers] and not advice.complete
    assert advice.recommended is None and advice.near_ties == []
    text = str(advice)
    assert "Recommendation" not in text
    assert "No recommendation: 1 of 3 options could not be measured (async, rollout workers)" in text
    assert advice.to_dict()["complete"] is False and advice.to_dict()["recommended_code"] is None


def test_each_pick_prints_the_code_that_builds_it():
    advice = advise("CartPole-v1", 2, **TINY)
    codes = {result.option.label: result.option.code for result in advice.results}
    assert codes["sync"].splitlines() == [
        "from parallel_rollouts import make_collector",
        'collector = make_collector("CartPole-v1", num_envs=2, policy=policy, backend="sync", horizon=8)',
    ]
    workers = min(usable_cores(), 2)
    assert codes["async, rollout workers"].endswith(
        f'backend="async", policy_placement="workers", num_workers={workers}, horizon=8)'
    )
    assert codes["sync, vector env"].splitlines() == [
        "import gymnasium",
        "from parallel_rollouts import ParallelRolloutCollector",
        'collector = ParallelRolloutCollector(gymnasium.make_vec("CartPole-v1", num_envs=2, '
        'vectorization_mode="vector_entry_point"), policy, backend="sync", horizon=8)',
    ]
    namespace = {"policy": None}
    for label, code in codes.items():  # each one runs as printed
        exec(code.replace("horizon=8", "horizon=8, seed=0"), namespace)
        with namespace["collector"] as collector:
            assert collector.collect().num_envs == 2, label
    # CartPole's vector implementation resets on the step after an end: the batch needs masking.
    vector = next(result for result in advice.results if result.option.label == "sync, vector env")
    assert vector.option.needs_valid_mask
    assert not any(result.option.needs_valid_mask for result in advice.results if result.option.source == "env factories")


def test_a_vector_pick_prints_its_own_code_and_says_to_mask_with_valid():
    vector = Option("sync", "sync", "main", None, None, "vector env", code="import gymnasium\ncollector = X",
                    needs_valid_mask=True)
    plain = Option("sync", "sync", "main", None, None, code="collector = Y")
    advice = _advice([OptionResult(plain, [10.0, 10.0], 0.0, 2), OptionResult(vector, [20.0, 20.0], 0.0, 2)])
    text = str(advice)
    assert "Recommendation: backend=\"sync\"  (sync, vector env)" in text
    assert "    import gymnasium\n    collector = X" in text
    assert "weight the loss by `batch.valid`" in text
    assert "next best: sync (backend=\"sync\")" in text
    advice = _advice([OptionResult(plain, [20.0, 20.0], 0.0, 2), OptionResult(vector, [10.0, 10.0], 0.0, 2)])
    assert "batch.valid" not in str(advice)
    assert "next best: sync, vector env (backend=\"sync\", the env's vector implementation as the source)" in str(advice)


def test_a_factory_target_prints_code_with_the_factory():
    advice = advise(envs.WalkEnv, 2, **TINY)
    sync = advice.results[0].option
    assert sync.code.splitlines() == [
        "import tests.conformance_envs",
        "from parallel_rollouts import ParallelRolloutCollector",
        "collector = ParallelRolloutCollector([tests.conformance_envs.WalkEnv] * 2, policy, backend=\"sync\", horizon=8)",
    ]


def test_thorough_mode_adds_pipelined():
    advice = advise(envs.WalkEnv, 4, thorough=True, **TINY)
    assert any(result.option.pipelined for result in advice.results)
    assert advice.rounds == 2  # the explicit override wins over the mode's 7


@pytest.mark.parametrize("bad", [{"rounds": 0}, {"trial_seconds": 0}, {"horizon": 0}])
def test_bad_settings_name_the_argument(bad):
    with pytest.raises(ConfigurationError, match=next(iter(bad))):
        advise(envs.WalkEnv, 2, **{**TINY, **bad})


@pytest.mark.parametrize(
    ("factory", "raised"),
    [
        pytest.param(envs.unregistered_namespace, r"the env factory raised NamespaceNotFound\(.* as the env was made, "
                     r"in gymnasium\.envs\.registration\.\w+, line \d+, so no option can be timed\. Fix: import the "
                     r"package that registers the env", id="factory"),
        pytest.param(envs.ExitInStepEnv, r"the env raised SystemExit\(0\) as its step was timed, in "
                     r"tests\.conformance_envs\.ExitInStepEnv\.step, line \d+.*must not call sys\.exit", id="SystemExit"),
        pytest.param(envs.BaseExceptionEnv, r"the env raised EnvBug\('step broke'\) as its step was timed", id="BaseException"),
    ],
)
def test_a_factory_or_env_that_raises_is_refused_with_the_fix_before_any_option_starts(factory, raised):
    snapshot = ResourceSnapshot.take()
    with pytest.raises(ConfigurationError, match=raised):
        advise(factory, 2, **TINY)
    snapshot.assert_nothing_leaked()


def test_num_envs_is_required_for_single_envs():
    with pytest.raises(ConfigurationError, match="num_envs"):
        advise(envs.WalkEnv, **TINY)


def _result(name: str, rates: list[float]) -> OptionResult:
    return OptionResult(Option(name, "sync", "main", None, None), rates, 0.0, len(rates))


def _advice(results: list[OptionResult]) -> Advice:
    return Advice("env", 4, 8, 2, len(results[0].rates), 1.0, "none", 1e-5, results)


def test_the_recommendation_compares_options_within_each_round():
    # "b" has the higher median rate, but "a" was faster in three of the five rounds.
    a = _result("a", [10.0, 10.0, 1.0, 0.1, 0.1])
    b = _result("b", [9.0, 9.0, 0.5, 20.0, 20.0])
    assert b.median > a.median
    assert _advice([a, b]).recommended is a
    assert _advice([b, a]).recommended is a  # whichever option is the reference


def test_a_near_tie_is_one_faster_in_some_round_and_close_in_the_median_round():
    best = _result("best", [100.0, 100.0, 100.0])
    close = _result("close", [101.0, 95.0, 96.0])  # faster once, 0.96x in the median round
    lucky = _result("lucky", [101.0, 50.0, 60.0])  # faster once, far slower in the median round
    slower = _result("slower", [99.0, 97.0, 98.0])  # close, but never faster
    advice = _advice([best, close, lucky, slower])
    assert advice.recommended is best
    assert advice.near_ties == [close]
    assert np.median(advice.ratios_to_recommended(lucky)) < NEAR_TIE
    assert "near tie: close" in str(advice)


def test_without_a_near_tie_the_next_best_is_quoted_with_its_spread():
    advice = _advice([_result("a", [10.0, 12.0]), _result("b", [20.0, 22.0])])
    assert advice.recommended.option.name == "b" and advice.near_ties == []
    assert "next best: a" in str(advice) and "faster in 0 of 2 rounds" in str(advice)


class _FailsInWorkers:
    """A policy that pickles, but raises in a worker process: its rollout workers cannot be measured."""

    def __init__(self) -> None:
        import os

        self.home = os.getpid()

    def __call__(self, observations):
        import os

        if os.getpid() != self.home:
            raise RuntimeError("this policy runs in its own process only")
        return np.zeros(len(observations), dtype=np.int64)


class _LockedPolicy:
    """A policy holding a lock: it runs here, but cannot be pickled into rollout workers."""

    def __init__(self) -> None:
        import threading

        self.lock = threading.Lock()

    def __call__(self, observations):
        return np.zeros(len(observations), dtype=np.int64)
