"""A real `ray start --head` for tests that stops only itself, so two test runs can share one machine."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

from tunebench.execution.launchers.base import free_port

RAY_CLI = [sys.executable, "-m", "ray.scripts.scripts"]


@contextlib.contextmanager
def ray_head(env: dict[str, str], timeout: float = 180) -> Iterator[str]:
    """Start a head node, yield its address, stop it. Not `ray stop`: that kills every Ray process of this user on
    the machine (a second CI job's clusters included). `--block` keeps the head's processes tied to one process
    group of our own (they die with it), and every port a second head would also want by default is a free one.
    """
    port = free_port()
    temp_dir = tempfile.mkdtemp(prefix="rayh")  # short: Ray's socket paths live under it (108-byte limit)
    command = [*RAY_CLI, "start", "--head", "--block", "--port", str(port), "--num-cpus", "2",
               "--temp-dir", temp_dir, "--include-dashboard", "false",
               "--dashboard-agent-listen-port", str(free_port())]  # (a minimal Ray starts no client server)
    log = open(os.path.join(temp_dir, "head.log"), "w+")  # noqa: SIM115 (read back while the head runs)
    head = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while "Ray runtime started" not in open(log.name).read():
            if head.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"ray start --head did not start:\n{open(log.name).read()[-3000:]}")
            time.sleep(0.5)
        yield f"127.0.0.1:{port}"
    finally:
        _stop(head)
        left = _leftovers(temp_dir)
        log.close()
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert left == [], f"the head left processes behind: {left}"


def _stop(head: subprocess.Popen) -> None:
    """SIGTERM lets `ray start --block` take its processes down; SIGKILL the group for whatever did not go."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(head.pid, signal.SIGTERM)
    try:
        head.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(head.pid, signal.SIGKILL)
    head.wait()


def _leftovers(temp_dir: str, grace: float = 30) -> list[str]:
    """Processes of this head still alive after `grace` s (killed, then reported). Its children die by PDEATHSIG
    as it goes, which takes a moment on a loaded machine."""
    deadline = time.monotonic() + grace
    while True:
        left = subprocess.run(["pgrep", "-f", temp_dir], capture_output=True, text=True).stdout.split()
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    for pid in left:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    return left
