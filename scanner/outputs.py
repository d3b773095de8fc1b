"""Where a scan report goes: atomic files (scanner.atomic; one per rank when there are several) and the rank/world
lookup."""

from __future__ import annotations

import os

import torch

from .atomic import UMASK, atomic_via_tmp, atomic_write  # noqa: F401 (the scanner's writers, named here)


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
