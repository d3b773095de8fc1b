"""The steady step as a launch-queue replay of the scanned step: the host issues, the GPU runs, each waits on the other.

The scanned step's kernel rows give, per kernel, when the host launched it (`launch_us`, from the step's start),
its stream and duration, and the host calls that waited for the GPU (class `sync`). The replay:
  * the host's clock advances by the profiled gap between consecutive launches × s, the host scale (a sync's own
    wait is not host work: after it the host resumes where the GPU finished);
  * a kernel starts when it was launched and its stream's previous kernel has finished, and runs its duration;
  * the step ends when both the host and every stream are done.
The profiler slows the host unevenly (0.1-1.1× across the evidence's experiments), so s is calibrated per scanned
step: the s for which the replay with the measured durations takes the timed steady step. Replayed with the
target's durations (kernel_model) and s × the target host's relative time, the step shows what an additive gap
model cannot: a host that was hidden behind a slow GPU becomes the bound on a fast one, and a host-bound step
does not shrink with its kernels. Where the kernels alone outlast the timed step (the profiled kernels ran slower
than the un-profiled step's), there is no host to calibrate and the step scales with the kernels' replay.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

logger = logging.getLogger(__name__)

SYNC = "sync"


@dataclass(frozen=True)
class Timeline:
    """One scanned step in launch order: the host's work before each event (s), its stream (None: a sync), and
    the GPU seconds of each kernel as measured."""

    host_gaps: tuple[float, ...]
    streams: tuple[str | None, ...]
    durations: tuple[float, ...]

    @classmethod
    def of(cls, rows: list[dict]) -> Timeline:
        """From one step's kernel rows (scanner.kernel_split's): launches sorted; the host's clock stops during a
        sync's wait."""
        events = sorted(rows, key=lambda r: float(r["launch_us"]))
        gaps, streams, durations, resumed = [], [], [], 0.0
        for r in events:
            launch = float(r["launch_us"]) * 1e-6
            gaps.append(max(0.0, launch - resumed))
            if r["class"] == SYNC:
                streams.append(None)
                durations.append(0.0)
                resumed = launch + float(r["dur_us"]) * 1e-6
            else:
                streams.append(str(r.get("stream", "")))
                durations.append(float(r["dur_us"]) * 1e-6)
                resumed = launch
        return cls(tuple(gaps), tuple(streams), tuple(durations))


def replay(timeline: Timeline, durations: tuple[float, ...] | list[float], host_scale: float) -> float:
    """Seconds from the step's start until the host and every stream are done."""
    host, ready = 0.0, {}
    for gap, stream, duration in zip(timeline.host_gaps, timeline.streams, durations, strict=True):
        host += gap * host_scale
        if stream is None:  # the host waits for all the GPU's work so far
            host = max(host, *ready.values()) if ready else host
        else:
            ready[stream] = max(ready.get(stream, 0.0), host) + duration
    return max(host, *ready.values()) if ready else host


def calibrate(timeline: Timeline, measured: float, tolerance: float = 1e-9) -> float | None:
    """The host scale at which the replay of the measured durations takes `measured` seconds; None when the
    kernels alone take that long or longer, or when no host time separates the launches (nothing to scale). The
    replay grows monotonically with the scale, so bisection."""
    host = sum(timeline.host_gaps)
    # the host's clock alone reaches `measured` at this scale, so the replay does too
    high = measured / host if host > 0 else math.inf
    if replay(timeline, timeline.durations, 0.0) >= measured or not math.isfinite(high):
        return None
    low = 0.0
    for _ in range(200):  # to a relative tolerance (bounded: floats run out of halvings)
        if high - low <= tolerance * high:
            break
        mid = (low + high) / 2.0
        low, high = (mid, high) if replay(timeline, timeline.durations, mid) < measured else (low, mid)
    return (low + high) / 2.0


# A host this much slower shows how much of the step is the host's (the elasticity below)
NUDGE = 1.1


@dataclass(frozen=True)
class Replayed:
    step_time: float  # the target's step (s), the mean over the scanned steps
    host_elasticity: float  # d ln(step) / d ln(host time): 0 when the GPU bounds the step, 1 when the host does
    host_scales: tuple[float | str, ...]  # each scanned step's calibrated scale, or why it has none


def project_replay(rows: list[dict], target_seconds: dict[int, float], measured: float,
                   host_ratio: float = 1.0) -> Replayed:
    """The step on the target from the scanned step(s) `rows`: `target_seconds` maps id(row) → the kernel's
    duration on the target; `measured` is the timed steady step (s); `host_ratio` the target host's time per unit
    of the source host's."""
    by_step: dict[int, list[dict]] = {}
    for r in rows:
        by_step.setdefault(int(r["step"]), []).append(r)
    steps, nudged, scales = [], [], []
    for step_rows in by_step.values():
        ordered = sorted(step_rows, key=lambda r: float(r["launch_us"]))
        timeline = Timeline.of(ordered)
        target = [0.0 if r["class"] == SYNC else target_seconds[id(r)] for r in ordered]
        scale, floor = calibrate(timeline, measured), replay(timeline, timeline.durations, 0.0)
        for ratio, out in ((host_ratio, steps), (host_ratio * NUDGE, nudged)):
            if scale is not None:
                out.append(replay(timeline, target, scale * ratio))
            elif floor >= measured:  # the kernels alone outlast the timed step: they are the step
                out.append(measured * replay(timeline, target, 0.0) / floor if floor > 0 else measured)
            else:  # every launch at once: the host's time is outside them, a tail of its own
                out.append(replay(timeline, target, 0.0) + (measured - floor) * ratio)
        scales.append(scale if scale is not None else "kernel-bound" if floor >= measured else "host tail")
    if not steps:
        return Replayed(measured, 0.0, ())
    step, slower = sum(steps) / len(steps), sum(nudged) / len(nudged)
    elasticity = math.log(slower / step) / math.log(NUDGE) if step > 0 else 0.0
    return Replayed(step, elasticity, tuple(scales))
