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
import threading
import time
from pathlib import Path

from tunebench.errors import InputError, InputProblem
from tunebench.lifetime import HARNESS_PID_ENV
from tunebench.results.folder import LOCK_FILE, claim

logger = logging.getLogger(__name__)


class HarnessStopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP reached the harness: handled like Ctrl-C (running experiments killed, rows kept)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _started_by_holder(text: str) -> bool:
    """Whether the lock's holder is the harness that started this process (its pid in HARNESS_PID_ENV): a script
    that ran again inside one of its own experiments, not a second harness."""
    try:
        note = json.loads(text)
    except ValueError:
        return False
    harness = os.environ.get(HARNESS_PID_ENV, "")
    return isinstance(note, dict) and harness.isdigit() and str(note.get("pid")) == harness \
        and int(harness) != os.getpid()


def lock_holder(text: str) -> str:
    """Who holds the lock, from the note its holder wrote (pid, host, since); any other content, however long or
    strange, is not repeated: a lock file is read back like every file the harness wrote."""
    try:
        note = json.loads(text)
    except ValueError:
        note = None
    if not isinstance(note, dict):
        return "another process (its note in the lock file is unreadable)" if text.strip() else "another process"
    fields = {k: str(note.get(k))[:80].replace("\n", " ") for k in ("pid", "host", "since") if note.get(k) is not None}
    return "pid {pid} on {host} since {since}".format_map({"pid": "?", "host": "?", "since": "?", **fields})


@contextlib.contextmanager
def results_lock(folder: Path):
    """Claim `folder` (tunebench.results.folder.claim) and hold an exclusive lock on it for the whole run; a
    second harness gets a clear InputError.

    flock: released by the kernel when the process ends, however it ends, so a killed harness never leaves a
    stale lock behind. The file records who holds it, for the refusal message.
    """
    claim(folder)
    path = folder / LOCK_FILE
    # O_NOFOLLOW: a link planted in the lock's place is refused, never written through.
    handle = os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644), "a+",
                       errors="replace")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            note = handle.read(4096)
            problem = InputProblem(str(folder), LOCK_FILE, f"results folder in use by {lock_holder(note)}",
                                   "wait for that harness to finish, or choose another --results_output_path")
            if _started_by_holder(note):
                problem = InputProblem(str(folder), LOCK_FILE, "this process was started by the harness that holds "
                                       "the folder: the script that runs tunebench ran again inside it",
                                       'put the script\'s calls under `if __name__ == "__main__":`')
            raise InputError([problem]) from None
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "argv": sys.argv,
                                     "since": time.strftime("%Y-%m-%d %H:%M:%S")}))
            handle.flush()  # a full disk fails here, before anything runs (OSError: exit 2 in the CLI)
        except OSError as exc:  # the buffered note is dropped when the descriptor closes: nothing half-written
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        yield
    finally:
        try:
            handle.close()  # closing the descriptor releases the lock
        except OSError:  # a full disk refuses the buffered note again; the descriptor is closed all the same
            pass


@contextlib.contextmanager
def stop_on_signals(signals=(signal.SIGTERM, signal.SIGHUP)):
    """Turn SIGTERM/SIGHUP into HarnessStopped in the main thread, so the Ctrl-C path (kill every running
    experiment's process group, keep the finished rows) runs for them too."""

    def handler(signum, frame):
        raise HarnessStopped(signum)

    if threading.current_thread() is not threading.main_thread():  # Python lets only the main thread handle them
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
