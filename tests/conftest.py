import pytest

from parallel_rollouts.core.selector import compiled_core_error
from tests.leaks import ResourceSnapshot

# Every collector test runs on both cores. The compiled core must be built for
# the suite to pass: a missing extension is a failure, not a skip.
CORES = ["compiled", "python"]


@pytest.fixture(params=CORES)
def core(request):
    if request.param == "compiled" and compiled_core_error() is not None:
        pytest.fail(f"the compiled core is not built: {compiled_core_error()}")
    return request.param


@pytest.fixture
def no_leaks():
    """Fails the test if it leaves a process, shared-memory segment or descriptor of ours behind."""
    snapshot = ResourceSnapshot.take()
    yield
    snapshot.assert_nothing_leaked()


@pytest.fixture
def one_torch_thread():
    """PyTorch on one thread for the test (its default pool makes small batched calls slower and
    competes with the workers for the cores); the previous count is restored after."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
