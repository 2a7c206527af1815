"""Sparsely written zeroed arrays: zero, writable, freed, and kept off huge pages."""

from __future__ import annotations

import gc
import re
import sys
import weakref

import numpy as np
import pytest

from parallel_rollouts.data.sparse_memory import HUGE_PAGE_THRESHOLD_BYTES, sparse_zeros
from parallel_rollouts.data.spaces import SpaceLayout
from parallel_rollouts.data.storage import RolloutStorage

FRAMES = (16, 128, 84, 84, 4)  # 58 MB: numpy would ask for huge pages


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def _mapping_at(address: int) -> tuple[int, list[str]] | None:
    """(start address, VmFlags) of the mapping holding ``address``, from /proc/self/smaps."""
    inside, start = False, 0
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            bounds = re.match(r"^([0-9a-f]+)-([0-9a-f]+) ", line)
            if bounds:
                start = int(bounds.group(1), 16)
                inside = start <= address < int(bounds.group(2), 16)
            elif inside and line.startswith("VmFlags:"):
                return start, line.split()[1:]
    return None


@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.int64, np.bool_])
@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 5), FRAMES[:3] + (84, 4)])
def test_reads_as_zero_like_np_zeros(shape, dtype):
    array = sparse_zeros(shape, dtype)
    assert array.shape == shape and array.dtype == np.dtype(dtype)
    assert array.flags.writeable and array.flags.c_contiguous
    assert not array.any()
    array[(0,) * len(shape)] = 1
    assert array.sum() == 1


def test_small_arrays_are_plain_numpy_allocations():
    array = sparse_zeros((16, 4), np.float32)
    assert array.base is None  # np.zeros owns its data; a mapping would be the base


@pytest.mark.skipif(sys.platform != "linux", reason="/proc/self/smaps and MADV_NOHUGEPAGE are Linux's")
def test_large_arrays_are_mapped_without_huge_pages():
    array = sparse_zeros(FRAMES, np.uint8)
    assert array.nbytes >= HUGE_PAGE_THRESHOLD_BYTES
    _, flags = _mapping_at(_address(array))
    assert "nh" in flags  # the kernel was told: no huge pages for this mapping


@pytest.mark.skipif(sys.platform != "linux", reason="/proc/self/smaps is Linux's")
def test_large_arrays_are_unmapped_with_their_last_view():
    array = sparse_zeros(FRAMES, np.uint8)
    view = array[3]
    owner = weakref.ref(array.base)
    start, _ = _mapping_at(_address(array))
    del array
    gc.collect()
    assert owner() is not None  # a view still holds the memory
    view[0, 0] = 7
    del view
    gc.collect()
    assert owner() is None
    # The no-huge-page mapping is gone (the address may since hold some other mapping).
    mapping = _mapping_at(start)
    assert mapping is None or "nh" not in mapping[1]


def test_rollout_storage_takes_final_observations_from_sparse_zeros():
    from gymnasium import spaces

    layout = SpaceLayout(spaces.Box(0, 255, (84, 84, 4), np.uint8), "observation")
    actions = SpaceLayout(spaces.Discrete(4), "action")
    storage = RolloutStorage.allocate(layout, actions, horizon=128, num_envs=16)
    (final,) = storage.final_observations
    assert final.shape == (128, 16, 84, 84, 4) and not final.any()
    if sys.platform == "linux":
        assert "nh" in _mapping_at(_address(final))[1]
        (observations,) = storage.observations
        assert "nh" not in _mapping_at(_address(observations))[1]  # written in full: huge pages suit it
