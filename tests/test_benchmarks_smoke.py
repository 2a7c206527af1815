"""Smoke tests of the benchmark entry points: each runs at tiny sizes and writes what it promises.

Nothing here asserts a speed; these catch benchmarks that crash, drop a
contender, or write JSON without the fields the reports are read from.
"""

from __future__ import annotations

import importlib.util
import json
import pickle
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from benchmarks import core_microbench, per_step, report, run_rollout_benchmark, soak, training_loop, vector_envs
from benchmarks.contenders import COLLECTOR_CONTENDERS, PEER_CONTENDERS, unavailable_reason
from benchmarks.envs import SlowStep
from benchmarks.workloads import STRAGGLER_EVERY, WORKLOADS
from parallel_rollouts.conformance.rounds import round_order, run_rounds, summarize_ratios

ROOT = Path(__file__).resolve().parent.parent
#: The entry points of benchmarks/README.md and their shared modules (the end-to-end training
#: loops, benchmarks/training_loop.py, made it 13).
MAX_BENCHMARK_MODULES = 13

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


def test_workers_sweep_sets_k_workers_against_k_loops_in_shared_memory(tmp_path):
    from parallel_rollouts.processes.slicing import usable_cores

    out = tmp_path / "results"
    exit_code = run_rollout_benchmark.main(
        ["--compare", "--quick", "--envs", "image", "--num-envs-list", "4", "--contenders", "hand-loop",
         "--workers-sweep", "--out", str(out)]
    )
    assert exit_code == 0
    result = _load(out / "comparison.json")
    (group,) = result["groups"]
    ks = [1]
    while ks[-1] * 2 <= min(usable_cores(), 4):
        ks.append(ks[-1] * 2)
    expected = {"hand-loop"} | {f"hand-loop/shm/{k}" for k in ks if k > 1}
    expected |= {f"async/workers/{k}" for k in ks} | {f"async/{k}" for k in ks}
    assert set(group["contenders"]) == expected
    assert all(group["contenders"][f"async/{k}"]["processes"] == k + 1 for k in ks)
    rows = {(row["k"], row["contender"]): row for row in result["workers_sweep"]}
    assert set(rows) == {(k, name) for k in ks for name in (f"async/workers/{k}", f"async/{k}")}
    assert all(row["median"] > 0 and row["reference"] == ("hand-loop" if row["k"] == 1 else f"hand-loop/shm/{row['k']}")
               for row in rows.values())


def test_k_loops_in_shared_memory_fill_the_whole_rollout_and_unlink_their_segments():
    from multiprocessing import shared_memory

    from benchmarks.contenders import make_contender

    loops = make_contender("hand-loop/shm/2", WORKLOADS["image"], 3, 4, 0)
    names = [segment.name for segment in loops._segments]
    try:
        loops.arrays["observations"][:] = 0
        assert loops.collect() == 3 * 4
        # Both processes wrote their columns: every env's frames are the env's, never the zeros left.
        assert all(loops.arrays["observations"][:, column].any() for column in range(3))
    finally:
        loops.close()
    for name in names:
        with pytest.raises(FileNotFoundError):
            shared_memory.SharedMemory(name=name)


@pytest.mark.parametrize("name", ["half_ms", "image", "dict_obs", "vr_edge_cheap", "costly_policy", "straggler"])
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


def test_core_microbench_times_a_recurrent_policy_s_state_against_the_policy(tmp_path):
    path = tmp_path / "recurrent.json"
    assert core_microbench.main(["--recurrent", "--quick", "--repeats", "2", "--json", str(path)]) == 0
    result = _load(path)["recurrent"]
    assert result["num_envs"] == 16 and result["rounds"] == 2
    assert set(result["us_per_row"]) == set(core_microbench.RECURRENT_CONTENDERS)
    assert all(len(samples) == 2 and min(samples) > 0 for samples in result["samples_us_per_row"].values())
    assert result["bookkeeping_share_of_policy"] > 0 and result["episode_ends_per_row"] > 0


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


def test_the_straggler_workload_slows_every_eighth_column_also_when_split_between_processes():
    straggler = WORKLOADS["straggler"]
    slow = [column for column, factory in enumerate(straggler.env_fns(2 * STRAGGLER_EVERY)) if factory is straggler.straggler_factory]
    assert slow == [0, STRAGGLER_EVERY]
    # The second half of a two-process split starts at column 8, so it holds the straggler at 8.
    second_half = straggler.env_fns(STRAGGLER_EVERY, first_column=STRAGGLER_EVERY)
    assert second_half[0] is straggler.straggler_factory and second_half[1] is straggler.env_factory
    env = straggler.straggler_factory()
    assert isinstance(env, SlowStep) and env.delay_seconds == pytest.approx(0.001)
    env.close()


def test_per_step_times_every_front_door_its_ratios_ppo_and_ready_first_per_round(tmp_path):
    path = tmp_path / "per_step.json"
    sizes = ["--workloads", "null", "--num-envs", "4", "--steps", "4", "--rounds", "2"]
    assert per_step.main([*sizes, "--json", str(path)]) == 0
    report = _load(path)
    (entry,) = report["workloads"]
    assert entry["workload"] == "null" and set(entry["us_per_vector_step"]) == set(per_step.FRONT_DOORS)
    assert all(len(door["per_round"]) == 2 and door["min"] > 0 for door in entry["us_per_vector_step"].values())
    assert set(entry["ratios"]) == set(per_step.RATIOS)
    assert all(len(ratio["per_round"]) == 2 and ratio["min"] > 0 for ratio in entry["ratios"].values())
    assert len(entry["round_trip_us"]["per_round"]) == 2
    ppo = report["ppo_collect_rollouts"]
    assert 0 < ppo["env_share_of_dummy_rollout"] < 1 and ppo["amdahl_bound"] >= 1
    assert len(ppo["ratio sb3 async / DummyVecEnv"]["per_round"]) == 2
    assert len(report["ready_first"]["ratio ready-first / synchronous step"]["per_round"]) == 2
    assert len(report["rollout_workers"]["ratio doorbell / pipes"]["per_round"]) == 2


def test_rounds_rotate_the_order_and_a_failing_contender_sits_out_the_rest():
    assert [round_order(3, index) for index in range(4)] == [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]]
    assert [round_order(3, index, "alternate") for index in range(2)] == [[0, 1, 2], [2, 1, 0]]
    calls = []

    def measure(name):
        calls.append(name)
        if name == "b" and calls.count("b") == 2:
            raise RuntimeError("broke in round 2")
        return float(len(calls))

    rounds = run_rounds(["a", "b", "c"], measure, 3, keep_going=True)
    assert calls == ["a", "b", "c", "b", "c", "a", "c", "a"]
    assert [len(samples) for samples in rounds.samples] == [3, 1, 3]
    assert isinstance(rounds.errors[1], RuntimeError) and rounds.errors[0] is None
    with pytest.raises(RuntimeError, match="broke"):
        calls.clear()
        run_rounds(["a", "b"], measure, 3)
    with pytest.raises(ValueError, match="`rounds` must be an int >= 1"):
        run_rounds(["a"], measure, 0)
    ratio = summarize_ratios([2.0, 3.0, 8.0], [1.0, 3.0, 2.0])
    assert (ratio["median"], ratio["min"], ratio["max"]) == (2.0, 1.0, 4.0)


def _benchmark_modules() -> list[Path]:
    return sorted((ROOT / "benchmarks").glob("*.py"))


def test_benchmarks_stay_a_small_tool_with_one_rounds_loop():
    modules = _benchmark_modules()
    assert len(modules) <= MAX_BENCHMARK_MODULES, (
        f"benchmarks/ holds {len(modules)} modules (at most {MAX_BENCHMARK_MODULES}): turn a one-off "
        "investigation into a dated result file and a section of benchmarks/investigations.md instead."
    )
    # A loop over rounds outside the harness is a second rounds loop: use run_rounds.
    rounds_loop = re.compile(r"for\s+\w+\s+in\s+range\([^)]*\b(rounds|repeats)\b")
    harness = ROOT / "src" / "parallel_rollouts" / "conformance" / "rounds.py"
    offenders = [
        str(path.relative_to(ROOT))
        for path in [*modules, *sorted((ROOT / "src" / "parallel_rollouts").rglob("*.py"))]
        if path != harness and rounds_loop.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == [], f"a second interleaved-rounds loop; use parallel_rollouts.conformance.rounds: {offenders}"


def test_every_result_file_the_readme_and_docs_quote_exists():
    quoted = re.compile(r"benchmarks/results/([\w./-]+\.(?:json|md|png))")
    missing = [
        f"{document.relative_to(ROOT)}: {match.group(0)}"
        for document in [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
        for match in quoted.finditer(document.read_text(encoding="utf-8"))
        if not (ROOT / "benchmarks" / "results" / match.group(1)).is_file()
    ]
    assert missing == []


def test_vector_env_peers_groups_run_every_peer_here_and_skip_a_missing_one_saying_why(tmp_path, monkeypatch):
    def ran(groups, path):
        vector_envs.main(["--quick", "--groups", *groups, "--output", str(path)])
        return {group["group"]: group for group in _load(path)["groups"]}

    labels = [label for label, _, _ in vector_envs.PEERS]
    (cartpole,) = ran(["peers_cartpole_16"], tmp_path / "peers.json").values()
    installed = {label for label, package, _ in vector_envs.PEERS if package is None or importlib.util.find_spec(package)}
    assert set(cartpole["throughputs"]) == installed
    assert set(cartpole["skipped"]) == set(labels) - installed | set(vector_envs.UNMEASURED_PEERS)
    assert all(throughput["median"] > 0 for throughput in cartpole["throughputs"].values())
    assert set(cartpole["ratios"]) == {
        f"{label} / {reference}" for label in installed for reference in vector_envs.PeerGroup.references if label != reference
    }
    # Without TorchRL the group still runs, without its three contenders, and says why.
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None if name == "torchrl" else find_spec(name, *args))
    (half_ms,) = ran(["peers_half_ms_16"], tmp_path / "peers_no_torchrl.json").values()
    torchrl_labels = {label for label, package, _ in vector_envs.PEERS if package == "torchrl"}
    assert set(half_ms["throughputs"]) == installed - torchrl_labels
    assert all(half_ms["skipped"][label] == "torchrl is not installed" for label in torchrl_labels)


def test_training_loop_quick_run_reports_every_contender_against_its_baseline(tmp_path):
    """One round of one iteration per contender, each a fresh process: the report gives each its
    time, its speed-up over its baseline and the cliff statistic."""
    out = tmp_path / "loops.json"
    assert training_loop.main(["--quick", "--contenders", "cleanrl,swap,recipe", "--json", str(out)]) == 0
    entry = json.loads(out.read_text())["workloads"]["cartpole"]
    assert entry["steps"] == 512
    for name in ("cleanrl", "swap", "recipe"):
        record = entry["contenders"][name]
        assert "error" not in record, record.get("error")
        assert len(record["loop_seconds"]) == 2 and record["cliff"] >= 1.0
        assert record["baseline"] == "cleanrl" and len(record["speedup"]["per_round"]) == 2
    # The swap trains the same: same episodes, same returns, whatever the vector env.
    swap, cleanrl = entry["contenders"]["swap"]["runs"][0], entry["contenders"]["cleanrl"]["runs"][0]
    assert (swap["episodes"], swap["final_return"]) == (cleanrl["episodes"], cleanrl["final_return"])
