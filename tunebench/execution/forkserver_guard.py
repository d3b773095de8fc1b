"""Imported first by the preload forkserver (execution/preload.py): it dies the moment its harness dies.

multiprocessing's forkserver leaves its loop only when it next notices that its parent's pipe closed, which a
server still importing torch does seconds later (3-10 s measured after a SIGKILL); its forked experiments
then outlived the harness too. With a parent-death signal it goes at once, and its forks with it.

Only the server imports this module (PRELOAD_MODULES): in any other process the variable may be a stale one
inherited from an outer harness, and acting on it there would end that process.
"""

import os

from tunebench.lifetime import HARNESS_PID_ENV, die_with_parent

_harness = os.environ.get(HARNESS_PID_ENV, "")
if _harness.isdigit():
    die_with_parent(expected_parent=int(_harness))
