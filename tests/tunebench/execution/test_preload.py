"""tunebench/execution/preload.py: the preload server starts under a temporary directory whose path is too long for a
socket's address, and leaves nothing behind (issue AD: nothing the harness starts leaves a folder behind)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.harness import REPO
from tunebench.execution.preload import SOCKET_PATH_MAX, SOCKET_SUFFIX

CALLS = "from tests.fixtures.server_calls import main; main()"  # its functions pickle by their module's name
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


def test_a_call_in_the_server_answers_as_the_harness_would_and_falls_back_when_the_fork_dies(tmp_path):
    """call_in_server: the harness's checks run in a fork of the server spawned early (TRL imported there, not in the
    harness: issue AE), with the harness's environment and working directory as they are at the call; an InputError
    comes back whole (every problem), and a fork that dies without answering leaves the call to the harness."""
    folder = tmp_path / "work"
    folder.mkdir()
    env = {**os.environ, "TUNEBENCH_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", CALLS, str(folder)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["here_before_spawn"] and seen["forked"]
    assert seen["cwd"] == str(folder) and seen["tag"] == "set after the spawn" and seen["arg"] == "y"
    assert seen["refused"] == "InputError"
    assert seen["problems"] == ["scenarios.yaml: max_steps: is zero (fix: set it to 1 or more)",
                                "defaults.yaml: lr: unknown argument (fix: did you mean 'learning_rate'?)"]
    assert seen["fallback_pid"] == seen["harness"] and seen["unpicklable_here"]
    assert seen["outside"]  # before `answering_calls` and after it, calls run in the harness
    assert "ended without an answer (exit 3): running it in the harness" in proc.stderr
    assert 0 <= seen["waited"] < 60


def test_an_input_error_pickles_with_its_problems():
    """What a fork of the server raises reaches the harness with every problem, whatever the subclass."""
    from tunebench.errors import InputError, InputProblem
    from tunebench.plugins import PluginError, Registry

    problems = [InputProblem("a.yaml", "k", "bad", "fix it"), InputProblem("b.yaml", "j", "worse", "fix that")]
    copy = pickle.loads(pickle.dumps(InputError(problems)))
    assert type(copy) is InputError and copy.problems == problems and str(copy) == str(InputError(problems))
    error = PluginError(Registry("tracker", "tunebench.trackers", {}), "x", "importing", ValueError("no"))
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is PluginError and again.problems == error.problems
