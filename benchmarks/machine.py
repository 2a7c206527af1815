"""What a benchmark ran on: software versions, CPU, and the accelerator if there is one.

Throughput numbers mean little without the machine they came from, so every
entry point prints this record and stores it in its JSON output.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import platform
import sys
from typing import Any

import gymnasium
import numpy as np

import parallel_rollouts
from parallel_rollouts.processes.slicing import usable_cores

__all__ = ["format_machine_record", "machine_record"]


def _package_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    # /proc/cpuinfo names the model on Linux; platform.processor() is often empty there.
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _affinity_cores() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not offered on macOS or Windows
        return None


def _torch_record() -> dict[str, Any]:
    """PyTorch and CUDA details, or why they are missing; never raises."""
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        return {"torch": None, "cuda_available": False}
    record: dict[str, Any] = {"torch": torch.__version__, "cuda_available": False}
    try:
        if torch.cuda.is_available():
            record.update(
                cuda_available=True,
                cuda_version=torch.version.cuda,
                cuda_device_count=torch.cuda.device_count(),
                cuda_device_name=torch.cuda.get_device_name(0),
            )
    except Exception as error:  # a broken driver should not stop a CPU benchmark
        record["cuda_error"] = f"{type(error).__name__}: {error}"
    return record


def machine_record() -> dict[str, Any]:
    """A JSON-ready description of this machine and software stack."""
    return {
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "numpy": np.__version__,
        "gymnasium": gymnasium.__version__,
        "cython": _package_version("Cython"),
        "parallel_rollouts": parallel_rollouts.__version__,
        "active_core": parallel_rollouts.active_core(),
        "cpu_model": _cpu_model(),
        "logical_cores": os.cpu_count(),
        "affinity_cores": _affinity_cores(),
        "usable_cores": usable_cores(),
        "os": platform.platform(),
        "executable": sys.executable,
        **_torch_record(),
    }


def format_machine_record(record: dict[str, Any]) -> str:
    """The record as aligned ``key: value`` lines."""
    width = max(len(key) for key in record)
    return "\n".join(f"{key:<{width}}  {value}" for key, value in record.items())
