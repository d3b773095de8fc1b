"""Atomic file writes: a temp file in the target's directory, then os.replace, so readers never see half a file."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

_UMASK = os.umask(0)
os.umask(_UMASK)  # reading the umask requires setting it; restored at once (import time, single-threaded)


def write_atomic(path: str | os.PathLike, data: bytes | str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; results are meant to be shared like any file
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
