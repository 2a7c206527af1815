"""Both cores under the process's other float modes (PyTorch sets them, hence a file of its own:
the Python versions CI runs without PyTorch run the core tests that do not need it)."""

import numpy as np
import pytest
import torch

from tests.test_core_equivalence import CORES, _vector_rows


@pytest.fixture
def denormals_are_zero():
    """The process's float mode with denormals read as zero, as after ``torch.set_flush_denormal(True)``."""
    assert torch.set_flush_denormal(True), "this CPU cannot flush denormals"
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_both_cores_decide_bounds_below_the_least_normal_float32_alike_with_denormals_read_as_zero(dtype, denormals_are_zero):
    """Bounds float32 holds only as subnormals (or not at all) are decided as the float64 check
    decides them under the same float mode, whichever core checks."""
    for low, high in [(1e-40, np.inf), (1e-45, np.inf), (-np.inf, -1e-46), (-np.inf, -1e-40), (-1e-40, 1e-40)]:
        for value in (0.0, 1e-40, -1e-40, 1e-38, -1e-38):
            outcomes = []
            for core in CORES:
                rows, _, _ = _vector_rows(core, 1, 1, "Disabled", [(dtype, (1,))], {0: (np.array([low]), np.array([high]))})
                flags = np.zeros(1, bool)
                outcomes.append(rows.record(0, np.zeros(1), flags, flags.copy(), [np.array([[value]], dtype)], 0.0) < 0)
            assert outcomes[0] == outcomes[1], (low, high, value)
