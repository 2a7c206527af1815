"""Before the first batch: the batch's memory said before it is allocated, and progress while envs are made."""

from __future__ import annotations

import logging
import pickle
import threading
import warnings
from functools import partial

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from parallel_rollouts import BatchMemoryWarning, ParallelRolloutCollector
from parallel_rollouts.config import build_progress, memory
from parallel_rollouts.config.build_progress import BuildProgress
from parallel_rollouts.data.spaces import SpaceLayout
from parallel_rollouts.data.storage import RolloutStorage, storage_bytes
from tests.envs import SpaceEnv, cartpole

FRAMES = spaces.Box(0, 255, shape=(84, 84, 4), dtype=np.uint8)
NESTED = spaces.Dict({"frame": spaces.Box(0, 255, shape=(6, 5), dtype=np.uint8), "speed": spaces.Box(-1, 1, (3,))})


@pytest.mark.parametrize("observation_space", [FRAMES, NESTED], ids=["frames", "dict"])
def test_storage_bytes_are_the_bytes_allocate_takes(observation_space):
    observation_layout = SpaceLayout(observation_space, "observation")
    action_layout = SpaceLayout(spaces.MultiDiscrete([3, 4]), "action")
    dense, sparse = storage_bytes(observation_layout, action_layout, 7, 5, ("speed", "lap"))
    taken = {"dense": 0, "sparse": 0}

    def counting(kind):
        def allocate(shape, dtype=np.float64):
            array = np.empty(shape, dtype=dtype)
            taken[kind] += array.nbytes
            return array
        return allocate

    storage = RolloutStorage.allocate(
        observation_layout, action_layout, 7, 5, ("speed", "lap"), counting("dense"), counting("sparse")
    )
    assert (dense, sparse) == (taken["dense"], taken["sparse"])
    observation_bytes = sum(array.nbytes for array in storage.observations)
    assert dense > observation_bytes > 0


def test_available_memory_reads_meminfo_and_a_cgroup_limit(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24683664 kB\nMemFree:        1000 kB\nMemAvailable:   2000 kB\n")
    no_cgroup = tmp_path / "no-cgroup"
    assert memory.available_memory(meminfo, no_cgroup) == 2000 * 1024
    cgroup = tmp_path / "cgroup"
    cgroup.mkdir()
    (cgroup / "memory.max").write_text("1500000\n")
    (cgroup / "memory.current").write_text("500000\n")
    assert memory.available_memory(meminfo, cgroup) == 1_000_000  # the container's limit is lower
    (cgroup / "memory.max").write_text("max\n")
    assert memory.available_memory(meminfo, cgroup) == 2000 * 1024
    assert memory.available_memory() is None or memory.available_memory() > 0  # this machine, if it says


def test_a_batch_past_the_available_memory_is_warned_about_with_its_numbers():
    observation_layout, action_layout = SpaceLayout(FRAMES, "observation"), SpaceLayout(spaces.Discrete(4), "action")
    with pytest.warns(BatchMemoryWarning, match=(
        r"one batch of 1,000 envs x horizon 128 needs 3\.4 GiB \(about 28,\d{3} bytes a row: observation 28,224, "
        r"action 8, .*more than the 1\.0 GiB this machine has available.*Lower num_envs or horizon"
    )):
        assert memory.warn_if_batch_too_large(observation_layout, action_layout, 128, 1000, available=2**30)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not memory.warn_if_batch_too_large(observation_layout, action_layout, 128, 10, available=2**30)


class _CountedFrames:
    """A factory of frame envs that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> gym.Env:
        self.calls += 1
        return SpaceEnv(FRAMES, spaces.Discrete(4))


def test_a_collector_warns_before_making_its_envs_when_the_batch_cannot_fit(monkeypatch):
    monkeypatch.setattr(build_progress, "available_memory", lambda: 64 * 2**20)
    monkeypatch.setattr(memory, "available_memory", lambda: 64 * 2**20)
    factory = _CountedFrames()
    with warnings.catch_warnings():
        warnings.simplefilter("error", BatchMemoryWarning)
        with pytest.raises(BatchMemoryWarning, match="one batch of 2,000 envs x horizon 16 needs 916.2 MiB .* than the 64.0 MiB"):
            ParallelRolloutCollector([factory] * 2000, None, "sync", horizon=16, seed=0)
    assert factory.calls == 1  # only the env that read the spaces: the 2,000 were never made


def test_a_collector_of_few_envs_warns_once_its_spaces_are_known(monkeypatch):
    monkeypatch.setattr(build_progress, "available_memory", lambda: 4 * 2**20)
    monkeypatch.setattr(memory, "available_memory", lambda: 4 * 2**20)
    factory = _CountedFrames()
    with pytest.warns(BatchMemoryWarning, match="one batch of 8 envs x horizon 32 needs") as caught:
        collector = ParallelRolloutCollector([factory] * 8, None, "sync", horizon=32, seed=0)
    collector.close()
    assert len(caught) == 1 and factory.calls == 8  # no env made only to size the batch
    assert caught[0].filename == __file__  # the warning points at the user's line


def test_a_given_vector_env_is_sized_without_making_anything(monkeypatch):
    monkeypatch.setattr(build_progress, "available_memory", lambda: 2**10)
    vector_env = gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="vector_entry_point")
    with pytest.warns(BatchMemoryWarning, match="one batch of 4 envs x horizon 64"):
        collector = ParallelRolloutCollector(vector_env, None, "sync", horizon=64, seed=0)
    collector.close()


def test_a_collector_that_fits_says_nothing(recwarn):
    with ParallelRolloutCollector([cartpole] * 4, None, "sync", horizon=8, seed=0) as collector:
        collector.collect()
    assert not [w for w in recwarn if issubclass(w.category, BatchMemoryWarning)]


class _LineSeen(logging.Handler):
    def __init__(self, text: str) -> None:
        super().__init__(logging.INFO)
        self.text = text
        self.seen = threading.Event()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()
        self.lines.append(line)
        if self.text in line:
            self.seen.set()


def _waits_for(seen: threading.Event, index: int) -> gym.Env:
    if index == 1:  # the second env is made only once a progress line said the first was
        assert seen.wait(timeout=60), "no progress line while the envs were made"
    return cartpole()


def test_making_envs_in_this_process_logs_how_many_are_made(monkeypatch):
    monkeypatch.setattr(build_progress, "REPORT_EVERY_SECONDS", 0.05)
    handler = _LineSeen("made 1 of 3 envs")
    logger = logging.getLogger("parallel_rollouts")
    logger.addHandler(handler)
    previous = logger.level
    logger.setLevel(logging.INFO)
    try:
        factories = [partial(_waits_for, handler.seen, index) for index in range(3)]
        with ParallelRolloutCollector(factories, None, "sync", horizon=4, seed=0) as collector:
            collector.collect()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
    assert handler.seen.is_set()
    assert any(line.startswith("made 3 envs in this process in ") for line in handler.lines), handler.lines
    assert not [thread for thread in threading.enumerate() if thread.name == "parallel-rollouts-build-progress"]


def test_many_envs_announce_the_build_and_a_failed_build_stops_the_progress_lines(caplog):
    def fails():
        raise RuntimeError("no env today")

    with caplog.at_level(logging.INFO, logger="parallel_rollouts"):
        with pytest.raises(Exception, match="no env today"):
            ParallelRolloutCollector([fails] * build_progress.MANY_ENVS, None, "sync", horizon=2, seed=0)
    messages = [record.getMessage() for record in caplog.records]
    assert f"making {build_progress.MANY_ENVS:,} envs in this process" in messages
    assert not any(message.startswith(f"made {build_progress.MANY_ENVS:,} envs") for message in messages)
    assert not [thread for thread in threading.enumerate() if thread.name == "parallel-rollouts-build-progress"]


def test_a_counted_factory_pickles_as_the_factory_it_wraps():
    progress = BuildProgress(1, "in this process", counted=True)
    try:
        (wrapped,) = progress.wrap([cartpole])
        assert pickle.loads(pickle.dumps(wrapped)) is cartpole
        wrapped().close()
        assert progress.made == 1
    finally:
        progress.done()
