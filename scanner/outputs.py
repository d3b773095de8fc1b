"""Where a scan report goes: atomic files (one per rank when there are several) and the rank/world lookup."""

from __future__ import annotations

import os
import tempfile

import torch

UMASK = os.umask(0)
os.umask(UMASK)  # reading the umask means setting it; restored at once (import time)


def atomic_write(path: str, data: bytes) -> None:
    """Write `data` to `path` through a temp file in the same directory and os.replace."""

    def write(tmp: str) -> None:
        with open(tmp, "wb") as handle:
            handle.write(data)

    atomic_via_tmp(path, write)


def atomic_via_tmp(path: str, writer) -> None:
    """Let `writer(tmp_path)` produce the file next to `path` (os.replace cannot cross filesystems), then move it
    into place with the permissions of any file (mkstemp makes 0600); nothing half-written is ever seen."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".scan-", suffix=os.path.splitext(path)[1])
    os.close(fd)
    try:
        writer(tmp)
        os.chmod(tmp, 0o666 & ~UMASK)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def rank_path(path: str, rank: int, world: int) -> str:
    """`scan.json` → `scan.rank<r>.json` when several ranks write."""
    if world <= 1:
        return path
    stem, ext = os.path.splitext(path)
    return f"{stem}.rank{rank}{ext}"


def rank_world(args=None) -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return int(getattr(args, "process_index", 0) or 0), int(getattr(args, "world_size", 1) or 1)


def distributed_world() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized() and (
        torch.distributed.get_world_size() > 1
    )
