"""Which experiment starts next, on which slots: disjoint GPU sets (process slots on CPU), largest first.

Largest-first then fill-the-gaps is the classic list-scheduling answer to "finish the matrix soon": the
experiments that need the most GPUs are the hardest to place later, and small ones fill the holes around
them. An experiment never starts on fewer slots than it needs, and an `exclusive` one (timing-critical)
starts only on an idle machine and keeps it to itself.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)


class SlotPool:
    """Disjoint slot sets: GPU ordinals on a GPU machine, process slots on CPU."""

    def __init__(self, slots: list[int]):
        self.all = list(slots)
        self.free = list(slots)

    def acquire(self, count: int) -> list[int] | None:
        if count > len(self.free):
            return None
        taken, self.free = self.free[:count], self.free[count:]
        return taken

    def release(self, slots: list[int]) -> None:
        self.free = sorted(set(self.free) | set(slots))

    @property
    def idle(self) -> bool:
        return len(self.free) == len(self.all)


@dataclass
class Job:
    key: int  # position in the matrix
    size: int  # slots it needs
    exclusive: bool = False
    slots: list[int] = field(default_factory=list)


class Scheduler:
    """Hands out jobs as slots free up; `max_concurrent` caps how many run at once."""

    def __init__(self, jobs: list[Job], pool: SlotPool, max_concurrent: int = 1):
        if max_concurrent < 1:
            raise ValueError(f"max_concurrent must be >= 1, got {max_concurrent}")
        too_big = [j for j in jobs if j.size > len(pool.all)]
        if too_big:
            raise ValueError(f"jobs {[j.key for j in too_big]} need more than the {len(pool.all)} slots there are")
        # Largest first; among equals, matrix order (stable sort).
        self.queue = sorted(jobs, key=lambda j: -j.size)
        self.pool = pool
        self.max_concurrent = max_concurrent
        self.running: dict[int, Job] = {}

    def next_ready(self) -> list[Job]:
        """Jobs to start now (their slots are taken); [] when nothing fits until something finishes."""
        started = []
        if any(j.exclusive for j in self.running.values()):
            return started
        for job in list(self.queue):
            if len(self.running) >= self.max_concurrent:
                break
            if job.exclusive and not (self.pool.idle and not self.running):
                continue
            slots = self.pool.acquire(job.size)
            if slots is None:
                continue
            job.slots = slots
            self.queue.remove(job)
            self.running[job.key] = job
            started.append(job)
            if job.exclusive:
                break
        return started

    def finished(self, key: int) -> None:
        job = self.running.pop(key)
        self.pool.release(job.slots)

    @property
    def done(self) -> bool:
        return not self.queue and not self.running


def overlapping(intervals: dict[int, tuple[float, float | None]], key: int) -> list[int]:
    """The other experiments that ran at any time during experiment `key` (start, end; end None = running)."""
    start, end = intervals[key]
    return sorted(other for other, (o_start, o_end) in intervals.items()
                  if other != key and o_start < (end if end is not None else float("inf"))
                  and (o_end is None or o_end > start))


def overlaps(intervals: dict[int, tuple[float, float | None]], key: int) -> int:
    """How many other experiments ran at any time during experiment `key`."""
    return len(overlapping(intervals, key))


def overlap_columns(intervals: dict[int, tuple[float, float | None]], key: int, ids: list[str]) -> dict[str, object]:
    """A row's `concurrent_experiments` (how many) and `concurrent_experiment_ids` (which: `ids[k]` of each)."""
    others = overlapping(intervals, key)
    return {"concurrent_experiments": len(others), "concurrent_experiment_ids": ";".join(ids[k] for k in others)}
