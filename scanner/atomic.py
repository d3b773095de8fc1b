"""The one atomic file writer (scanner's, and tunebench's through tunebench.fileio): readers never see half a file.

Torch-free, so that the harness imports it without a framework.
"""

from __future__ import annotations

import os
import tempfile

UMASK = os.umask(0)
os.umask(UMASK)  # reading the umask means setting it; restored at once (import time, single-threaded)


def atomic_via_tmp(path: str | os.PathLike, writer) -> None:
    """Let `writer(tmp_path)` produce the file next to `path` (os.replace cannot cross filesystems), then move it
    into place with the permissions of any file (mkstemp makes 0600). Whatever fails, nothing half-written is
    left behind, and an OSError that names no file names the target."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    os.close(fd)
    try:
        writer(tmp)
        os.chmod(tmp, 0o666 & ~UMASK)
        os.replace(tmp, path)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename is None:
            raise OSError(exc.errno, exc.strerror, path) from exc
        raise


def atomic_write(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` atomically."""

    def write(tmp: str) -> None:
        with open(tmp, "wb") as handle:
            handle.write(data)

    atomic_via_tmp(path, write)
