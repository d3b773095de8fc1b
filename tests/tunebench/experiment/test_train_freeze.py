"""tunebench/experiment/train.py: an experiment freezes what it imported and built out of the garbage collector
once (its full collections walked a fork's every inherited object: 0.25-0.4 s of train set-up each), and unfreezes
it at its exit, so that an interpreter that finalizes frees it as usual."""

import subprocess
import sys

from tests.fixtures.harness import REPO

# Python 3.12 starts with some objects frozen already (375 on the H200 image): counted from there.
SCRIPT = """
import atexit, gc
atexit.register(lambda: print("after its exit function", gc.get_freeze_count()))  # runs last (LIFO)
from tunebench.experiment import train
before = gc.get_freeze_count()
train._freeze_what_lives_to_the_end()
frozen = gc.get_freeze_count()
kept = [object() for _ in range(1000)]
train._freeze_what_lives_to_the_end()
print("frozen", frozen - before > 1000, "once", gc.get_freeze_count() == frozen)
"""


def test_an_experiment_freezes_what_it_built_once_and_unfreezes_it_at_exit():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == ["frozen True once True", "after its exit function 0"]
