"""Imported first by the preload forkserver (execution/preload.py): it dies the moment its harness dies.

multiprocessing's forkserver leaves its loop only when it next notices that its parent's pipe closed, which a
server still importing torch does seconds later (3-10 s measured after a SIGKILL); its forked experiments
then outlived the harness too. With a parent-death signal it goes at once, and its forks with it.
"""

import os

from tunebench.lifetime import die_with_parent

HARNESS_PID_ENV = "TUNEBENCH_HARNESS_PID"

_harness = os.environ.get(HARNESS_PID_ENV, "")
if _harness.isdigit():
    die_with_parent(expected_parent=int(_harness))
