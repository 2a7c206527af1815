"""The default number of workers follows the cores this process may use, not the machine's count."""

from __future__ import annotations

import os

import pytest

from parallel_rollouts.processes import slicing
from parallel_rollouts.processes.slicing import cgroup_cpu_quota, resolve_num_workers, usable_cores


def _pin_affinity(monkeypatch, cores: int) -> None:
    # Python 3.13 asks os.process_cpu_count first; older versions the affinity mask.
    monkeypatch.setattr(os, "process_cpu_count", lambda: cores, raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)


def test_cgroup_v2_quota_rounds_up_to_whole_cores(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_quota(tmp_path) == 2
    (tmp_path / "cpu.max").write_text("50000 100000\n")
    assert cgroup_cpu_quota(tmp_path) == 1


def test_cgroup_v2_without_a_quota_says_none(tmp_path):
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_quota(tmp_path) is None


def test_cgroup_v1_quota_and_its_no_quota_marker(tmp_path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("300000\n")
    assert cgroup_cpu_quota(tmp_path) == 3
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_quota(tmp_path) is None


def test_no_cgroup_files_means_no_quota(tmp_path):
    assert cgroup_cpu_quota(tmp_path) is None


def test_usable_cores_is_the_affinity_capped_by_the_quota(monkeypatch, tmp_path):
    _pin_affinity(monkeypatch, 6)
    assert usable_cores(tmp_path) == 6
    (tmp_path / "cpu.max").write_text("200000 100000\n")
    assert usable_cores(tmp_path) == 2
    (tmp_path / "cpu.max").write_text("1600000 100000\n")
    assert usable_cores(tmp_path) == 6


def test_default_num_workers_follows_usable_cores_not_cpu_count(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(slicing, "usable_cores", lambda cgroup_root=None: 3)
    assert resolve_num_workers(None, 16) == 3
    assert resolve_num_workers(None, 2) == 2
    assert resolve_num_workers(5, 16) == 5


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity on this platform")
def test_usable_cores_never_exceeds_this_process_affinity():
    assert 1 <= usable_cores() <= len(os.sched_getaffinity(0))
