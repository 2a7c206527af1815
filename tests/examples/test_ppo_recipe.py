"""The PPO recipe and the CleanRL loop it is measured against: the recipe trains on rollout
workers with one update of lag; the CleanRL loop trains the same, bit for bit, whichever vector
env it is given (the one-line swap changes the speed, never the run)."""

from __future__ import annotations

import numpy as np
import pytest

from examples.ppo_recipe import cleanrl_loop, train

pytestmark = pytest.mark.timeout(300)

SHORT = dict(total_timesteps=2 * 4 * 64, num_steps=64, num_envs=4)


def test_the_recipe_trains_on_rollout_workers_with_the_learner_on_the_cores_they_leave(no_leaks):
    result = train.train(train.Args(**SHORT, torch_threads=-1))
    assert result["steps"] == 512 and result["episodes"] > 0 and np.isfinite(result["final_return"])
    assert result["args"]["policy_placement"] == "workers" and result["args"]["max_policy_lag"] == 1
    assert result["torch_threads"] == train.learner_threads(train.Args())


def test_the_recipe_taking_turns_in_this_process_gives_the_same_kind_of_result(one_torch_thread):
    result = train.train(train.Args(**SHORT, backend="sync", max_policy_lag=0, torch_threads=0))
    assert result["steps"] == 512 and result["episodes"] > 0


def test_the_cleanrl_loop_trains_identically_on_every_vector_env(one_torch_thread, no_leaks):
    runs = {
        kind: cleanrl_loop.train(cleanrl_loop.Args(**SHORT, vector_env=kind, torch_threads=1))
        for kind in cleanrl_loop.VECTOR_ENVS
    }
    reference = runs["SyncVectorEnv"]
    assert reference["episodes"] > 0
    for kind, run in runs.items():
        assert (run["episodes"], run["final_return"]) == (reference["episodes"], reference["final_return"]), kind


def test_help_shows_the_quick_run(capsys):
    with pytest.raises(SystemExit):
        train.main(["--help"])
    assert f"quick run: {train.QUICK_RUN}" in " ".join(capsys.readouterr().out.split())
