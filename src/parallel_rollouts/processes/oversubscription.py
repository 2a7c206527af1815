"""Said once: PyTorch's threads and the worker processes want more cores than there are.

PyTorch runs its operators on a pool of OpenMP threads, one per core by default, whose
threads wait actively (spin) at every barrier for a while before they sleep. Beside worker
processes that step envs, on a machine without a core to spare for each, those spinning
threads take turns with the workers, and a training loop measured 10-20x slower in some rounds
(``benchmarks/investigations.md``). The library's own waits sleep while the caller computes;
what it can do about PyTorch's is to notice the arithmetic at start-up and say what fixes it.
"""

from __future__ import annotations

import sys
import warnings

from ..core.selector import caller_stacklevel
from ..errors import OversubscriptionWarning
from .slicing import usable_cores

__all__ = ["warn_if_oversubscribed"]

_warned = False


def warn_if_oversubscribed(worker_processes: int) -> None:
    """Warn (once per process) if PyTorch, when imported, runs a pool of more threads than the
    usable cores leave once each of ``worker_processes`` has one."""
    global _warned
    torch = sys.modules.get("torch")
    if _warned or torch is None or worker_processes < 1:
        return
    threads, cores = torch.get_num_threads(), usable_cores()
    # One thread has no barrier to wait at: only a pool of them spins.
    if threads <= 1 or threads + worker_processes <= cores:
        return
    _warned = True
    fits = max(1, cores - worker_processes)
    warnings.warn(
        OversubscriptionWarning(
            f"PyTorch runs its operators on {threads} threads and {worker_processes} worker process"
            f"{'' if worker_processes == 1 else 'es'} step envs, on {cores} usable cores: while your update "
            "runs, PyTorch's threads wait actively for cores the workers hold, and on a busy machine a training "
            f"loop can run many times slower. Call `torch.set_num_threads({fits})` before training (or set "
            "OMP_WAIT_POLICY=PASSIVE before importing torch), or use backend='sync', which starts no processes."
        ),
        stacklevel=caller_stacklevel(),
    )
