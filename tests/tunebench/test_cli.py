"""tunebench/cli/__init__.py: which commands spawn the preload server as the run begins (issue AE), and with which
OpenMP wait policy; the spawn itself is timed end to end in tests/tunebench/cli/test_run_e2e.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import tunebench.cli as cli
import tunebench.execution.preload as preload
from tests.fixtures.harness import REPO
from tunebench.cli.options import build_parser


@pytest.fixture
def spawns(monkeypatch):
    calls = []
    monkeypatch.setattr(preload, "spawn", lambda: calls.append(os.environ.get("OMP_WAIT_POLICY")))
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    return calls


@pytest.mark.parametrize(("argv", "spawned"), [
    ([], True),
    (["--launcher", "forkserver"], True),
    (["--dry_run"], False),
    (["--no_preload"], False),
    (["--launcher", "torchrun"], False),
    (["--launcher", "python"], False),
    (["--executor", "ray"], False),
])
def test_a_local_run_that_forks_experiments_spawns_the_server_and_nothing_else_does(spawns, argv, spawned):
    cli._spawn_preload_server(build_parser("benchmark.py").parse_args([*argv, "--device", "cpu"]))
    assert spawns == (["PASSIVE"] if spawned else [])


@pytest.mark.parametrize(("device", "visible", "policy"), [
    ("cpu", None, "PASSIVE"), ("cuda", None, None), ("auto", "", "PASSIVE"), ("auto", "-1", "PASSIVE")])
def test_the_server_s_threads_sleep_at_barriers_only_for_a_cpu_matrix(spawns, monkeypatch, device, visible, policy):
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    cli._spawn_preload_server(build_parser("benchmark.py").parse_args(["--device", device]))
    assert spawns == [policy]


def test_auto_without_nvidia_smi_is_the_cpu(spawns, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(cli.shutil, "which", lambda name: None)
    cli._spawn_preload_server(build_parser("benchmark.py").parse_args([]))
    assert spawns == ["PASSIVE"]
    monkeypatch.setattr(cli.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.delenv("OMP_WAIT_POLICY")
    cli._spawn_preload_server(build_parser("benchmark.py").parse_args([]))
    assert spawns == ["PASSIVE", None]


@pytest.mark.parametrize("argv", [["--results_output_path", "/"], ["--timeout", "-5"], ["--repeats", "0"],
                                  ["--results_output_path", "{folder}/a-file"], ["--results_output_path", "{folder}"]])
def test_a_run_its_command_line_refuses_on_sight_spawns_no_server(spawns, tmp_path, argv):
    """The full check will stop it (tested with every problem in test_parsing_hostile.py): no stack imported for it."""
    (tmp_path / "a-file").write_text("not a folder")
    (tmp_path / "notes.txt").write_text("a folder tunebench did not write")
    cli._spawn_preload_server(build_parser("benchmark.py").parse_args(
        [*(a.format(folder=tmp_path) for a in argv), "--device", "cpu"]))
    assert spawns == []


def test_a_run_whose_folder_is_new_or_its_own_spawns_the_server(spawns, tmp_path):
    for folder in (tmp_path / "new", tmp_path / "new" / "deeper"):
        cli._spawn_preload_server(build_parser("benchmark.py").parse_args(
            ["--results_output_path", str(folder), "--device", "cpu"]))
    assert spawns == ["PASSIVE", "PASSIVE"]


LATE_CTRL_C = """
import atexit, os, signal, sys, time

def last():  # registered before tunebench.cli is imported: it runs after the command's own exit functions
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.2)
    print("survived", flush=True)

atexit.register(last)
from tunebench.cli import entry
sys.argv = ["benchmark.py", "--help"]
entry()
"""


def test_a_ctrl_c_at_the_very_end_of_the_exit_is_ignored():
    """Once every exit function ran, a Ctrl-C is ignored: Python resets a handler of its own to the default as it
    finalizes, and a Ctrl-C in that moment killed the command by the signal (-2) after its files were written."""
    proc = subprocess.run([sys.executable, "-c", LATE_CTRL_C], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1] == "survived", proc.stderr[-2000:]
    assert "KeyboardInterrupt" not in proc.stderr


INTERRUPTED_EXIT = """
import multiprocessing.util, os, sys
folder = multiprocessing.util.get_temp_dir()  # what the preload server's socket makes in the harness
print(folder, flush=True)
from tunebench.cli import _exit_interrupted
_exit_interrupted()
"""


def test_a_ctrl_c_in_the_exit_leaves_no_multiprocessing_folder_behind():
    """A Ctrl-C once the command is done exits 130 at once (os._exit): multiprocessing's exit function, which
    removes its temporary folder, does not run then, so the exit removes it itself."""
    proc = subprocess.run([sys.executable, "-c", INTERRUPTED_EXIT], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    folder = proc.stdout.strip()
    assert proc.returncode == 130 and "pymp-" in folder, proc.stderr[-2000:]
    assert not os.path.exists(folder)
