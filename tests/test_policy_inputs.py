"""No route from the policy's observations to the batch: not NumPy's, not PyTorch's.

Each row handed to a policy must leave nothing writeable within reach (its ``base`` chain,
the exporters of the buffers it was made from). With ``policy_inputs="copies"``,
``torch.from_numpy`` / ``torch.as_tensor`` on it, then an in-place write, must leave the
batch as it would be without; with ``"protected"`` (the default) that write stops the process
before it reaches the batch. Rows a policy keeps must not change under it, later collects
included (with ``reuse_buffers=True``, only ``"copies"`` promises that across collects).
"""

from __future__ import annotations

import copy
import warnings
from functools import partial

import numpy as np
import pytest
import torch
from gymnasium import spaces

from parallel_rollouts import ParallelRolloutCollector
from tests.batch_compare import assert_batches_identical
from tests.envs import CountingEnv, SpaceEnv

HORIZON = 4
DICT_SPACE = spaces.Dict(
    # Rows of 4 x 64 x 64 bytes, large enough for a read-only mirror; the position's rows are copied.
    {"frame": spaces.Box(0, 255, shape=(64, 64), dtype=np.uint8), "position": spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)}
)
ENV_FNS = {
    "box": [partial(CountingEnv, env_id=i, episode_length=3) for i in range(4)],
    "dict": [partial(SpaceEnv, DICT_SPACE, spaces.Discrete(4), max_length=3) for _ in range(4)],
}
#: Frames whose rows (16 KiB for 4 envs) are mapped read-only for the policy by default.
FRAME_SPACE = spaces.Box(0, 255, shape=(64, 64), dtype=np.uint8)
FRAME_FNS = [partial(SpaceEnv, FRAME_SPACE, spaces.Discrete(4), max_length=3) for _ in range(4)]
MODES = {
    "serial": ("serial", {}),
    "sync": ("sync", {}),
    "async": ("async", {"num_workers": 2}),
    "async-pipelined": ("async", {"num_workers": 2, "pipelined": True}),
    "rollout-workers": ("async", {"num_workers": 2, "policy_placement": "workers"}),
}


def writeable_within_reach(row: np.ndarray) -> list:
    """Every object reachable from ``row`` through ``base`` and buffer exporters that can be written.

    An array counts if it is writeable or its write flag can be turned back on (the flag is
    put back); a memoryview if it is not read-only; anything else if it exports a writeable
    buffer, or no buffer at all (a holder of memory this walk cannot judge), unless it
    describes its memory as read-only (``__array_interface__``) and the kernel maps that memory
    without write permission.
    """
    found, seen, pending = [], set(), [row, memoryview(row)]
    while pending:
        holder = pending.pop()
        if holder is None or id(holder) in seen:
            continue
        seen.add(id(holder))
        if isinstance(holder, np.ndarray):
            if holder.flags.writeable:
                found.append(holder)
            else:
                try:
                    holder.flags.writeable = True
                except ValueError:
                    pass
                else:
                    holder.flags.writeable = False
                    found.append(holder)
            pending.append(holder.base)
        elif isinstance(holder, memoryview):
            if not holder.readonly:
                found.append(holder)
            pending.append(holder.obj)
        else:
            try:
                view = memoryview(holder)
            except TypeError:
                if not _kernel_read_only(holder):
                    found.append(holder)
                continue
            if not view.readonly:
                found.append(holder)
            view.release()
    return found


def _kernel_read_only(holder) -> bool:
    """Whether ``holder`` says its memory is read-only and every page of it is mapped so."""
    interface = getattr(holder, "__array_interface__", None)
    if not isinstance(interface, dict) or not interface["data"][1]:
        return False
    address = interface["data"][0]
    size = int(np.prod(interface["shape"])) * np.dtype(interface["typestr"]).itemsize
    return _mapping_permissions(address, size) == "r--s"


def _mapping_permissions(address: int, size: int = 1) -> str:
    """The permissions (``r--s``...) of the mapping that holds ``address .. address + size``."""
    with open("/proc/self/maps", encoding="ascii") as maps:
        for line in maps:
            span, permissions = line.split()[:2]
            start, stop = (int(bound, 16) for bound in span.split("-"))
            if start <= address and address + size <= stop:
                return permissions
    raise AssertionError(f"no one mapping holds {size} bytes at {address:#x}")


def _leaf_rows(observations) -> list[np.ndarray]:
    return list(observations.values()) if isinstance(observations, dict) else [observations]


def _num_envs(observations) -> int:
    return len(_leaf_rows(observations)[0])


class ScribblingPolicy:
    """Checks what it is handed, then (``torch=True``) writes every row through torch; keeps the rows.

    On every call: each row kept from earlier calls (this collect's or an earlier one's) must
    still hold what it held when this policy last saw it; with ``reach=True`` nothing writeable
    may be within reach of the new rows. Then ``torch.from_numpy(row).fill_`` and
    ``torch.as_tensor(row).add_`` write each row in place. Action 1 for every env. It raises on
    a failed check, so it also tells from inside a rollout worker.
    """

    def __init__(self, reach: bool, torch: bool, keep_for_one_collect: bool = False, calls_per_row: int = 1) -> None:
        self.reach, self.torch = reach, torch
        #: Whether rows kept are checked only until the collect (of ``HORIZON`` rows) ends.
        self.keep_for_one_collect = keep_for_one_collect
        self.calls_per_collect = HORIZON * calls_per_row
        self.calls = 0
        self.kept: list[tuple[np.ndarray, np.ndarray]] = []

    def __call__(self, observations):
        if self.keep_for_one_collect and self.calls % self.calls_per_collect == 0:
            self.kept = []
        self.calls += 1
        for row, held in self.kept:
            if not np.array_equal(row, held):
                raise AssertionError(f"a row handed to the policy changed under it: {held!r} became {row!r}")
        for row in _leaf_rows(observations):
            reachable = writeable_within_reach(row) if self.reach else []
            if reachable:
                raise AssertionError(f"writeable objects within reach of a policy row: {[type(h).__name__ for h in reachable]}")
            if self.torch:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)  # torch: "The given NumPy array is not writable"
                    torch.from_numpy(row).fill_(7)
                    torch.as_tensor(row).add_(3)
            self.kept.append((row, row.copy()))
        return np.ones(_num_envs(observations), dtype=np.int64)


def _ones(observations):
    return np.ones(_num_envs(observations), dtype=np.int64)


def _two_batches(fns, policy, backend, options, reuse_buffers):
    with ParallelRolloutCollector(fns, policy, backend, horizon=HORIZON, seed=3, reuse_buffers=reuse_buffers, **options) as collector:
        return [copy.deepcopy(collector.collect()) for _ in range(2)]


@pytest.fixture(scope="module")
def untouched():
    """Two batches per observation kind, collected with a policy that only reads."""
    return {kind: _two_batches(fns, _ones, "serial", {}, False) for kind, fns in {**ENV_FNS, "frames": FRAME_FNS}.items()}


def _collect_and_compare(policy, mode, reuse_buffers, kind, untouched, policy_inputs="protected"):
    backend, options = MODES[mode]
    options = dict(options, policy_inputs=policy_inputs)
    batches = _two_batches({**ENV_FNS, "frames": FRAME_FNS}[kind], policy, backend, options, reuse_buffers)
    for batch, expected in zip(batches, untouched[kind]):
        assert_batches_identical(batch, expected)
    if options.get("policy_placement") != "workers":  # there the policy's checks ran in the workers
        calls_per_row = 2 if options.get("pipelined") else 1
        assert policy.calls == 2 * HORIZON * calls_per_row


def _case_id(mode: str, reuse_buffers: bool, kind: str) -> str:
    return f"{mode}-{'reused' if reuse_buffers else 'fresh'}-{kind}"


CASES_LIST = [(mode, reuse, kind) for mode in MODES for reuse in (False, True) for kind in ENV_FNS]


@pytest.mark.parametrize("policy_inputs", ["protected", "copies"])
@pytest.mark.parametrize("mode, reuse_buffers, kind", CASES_LIST, ids=[_case_id(*case) for case in CASES_LIST])
def test_nothing_writeable_is_within_reach_of_a_policy_row(mode, reuse_buffers, kind, policy_inputs, untouched):
    # Protected rows are the storage's memory, mapped read-only: kept past the collect, they
    # change when that memory is written again. Reused storage is rewritten by the next
    # collect, as the batch is; a rollout worker cannot see what the main process recycles.
    rewritten = reuse_buffers or MODES[mode][1].get("policy_placement") == "workers"
    calls_per_row = 2 if MODES[mode][1].get("pipelined") else 1
    policy = ScribblingPolicy(
        reach=True, torch=False, keep_for_one_collect=rewritten and policy_inputs == "protected", calls_per_row=calls_per_row
    )
    _collect_and_compare(policy, mode, reuse_buffers, kind, untouched, policy_inputs)


@pytest.mark.parametrize(
    "mode, reuse_buffers, kind",
    # Rollout workers with fresh buffers copied each row before; the reach test covers them.
    [case for case in CASES_LIST if case[:2] != ("rollout-workers", False)],
    ids=[_case_id(*case) for case in CASES_LIST if case[:2] != ("rollout-workers", False)],
)
def test_torch_writes_into_copied_policy_rows_reach_neither_the_batch_nor_rows_kept_earlier(mode, reuse_buffers, kind, untouched):
    policy = ScribblingPolicy(reach=False, torch=True)
    _collect_and_compare(policy, mode, reuse_buffers, kind, untouched, "copies")
    if MODES[mode][1].get("policy_placement") != "workers":
        assert all(np.all(row == 10) for row, _ in policy.kept)  # each write landed in that row alone


# policy_inputs="views": the opt-out of the copy. Same batches; the rows are read-only views of
# the batch's own memory; the stated risk is real; a kept row of a fresh batch stays as it was.


VIEW_MODES = [mode for mode in MODES if MODES[mode][1].get("policy_placement") != "workers"]


@pytest.mark.parametrize("kind", sorted(ENV_FNS))
@pytest.mark.parametrize("mode", VIEW_MODES)
def test_views_give_the_same_batches_through_read_only_views_of_the_batch(mode, kind, untouched):
    backend, options = MODES[mode]
    policy = ScribblingPolicy(reach=False, torch=False)  # keeps every row, checks none changed
    with ParallelRolloutCollector(
        ENV_FNS[kind], policy, backend, horizon=HORIZON, seed=3, policy_inputs="views", **options
    ) as collector:
        batches = [collector.collect() for _ in range(2)]
        for batch, expected in zip(batches, untouched[kind]):
            assert_batches_identical(batch, expected)
    # Each row the policy got is a read-only view of its batch's memory: no copy was made.
    rows = [row for row, _ in policy.kept]
    per_batch = len(rows) // 2
    for index, row in enumerate(rows):
        assert not row.flags.writeable
        batch = batches[index // per_batch]
        leaves = list(batch.observations.values()) if isinstance(batch.observations, dict) else [batch.observations]
        assert any(np.shares_memory(row, leaf) for leaf in leaves), f"row {index} is not a view of its batch"


def test_views_let_a_policy_that_writes_its_input_change_the_batch(untouched):
    """The risk the docs state for ``policy_inputs="views"`` is real (and ``"copies"`` has none)."""
    batches = {}
    for policy_inputs in ("copies", "views"):
        with ParallelRolloutCollector(
            ENV_FNS["box"], ScribblingPolicy(reach=False, torch=True), "sync", horizon=HORIZON, seed=3,
            policy_inputs=policy_inputs,
        ) as collector:
            batches[policy_inputs] = collector.collect()
    assert_batches_identical(batches["copies"], untouched["box"][0])
    # Each row t < HORIZON was written to 7 + 3 by the policy, through torch, in the batch itself.
    assert np.all(batches["views"].observations[:HORIZON] == 10)


def test_rows_kept_from_views_of_fresh_batches_never_change():
    """A fresh batch is not recycled while a view the policy kept is alive: kept rows never change."""
    policy = ScribblingPolicy(reach=False, torch=False)  # raises if a kept row changed under it
    with ParallelRolloutCollector(ENV_FNS["box"], policy, "sync", horizon=HORIZON, seed=3, policy_inputs="views") as collector:
        for _ in range(4):
            collector.collect()  # each batch dropped at once: only the policy's views hold them
    assert policy.calls == 4 * HORIZON


@pytest.mark.parametrize("value", ["view", None, True])
def test_policy_inputs_names_its_choices(value):
    from parallel_rollouts.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match=r"`policy_inputs` must be one of \('protected', 'copies', 'views'\); got"):
        ParallelRolloutCollector(ENV_FNS["box"], _ones, "sync", horizon=HORIZON, seed=3, policy_inputs=value)


# policy_inputs="protected" (the default): rows of a second, read-only mapping of the batch.


def _row_permissions(row: np.ndarray) -> str:
    return _mapping_permissions(row.__array_interface__["data"][0], row.nbytes)


@pytest.mark.parametrize("mode", VIEW_MODES)
def test_protected_rows_are_the_batch_itself_through_a_mapping_the_kernel_keeps_read_only(mode, untouched):
    backend, options = MODES[mode]
    rows = []

    def policy(observations):
        rows.append(observations)
        return _ones(observations)

    with ParallelRolloutCollector(FRAME_FNS, policy, backend, horizon=HORIZON, seed=3, **options) as collector:
        batch = collector.collect()
        assert_batches_identical(batch, untouched["frames"][0])
    calls_per_row = len(rows) // HORIZON  # two halves of each row when pipelined
    assert calls_per_row * HORIZON == len(rows)
    for index, row in enumerate(rows):
        # Not a copy: no memory of its own, in pages the kernel maps read-only...
        assert not row.flags.owndata and not row.flags.writeable
        assert _row_permissions(row) == "r--s"
        # ...holding the batch's values (its columns of row t), read through the second mapping.
        expected = batch.observations[index // calls_per_row]
        assert any(np.array_equal(row, expected[start : start + len(row)]) for start in range(len(expected)))
    assert _row_permissions(batch.observations) == "rw-s"


def test_protected_rows_of_reused_storage_follow_the_batch_and_copies_do_not():
    """With ``reuse_buffers=True`` the next collect rewrites the storage: a protected row kept
    from the first collect shows the rewrite (it is that memory, read-only), a copy does not."""
    kept = {}
    for policy_inputs in ("protected", "copies"):
        rows = []

        def policy(observations, rows=rows):
            rows.append(observations)
            return _ones(observations)

        with ParallelRolloutCollector(
            FRAME_FNS, policy, "sync", horizon=HORIZON, seed=3, reuse_buffers=True, policy_inputs=policy_inputs
        ) as collector:
            first = collector.collect().observations.copy()
            collector.collect()
        kept[policy_inputs] = (rows[1], first[1])
    row, first_values = kept["copies"]
    np.testing.assert_array_equal(row, first_values)
    row, first_values = kept["protected"]
    assert not np.array_equal(row, first_values)  # the second collect's frames are new ones


def test_a_torch_write_into_a_protected_row_stops_the_process_and_never_reaches_the_batch(tmp_path):
    """NumPy refuses the write; PyTorch (which only warns) writes a page the kernel maps
    read-only: the process ends with SIGSEGV, the write undone by nothing because none happened."""
    import signal
    import subprocess
    import sys
    import textwrap

    script = tmp_path / "scribble.py"
    script.write_text(textwrap.dedent("""
        import sys, warnings
        import numpy as np, torch
        from gymnasium import spaces
        from parallel_rollouts import ParallelRolloutCollector
        from tests.envs import SpaceEnv

        frames = spaces.Box(0, 255, shape=(128, 128), dtype=np.uint8)  # one env's row: 16 KiB

        def policy(observations):
            try:
                observations.flags.writeable = True
            except ValueError:
                print("numpy refused", flush=True)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                tensor = torch.from_numpy(observations)
            print("writing through torch", flush=True)
            tensor.fill_(7)
            print("the write went through", flush=True)
            return np.ones(len(observations), dtype=np.int64)

        with ParallelRolloutCollector([lambda: SpaceEnv(frames, spaces.Discrete(2))], policy, "sync", horizon=2, seed=0) as collector:
            collector.collect()
    """))
    import os
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[1])
    environment = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    import resource

    def no_core_file() -> None:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=str(tmp_path), env=environment,
        preexec_fn=no_core_file,
    )
    assert result.returncode == -signal.SIGSEGV, (result.returncode, result.stdout, result.stderr)
    assert result.stdout.splitlines() == ["numpy refused", "writing through torch"]


def test_protected_rows_are_copies_where_the_memory_cannot_be_mapped_twice(monkeypatch, untouched):
    from parallel_rollouts.data import batch_memory

    monkeypatch.setattr(batch_memory, "mirrored_empty", lambda shape, dtype: None)
    policy = ScribblingPolicy(reach=True, torch=True)  # copies: the torch writes land in them alone
    _collect_and_compare(policy, "sync", False, "frames", untouched)
    assert all(np.all(row == 10) for row, _ in policy.kept)


class _RequireMappedLargeRows:
    """Raises (inside a rollout worker too) unless the frame rows lie in pages mapped read-only
    and the small rows (a Dict's position) are copies of their own."""

    def __call__(self, observations):
        leaves = observations if isinstance(observations, dict) else {"frame": observations}
        for key, row in leaves.items():
            if key == "frame" and (_row_permissions(row) != "r--s" or row.flags.owndata):
                raise AssertionError(f"frame rows are not the storage mapped read-only: {_row_permissions(row)}")
            if key != "frame" and not isinstance(row.base, bytes):
                raise AssertionError(f"the small rows of {key!r} are not copies: base {type(row.base).__name__}")
        return _ones(observations)


@pytest.mark.parametrize("mode", ["sync", "async", "rollout-workers"])
@pytest.mark.parametrize("kind", ["frames", "dict"])
def test_large_rows_are_mapped_read_only_and_small_rows_copied(kind, mode, untouched):
    backend, options = MODES[mode]
    fns = FRAME_FNS if kind == "frames" else ENV_FNS[kind]
    with ParallelRolloutCollector(fns, _RequireMappedLargeRows(), backend, horizon=HORIZON, seed=3, **options) as collector:
        for expected in untouched[kind]:
            assert_batches_identical(collector.collect(), expected)


def test_a_torch_write_into_small_protected_rows_lands_in_their_copy(untouched):
    """CartPole-sized rows are copied under the default: a policy writing them in place (an
    in-place normalisation) changes its copy, never the batch, and keeps running."""
    policy = ScribblingPolicy(reach=True, torch=True)
    _collect_and_compare(policy, "sync", False, "box", untouched, "protected")
    assert all(np.all(row == 10) for row, _ in policy.kept)


def test_copies_and_views_allocate_no_read_only_mapping():
    for policy_inputs in ("copies", "views"):
        with ParallelRolloutCollector(FRAME_FNS, _ones, "sync", horizon=HORIZON, seed=3, policy_inputs=policy_inputs) as collector:
            assert _row_permissions(collector.collect().observations) != "rw-s"


def test_a_mapping_is_neither_copied_nor_pickled():
    """A copy of the object that unmaps the memory would unmap it under the original's arrays."""
    import pickle

    from parallel_rollouts.data.read_only_mirror import mirrored_empty

    writable, read_only = mirrored_empty((2, 4096), np.uint8)
    mapping = read_only.base.base
    assert copy.copy(mapping) is mapping and copy.deepcopy(mapping) is mapping
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(mapping)
    # Arrays over it copy their data.
    writable[:] = 5
    clone = pickle.loads(pickle.dumps(read_only))
    assert copy.deepcopy(read_only).sum() == clone.sum() == 5 * 2 * 4096


def test_a_mirror_holds_no_file_descriptor_and_nothing_empty_is_mapped():
    import os

    from parallel_rollouts.data.read_only_mirror import mirrored_empty

    assert mirrored_empty((0, 3), np.float32) is None
    before = len(os.listdir("/proc/self/fd"))
    kept = [mirrored_empty((3, 8192), np.uint8) for _ in range(50)]
    assert all(pair is not None for pair in kept)
    assert len(os.listdir("/proc/self/fd")) == before
