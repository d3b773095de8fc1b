"""What keeps a harness run safe: one harness per results folder (a lock), and no orphans on SIGTERM/SIGHUP."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path

from tunebench.errors import InputError, InputProblem

logger = logging.getLogger(__name__)

LOCK_FILE = ".tunebench.lock"


class HarnessStopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP reached the harness: handled like Ctrl-C (running experiments killed, rows kept)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def check_results_path(path: Path) -> list[InputProblem]:
    if path.exists() and not path.is_dir():
        return [InputProblem("command line", "--results_output_path", f"{path} exists and is not a directory",
                             "give a folder (new or one tunebench wrote), not a file")]
    return []


@contextlib.contextmanager
def results_lock(folder: Path):
    """Hold an exclusive lock on `folder` for the whole run; a second harness gets a clear InputError.

    flock: released by the kernel when the process ends, however it ends, so a killed harness never leaves a
    stale lock behind. The file records who holds it, for the refusal message.
    """
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    handle = open(path, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        problem = InputProblem(str(folder), LOCK_FILE, f"results folder in use by {holder}",
                               "wait for that harness to finish, or choose another --results_output_path")
        raise InputError([problem]) from None
    handle.seek(0)
    handle.truncate()
    handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "argv": sys.argv,
                             "since": time.strftime("%Y-%m-%d %H:%M:%S")}))
    handle.flush()
    try:
        yield
    finally:
        handle.close()  # closing the descriptor releases the lock


@contextlib.contextmanager
def stop_on_signals(signals=(signal.SIGTERM, signal.SIGHUP)):
    """Turn SIGTERM/SIGHUP into HarnessStopped in the main thread, so the Ctrl-C path (kill every running
    experiment's process group, keep the finished rows) runs for them too."""

    def handler(signum, frame):
        raise HarnessStopped(signum)

    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
