"""Leak checks for the tests: child processes, shared-memory segments, file descriptors."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
from multiprocessing import resource_tracker

from parallel_rollouts.processes.shared_memory import SEGMENT_PREFIX

SHM_DIR = Path("/dev/shm")
REPO_ROOT = Path(__file__).resolve().parent.parent


def segments_of(pid: int) -> set[str]:
    """Names of the shared-memory segments that process ``pid`` created and that still exist.

    The library names each segment after the process that creates it, so that
    counting this process's own never counts another program's collectors.
    """
    if not SHM_DIR.exists():
        return set()
    prefix = f"{SEGMENT_PREFIX}{pid}_"
    return {path.name for path in SHM_DIR.iterdir() if path.name.startswith(prefix)}


def our_segments() -> set[str]:
    """This test process's own segments."""
    return segments_of(os.getpid())


def segment_exists(name: str) -> bool:
    return (SHM_DIR / name).exists()


def _children() -> set[int]:
    """Live child processes, leaving out multiprocessing's long-lived resource tracker."""
    result = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            if "resource_tracker" in " ".join(child.cmdline()):
                continue
        except psutil.NoSuchProcess:
            continue
        result.add(child.pid)
    return result


def descendants_of(pid: int) -> set[int]:
    """The live processes below ``pid``, at any depth."""
    return {child.pid for child in psutil.Process(pid).children(recursive=True) if child.status() != psutil.STATUS_ZOMBIE}


def still_running(pids, timeout: float = 30.0) -> list[int]:
    """Those of ``pids`` still running (zombies count as gone) once they have all gone or ``timeout`` passed.

    For processes that are no longer this process's descendants (orphans adopted by init),
    which ``ResourceSnapshot`` cannot see.
    """
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > deadline:
            return sorted(alive)
        time.sleep(0.05)


@dataclass
class ResourceSnapshot:
    children: set[int]
    segments: set[str]
    fds: int

    @classmethod
    def take(cls) -> ResourceSnapshot:
        # The resource tracker starts once per process and keeps one pipe open for
        # good; start it first so that it is part of every baseline.
        resource_tracker.ensure_running()
        return cls(_children(), our_segments(), psutil.Process().num_fds())

    def assert_nothing_leaked(self, timeout: float = 30.0) -> None:
        """Wait (bounded) for the process tree to return to this snapshot, else fail.

        Returns as soon as it has; the bound only has to outlast a loaded machine.
        """
        deadline = time.monotonic() + timeout
        while True:
            # Cyclic garbage (an exception's traceback holding frames that hold arrays
            # viewing shared memory) is not a leak: collect it before counting.
            gc.collect()
            now = ResourceSnapshot.take()
            new_children = now.children - self.children
            new_segments = now.segments - self.segments
            extra_fds = now.fds - self.fds
            if not new_children and not new_segments and extra_fds <= 0:
                return
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"leaked: child processes {sorted(new_children)}, segments {sorted(new_segments)}, "
                    f"{extra_fds} extra file descriptors"
                )
            time.sleep(0.05)


def run_script(body: str, timeout: float = 60.0, **popen_kwargs) -> subprocess.CompletedProcess:
    """Run ``body`` as a fresh Python program from the repository root."""
    code = textwrap.dedent(body)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout, **popen_kwargs
    )


def assert_no_resource_tracker_warning(stderr: str) -> None:
    for marker in ("resource_tracker", "leaked shared_memory", "leaked semaphore"):
        assert marker not in stderr, f"resource-tracker warning on stderr:\n{stderr}"
