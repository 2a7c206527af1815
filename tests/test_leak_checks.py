"""The leak checks count only this process's own children and segments.

Other programs on the machine (another test run, a training job) may use the
library at the same time; their collectors must not make this suite fail.
"""

import os
import subprocess
import sys
import textwrap
import time
from functools import partial

import psutil
import pytest

from parallel_rollouts import ParallelRolloutCollector
from tests.envs import CountingEnv
from tests.leaks import REPO_ROOT, ResourceSnapshot, segment_exists

pytestmark = pytest.mark.timeout(120)

# Holds an async collector open until `stop` exists (or two minutes pass, so that
# it never outlives a crashed test for long), then closes it cleanly.
HOLDER = """
    import os, sys, time
    from functools import partial
    from parallel_rollouts import ParallelRolloutCollector
    from tests.envs import CountingEnv
    if __name__ == "__main__":
        out, stop = sys.argv[1], sys.argv[2]
        with ParallelRolloutCollector([partial(CountingEnv, env_id=i) for i in range(2)], None, "async", horizon=4, seed=0, num_workers=2) as collector:
            collector.collect()
            with open(out + ".tmp", "w") as file:
                file.write(collector._backend.stepper.pool.shared.name)
            os.replace(out + ".tmp", out)
            deadline = time.monotonic() + 120
            while not os.path.exists(stop) and time.monotonic() < deadline:
                time.sleep(0.05)
"""

# Starts HOLDER in its own session and exits, so that the holder is not a
# descendant of the test process: an unrelated program, as far as it can tell.
LAUNCHER = """
    import subprocess, sys
    holder = subprocess.Popen([sys.executable, "-c", sys.argv[1], *sys.argv[2:]], start_new_session=True,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(holder.pid)
"""


def _wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_leak_checks_ignore_another_program_holding_an_async_collector_open(tmp_path):
    out, stop = tmp_path / "segment", tmp_path / "stop"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    snapshot = ResourceSnapshot.take()
    launched = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(LAUNCHER), textwrap.dedent(HOLDER), str(out), str(stop)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60, check=True,
    )
    holder_pid = int(launched.stdout)
    try:
        assert _wait_for(out.exists, 90), "the other program never opened its collector"
        holder_segment = out.read_text()
        assert holder_pid not in {child.pid for child in psutil.Process().children(recursive=True)}
        # This process uses the library too, and releases what it used.
        with ParallelRolloutCollector([partial(CountingEnv, env_id=i) for i in range(2)], None, "async", horizon=4, seed=0, num_workers=2) as collector:
            collector.collect()
        snapshot.assert_nothing_leaked()
        # The other program's segment and workers were there all along: the check saw them and left them out.
        assert segment_exists(holder_segment)
        assert len(psutil.Process(holder_pid).children()) >= 2
    finally:
        stop.touch()
        if not _wait_for(lambda: not psutil.pid_exists(holder_pid), 30):
            os.kill(holder_pid, 9)
