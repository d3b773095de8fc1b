"""benchmark.py (tunebench.cli.entry, the installed `tunebench` command too): a Ctrl-C after the command is done is exit
130, never a traceback (-2)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# main is replaced before benchmark.py runs: the signal lands where CI once caught it, deterministically.
DRIVER = """
import os, runpy, signal, sys
import tunebench.cli

def done_then_interrupted():
    {when_main}
    return 0

class InterruptedStream:
    def __init__(self, stream):
        self.stream = stream
    def write(self, text):
        return self.stream.write(text)
    def flush(self):
        {when_flush}
        self.stream.flush()

tunebench.cli.main = done_then_interrupted
sys.stdout = InterruptedStream(sys.stdout)
runpy.run_path({script!r}, run_name="__main__")
"""
SIGINT_SELF = "os.kill(os.getpid(), signal.SIGINT)"


@pytest.mark.parametrize("where", ["main", "flush"])
def test_a_ctrl_c_as_the_command_ends_is_exit_130(where):
    code = DRIVER.format(when_main=SIGINT_SELF if where == "main" else "pass",
                         when_flush=SIGINT_SELF if where == "flush" else "pass",
                         script=str(ROOT / "benchmark.py"))
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 130 and "Traceback" not in done.stderr, done.stderr[-2000:]


def test_a_command_that_ends_quietly_keeps_its_exit_code():
    code = DRIVER.format(when_main="pass", when_flush="pass", script=str(ROOT / "benchmark.py"))
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
