"""Smoke tests of the benchmark entry points: each runs at tiny sizes and writes what it promises.

Nothing here asserts a speed; these catch benchmarks that crash, drop a
contender, or write JSON without the fields the reports are read from.
"""

from __future__ import annotations

import json
import pickle
import warnings

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from benchmarks import (
    core_microbench,
    env_timing_overhead,
    instruction_counts,
    policy_inputs,
    report,
    run_rollout_benchmark,
    soak,
    step_overhead,
    step_profile,
    straggler_plot,
    vector_envs,
    vector_row_profile,
)
from benchmarks.contenders import COLLECTOR_CONTENDERS, PEER_CONTENDERS, unavailable_reason
from benchmarks.workloads import WORKLOADS

THROUGHPUT_KEYS = {"median", "min", "max", "best", "spread", "samples"}


def _load(path):
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_workload_env_pickles_passes_env_checker_and_accepts_its_policy(name):
    workload = WORKLOADS[name]
    env = pickle.loads(pickle.dumps(workload.env_factory))()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the checker warns about render modes these envs lack
        check_env(env.unwrapped, skip_render_check=True)
    observation, _ = env.reset(seed=3)
    if isinstance(observation, dict):
        batched = {key: np.stack([value, value]) for key, value in observation.items()}
    else:
        batched = np.stack([observation, observation])
    actions = workload.policy(batched)
    assert len(actions) == 2
    assert all(env.action_space.contains(action) for action in actions)
    env.close()


@pytest.mark.parametrize("backend", ["serial", "sync", "async"])
def test_single_backend_run_writes_positive_throughput(backend, tmp_path):
    path = tmp_path / "single.json"
    exit_code = run_rollout_benchmark.main(
        ["--backend", backend, "--num-envs", "2", "--env", "cartpole", "--quick", "--json", str(path)]
    )
    assert exit_code == 0
    report = _load(path)
    assert {"machine", "settings", "result"} <= report.keys()
    assert report["settings"]["backend"] == backend
    assert report["settings"]["core"] in ("compiled", "python")
    rates = report["result"]["transitions_per_s"]
    assert THROUGHPUT_KEYS <= rates.keys()
    assert rates["min"] > 0
    assert len(rates["samples"]) == report["settings"]["repeats"]
    assert report["result"]["transitions_per_collect"] == 2 * report["settings"]["horizon"]


def test_compare_mode_reports_every_contender_against_the_reference(tmp_path):
    out = tmp_path / "results"
    everything = ",".join(tuple(COLLECTOR_CONTENDERS) + PEER_CONTENDERS)
    exit_code = run_rollout_benchmark.main(
        ["--compare", "--quick", "--envs", "cartpole", "--num-envs-list", "2", "--contenders", everything,
         "--out", str(out), "--plot"]
    )
    assert exit_code == 0
    result = _load(out / "comparison.json")
    assert {"machine", "settings", "groups"} <= result.keys()
    (group,) = result["groups"]
    assert (group["env"], group["num_envs"]) == ("cartpole", 2)
    workload = WORKLOADS["cartpole"]
    # An optional contender is skipped only when it cannot run here, and then says why.
    expected_skips = {name for name in PEER_CONTENDERS if unavailable_reason(name, workload) is not None}
    assert set(group["skipped"]) == expected_skips
    assert set(group["contenders"]) == set(COLLECTOR_CONTENDERS).union(PEER_CONTENDERS) - expected_skips
    for entry in group["contenders"].values():
        assert THROUGHPUT_KEYS <= entry["transitions_per_s"].keys()
        assert entry["transitions_per_s"]["min"] > 0
        assert entry["useful_transitions_per_s"]["min"] > 0
        assert entry["ratio_vs_reference"]["median"] > 0
        assert len(entry["ratio_vs_reference"]["per_round"]) == group["rounds"]
        assert entry["processes"] >= 1
    for mode in ("async/reuse", "async/pipelined", "async/workers"):
        assert group["contenders"][mode]["ratio_vs_async"]["median"] > 0
    assert group["contenders"]["bare-loop"]["useful_fraction"] == 1.0
    # Every contender is set against each hand-written reference loop; single-process ones
    # also report their CPU time per transition.
    for name, entry in group["contenders"].items():
        assert set(entry["ratios"]) == {"hand-loop", "hand-loop-reseeding", "bare-loop"}
        assert all(ratio["median"] > 0 for ratio in entry["ratios"].values())
        assert ("cpu_seconds_per_transition" in entry) == (entry["processes"] == 1), name
    assert group["contenders"]["hand-loop"]["cpu_seconds_per_transition"]["median"] > 0
    assert 0 < group["contenders"]["gym-sync"]["useful_fraction"] <= 1.0
    assert group["contenders"]["gym-async"]["processes"] == 3
    assert "| contender |" in (out / "comparison.md").read_text(encoding="utf-8")
    assert (out / "comparison.png").stat().st_size > 0


@pytest.mark.parametrize("name", ["half_ms", "image", "dict_obs", "vr_edge_cheap", "costly_policy"])
def test_compare_mode_runs_each_workload_through_the_in_process_contenders(name, tmp_path):
    path = tmp_path / "compare.json"
    contenders = "sync,sync/python,gym-sync,bare-loop,hand-loop,hand-loop-reseeding"
    run_rollout_benchmark.main(
        ["--compare", "--quick", "--envs", name, "--contenders", contenders, "--horizon", "4",
         "--out", str(tmp_path), "--json", str(path)]
    )
    (group,) = _load(path)["groups"]
    assert group["env"] == name
    assert all(entry["transitions_per_s"]["min"] > 0 for entry in group["contenders"].values())


def test_core_microbench_times_both_cores_for_every_case(tmp_path):
    path = tmp_path / "core.json"
    assert core_microbench.main(["--quick", "--repeats", "2", "--json", str(path)]) == 0
    report = _load(path)
    assert {"machine", "settings", "cases"} <= report.keys()
    cases = {(case["dtype"], tuple(case["shape"]), case["source"]) for case in report["cases"]}
    assert cases == (
        {(dtype, core_microbench.SMALL_SHAPE, "exact") for dtype in core_microbench.DTYPES}
        | {(dtype, core_microbench.LARGE_SHAPE, "exact") for dtype in core_microbench.LARGE_DTYPES}
        | set(core_microbench.SLOW_PATH_CASES)
    )
    for case in report["cases"]:
        assert case["compiled_us_per_step"] > 0
        assert case["python_us_per_step"] > 0
        assert case["speedup"] > 0


def test_soak_samples_the_process_tree_and_keeps_descriptors_flat(tmp_path):
    path = tmp_path / "soak.json"
    exit_code = soak.main(["--collects", "20", "--sample-every", "10", "--horizon", "8", "--json", str(path)])
    report = _load(path)
    assert [sample["collects"] for sample in report["samples"]] == [1, 10, 20]
    for sample in report["samples"]:
        assert sample["rss_bytes"] > 0
        assert sample["fds"] > 0
        assert sample["processes"] >= 3  # this process and two workers
    verdict = report["verdict"]
    assert exit_code == (0 if verdict["passed"] else 1)
    assert verdict["fds_ok"], f"the async backend's process tree gained {verdict['fd_growth']} descriptors"


def test_compare_mode_by_default_writes_to_the_working_directory_and_says_where(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    run_rollout_benchmark.main(
        ["--compare", "--quick", "--envs", "cartpole", "--contenders", "sync,gym-sync", "--horizon", "4"]
    )
    out = tmp_path / "benchmark-results"
    assert sorted(path.name for path in out.iterdir()) == ["comparison.json", "comparison.md"]
    printed = capsys.readouterr().out
    assert f"wrote {out / 'comparison.json'}, {out / 'comparison.md'}" in printed


def test_targets_are_per_round_ratios_judged_against_their_threshold():
    def group(env, rates):
        return {"env": env, "num_envs": 16, "contenders": {
            name: {"transitions_per_s": {"samples": samples}} for name, samples in rates.items()}}

    result = {"groups": [
        group("cartpole", {"sync": [90.0, 100.0, 50.0], "hand-loop": [100.0, 100.0, 100.0], "async/workers": [200.0, 100.0, 160.0]}),
        group("costly_policy", {"async": [10.0, 10.0, 10.0], "async/pipelined": [15.0, 13.0, 14.0]}),
    ]}
    rows = {row["label"]: row for row in report.target_rows(result)}
    sync_row = rows["sync vs the hand loop, CartPole"]
    assert (sync_row["median"], sync_row["min"], sync_row["max"], sync_row["met"]) == (0.9, 0.5, 1.0, False)
    # A reference that did not run gives no row.
    assert "sync vs the reseeding hand loop, CartPole" not in rows
    workers_row = rows["rollout workers (2) vs the hand loop, CartPole"]
    assert (workers_row["median"], workers_row["met"]) == (1.6, True)
    assert rows["pipelined vs default async, policy costing one env step per row"]["met"] is True
    # Workloads that were not run report no target.
    assert not any("frames" in label or "0.5 ms" in label for label in rows)
    assert "| rollout workers (2) vs the hand loop, CartPole" in "\n".join(report.targets_markdown(result))


def test_vector_env_benchmark_reports_its_groups_and_the_targets_they_carry(tmp_path):
    path = tmp_path / "vector_envs.json"
    vector_envs.main(
        ["--rounds", "1", "--warmup", "0", "--groups", "source_cartpole_1024", "cartpole_vector_step_cost", "--output", str(path)]
    )
    document = _load(path)
    assert {"machine", "settings", "load_average", "targets", "groups"} <= document.keys()
    groups = {group["group"]: group for group in document["groups"]}
    assert set(groups) == {"source_cartpole_1024", "cartpole_vector_step_cost"}
    assert set(groups["source_cartpole_1024"]["throughputs"]) == {
        "bare loop", "collector sync", "collector sync reuse_buffers"
    }
    for group in groups.values():
        for throughput in group["throughputs"].values():
            assert throughput["median"] > 0
    # Only the targets of the groups that ran, each judged against its threshold.
    assert [entry["ratio"] for entry in document["targets"]] == [
        "collector sync / bare loop", "collector sync reuse_buffers / bare loop"
    ]
    for entry in document["targets"]:
        assert entry["met"] == (entry["median"] >= entry["target"])


def test_step_overhead_measures_each_contender_in_its_own_process(tmp_path):
    path = tmp_path / "step_overhead.json"
    step_overhead.main([
        "--workloads", "cartpole", "--num-envs", "2", "--horizon", "8", "--collects", "1", "--rounds", "1",
        "--contenders", "raw-loop", "sync", "--out", str(path),
    ])
    report = _load(path)
    summary = report["workloads"]["cartpole"]
    assert set(summary) == {"raw-loop", "sync"}
    for entry in summary.values():
        assert entry["median"] > 0 and len(entry["samples"]) == 1
    assert summary["raw-loop"]["median_of_round_ratios"] == 1.0


@pytest.mark.parametrize("mode", ["kernel", "inprocess"])
def test_timing_overhead_writes_a_ratio_per_round(mode, tmp_path):
    path = tmp_path / "timing.json"
    sizes = ["--rounds", "3", "--horizon", "8", "--collects", "1", "--kernel-steps", "50"]
    assert env_timing_overhead.main(["--mode", mode, *sizes, "--out", str(path)]) == 0
    result = _load(path)
    assert len(result["rounds"]) == 3 and "machine" in result
    assert all(row["timed"] > 0 and row["untimed"] > 0 and row["ratio"] > 0 for row in result["rounds"])


def test_policy_inputs_benchmark_sets_copies_against_real_views_of_the_batch(tmp_path):
    leaves = [np.arange(24, dtype=np.float32).reshape(3, 2, 4)]
    views = policy_inputs.ViewRows()(leaves, 1)
    # The "before" side is the zero-copy rows: views of the batch, not copies.
    assert np.shares_memory(views[0], leaves[0]) and not views[0].flags.writeable
    path = tmp_path / "policy_inputs.json"
    assert policy_inputs.main(["--quick", "--envs", "cartpole", "--modes", "sync,async", "--out", str(path)]) == 0
    result = _load(path)
    (group,) = result["groups"]
    assert "machine" in result and set(group["modes"]) == {"sync", "async"}
    for entry in group["modes"].values():
        assert len(entry["copies_vs_views"]["per_round"]) == 2 and entry["copies_vs_views"]["median"] > 0
        assert set(entry["copies_transitions_per_s"]) == THROUGHPUT_KEYS


def test_straggler_plot_finds_the_slow_env_and_writes_the_picture(tmp_path):
    path = tmp_path / "straggler.png"
    assert straggler_plot.main(["--horizon", "20", "--out", str(path)]) == straggler_plot.SLOW_ENV
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_advisor_check_runs_the_advisor_and_the_separate_benchmark(tmp_path):
    from benchmarks import advisor_check

    path = tmp_path / "advisor_check.json"
    assert advisor_check.main(["--quick", "--envs", "cheap", "--num-envs", "2", "--horizon", "8", "--out", str(path)]) == 0
    result = _load(path)
    entry = result["envs"]["cheap"]
    assert entry["verdict"] in ("winner", "within spread", "miss")
    assert entry["recommended"] == entry["advice"]["recommended"]
    labels = {option["label"] for option in entry["advice"]["options"]}
    assert {benchmarked["label"] for benchmarked in entry["benchmark"]} == labels
    assert all(len(benchmarked["rates"]) == 2 and benchmarked["min"] > 0 for benchmarked in entry["benchmark"])


def test_step_profile_splits_a_transition_and_times_the_null_env(tmp_path):
    path = tmp_path / "profile.json"
    step_profile.main(
        ["--num-envs", "2", "--horizon", "4", "--rounds", "1", "--profile-collects", "1", "--top", "5",
         "--null-env-counts", "1,2", "--output", str(path)]
    )
    document = _load(path)
    parts = document["parts"]["us_per_transition"]
    assert {"hand-loop", "hand-loop-reseeding", "sync", "env.step", "policy", "reset()", "reset(seed)"} <= parts.keys()
    assert all(value >= 0 for value in parts.values())
    assert set(document["parts"]["overhead_us_per_transition"]) == {"hand-loop", "hand-loop-reseeding", "sync"}
    assert 0 < len(document["sync_profile"]) <= 5
    assert set(document["null_env"]) == {"1", "2"}


def test_vector_row_profile_splits_both_rows_and_puts_back_what_it_clocked(tmp_path):
    from parallel_rollouts.groups.vector_source import VectorEnvGroup
    from parallel_rollouts.policy.output import PolicyOutputWriter
    from parallel_rollouts.policy.loop import RolloutLoop

    clocked = (VectorEnvGroup.begin, VectorEnvGroup.step, PolicyOutputWriter.write, RolloutLoop.run)
    path = tmp_path / "vector_rows.json"
    vector_row_profile.main(["--num-envs", "64", "--horizon", "8", "--rounds", "1", "--part-collects", "2", "--output", str(path)])
    document = _load(path)
    assert (VectorEnvGroup.begin, VectorEnvGroup.step, PolicyOutputWriter.write, RolloutLoop.run) == clocked
    for loops in (document["cartpole_vector"], document["null_vector"]):
        assert set(loops["us_per_row"]) == {"bare loop", "sync"} and all(v > 0 for v in loops["us_per_row"].values())
    assert set(document["bare_parts"]) == {"policy", "action store", "env.step", "stores of observations, rewards and flags", "total"}
    sync_parts = document["sync_parts"]
    assert {"policy", "action check and store", "env.step", "compiled row (record)", "per-collect work outside the rows"} < sync_parts.keys()
    assert sync_parts["env.step"] > 0 and sync_parts["compiled row (record)"] > 0 and sync_parts["policy"] > 0


@pytest.mark.parametrize("contender", instruction_counts.CONTENDERS)
def test_instruction_counts_child_collects_each_contender_on_each_workload(contender):
    # The valgrind runs themselves take minutes; this covers what runs under them.
    for workload in instruction_counts.WORKLOADS:
        collect = instruction_counts._make_collect(workload, contender, num_envs=2, horizon=4, seed=0)
        assert collect() == 8


def test_instruction_counts_reads_callgrind_total_and_ratios_against_both_hand_loops():
    stderr = "==12== Events    : Ir\n==12== Collected : 1234567\n==12==\n==12== I   refs:      1,234,567\n"
    assert instruction_counts.collected_instructions(stderr) == 1234567
    assert instruction_counts.collected_instructions("valgrind: command not found") is None
    rows = [
        {"workload": "cartpole", "contender": "hand-loop", "instructions_per_transition": 100.0},
        {"workload": "cartpole", "contender": "hand-loop-reseeding", "instructions_per_transition": 110.0},
        {"workload": "cartpole", "contender": "sync", "instructions_per_transition": 80.0},
    ]
    ratios = {(r["contender"], r["reference"]): r["reference_over_contender"] for r in instruction_counts._ratios(rows)}
    assert ratios[("sync", "hand-loop")] == pytest.approx(1.25)
    assert ratios[("sync", "hand-loop-reseeding")] == pytest.approx(1.375)
    assert ratios[("hand-loop", "hand-loop-reseeding")] == pytest.approx(1.1)
    assert ("hand-loop", "hand-loop") not in ratios


def test_instruction_counts_refuses_an_unknown_name_before_counting_anything(capsys):
    with pytest.raises(SystemExit):
        instruction_counts.main(["--workloads", "cartpole", "--contenders", "sync,no-such-loop"])
    assert "no-such-loop" in capsys.readouterr().err
