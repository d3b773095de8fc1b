"""Imported first by the preload forkserver (execution/preload.py): it dies the moment its harness dies, and its
forks never run the user's `__main__` again.

multiprocessing's forkserver leaves its loop only when it next notices that its parent's pipe closed, which a
server still importing torch does seconds later (3-10 s measured after a SIGKILL); its forked experiments
then outlived the harness too. With a parent-death signal it goes at once, and its forks with it.

Every process multiprocessing starts by spawn or forkserver first re-runs the parent's main script as
`__mp_main__`, so that functions defined there can be unpickled. A script that calls `tunebench.run` at top level
(no `if __name__ == "__main__":` guard: what notebooks, CI jobs and 15-line scripts do) then ran again inside
every experiment and claimed the results folder its own harness held. The experiments forked here run
`tunebench.execution.preload._run_entry` and need nothing of `__main__`: for them (and only them, by process
name) the re-run is skipped.

Ctrl-C in the terminal reaches the harness's whole process group, the server included. multiprocessing ignores
SIGINT in its server only once the preloaded modules are imported; during those 5-15 s the signal raised
KeyboardInterrupt inside `import peft` and the server printed its traceback beside the harness's clean exit 130.
The server ignores it from its first import on: the harness stops, and the server goes with it (above). Its forks
set their own handlers (preload._run_entry).

Only the server imports this module (PRELOAD_MODULES): in any other process the variable may be a stale one
inherited from an outer harness, and acting on it there would end that process.
"""

import os
import signal
from multiprocessing import spawn

from tunebench.lifetime.parent_death import HARNESS_PID_ENV, PRELOADED_PROCESS_NAME, die_with_parent

_harness = os.environ.get(HARNESS_PID_ENV, "")
if _harness.isdigit():
    die_with_parent(expected_parent=int(_harness))
signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the harness's to handle (see above)

_MAIN_KEYS = ("init_main_from_name", "init_main_from_path")
_prepare = spawn.prepare


def _prepare_without_users_main(data: dict) -> None:
    """multiprocessing's `prepare`, without re-running `__main__` for the harness's own forks."""
    if str(data.get("name", "")).startswith(PRELOADED_PROCESS_NAME):
        data = {key: value for key, value in data.items() if key not in _MAIN_KEYS}
    _prepare(data)


spawn.prepare = _prepare_without_users_main
