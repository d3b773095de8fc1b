"""A lock held for as long as its process lives (released by the kernel however the process ends), with a note
naming its holder: one harness per results folder."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

from filelock import lock_descriptor

from tunebench.lifetime.parent_death import HARNESS_PID_ENV


def started_by_holder(text: str) -> bool:
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
def held_while_running(path: Path, refused: Callable[[str], Exception]):
    """Hold an exclusive lock on `path` until the block ends; where another process holds it, raise
    `refused(note)` with the note its holder wrote (pid, host, argv, since).

    filelock's lock_descriptor (a flock on Unix): released by the kernel when the process ends, however it ends, so
    a killed holder never leaves a stale lock behind. It locks the descriptor opened here, the one that writes the
    note (FileLock would open its own, and the note would need a second). The file records who holds it, for the
    refusal message.
    """
    # O_NOFOLLOW: a link planted in the lock's place is refused, never written through.
    handle = os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644), "a+",
                       errors="replace")
    try:
        if not lock_descriptor(handle.fileno(), blocking=False):  # filelock's FileLock primitive, on our descriptor
            handle.seek(0)
            raise refused(handle.read(4096))
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
