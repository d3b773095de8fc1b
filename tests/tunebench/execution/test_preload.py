"""tunebench/execution/preload.py: the preload server starts under a temporary directory whose path is too long for a
socket's address, and leaves nothing behind (issue AD: nothing the harness starts leaves a folder behind)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.harness import REPO
from tunebench.execution.preload import SOCKET_PATH_MAX, SOCKET_SUFFIX

WARM = ("from multiprocessing import util; from tunebench.execution.preload import PreloadServer; "
        "PreloadServer().warm(); print(util.get_temp_dir())")


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
def test_a_temporary_directory_too_long_for_a_socket_still_starts_the_server(tmp_path):
    """A TMPDIR of 90 characters made the forkserver's socket path 122 bytes: every run stopped with "AF_UNIX path
    too long" (a Slurm job's TMPDIR, or pytest's under xdist)."""
    long_tmp = tmp_path / ("t" * max(1, SOCKET_PATH_MAX - SOCKET_SUFFIX + 10 - len(str(tmp_path)) - 1))
    long_tmp.mkdir()
    assert len(str(long_tmp)) + SOCKET_SUFFIX > SOCKET_PATH_MAX
    env = {**os.environ, "TMPDIR": str(long_tmp), "TUNEBENCH_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-c", WARM], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = Path(proc.stdout.strip().splitlines()[-1])
    assert folder.parent == Path("/tmp") and folder.name.startswith("pymp-")
    assert not folder.exists() and list(long_tmp.iterdir()) == []  # multiprocessing removed its folder at exit
