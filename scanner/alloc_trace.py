"""Exact peak attribution from the CUDA caching allocator's own alloc/free history, tagged per scanner event.

Reading allocator statistics from Python at every hook event costs tens of microseconds (the whole stats
dict is rebuilt each time). Instead, the scanner numbers its events and hands each number to the allocator
as "user metadata"; the allocator copies it into every alloc/free entry of its history (C++ only, no Python
per allocation). After the scanned step the history is replayed once: the running `allocated` total is
exact, so its maximum, the event interval in which it happened and the allocated value at every event are
known exactly — and checked against the allocator's own peak counter.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field

import torch

from .block_layout import BlockLayout, rounded
from .memory import allocation_bytes

logger = logging.getLogger(__name__)

# Every trace entry costs a few dozen bytes of host memory; a step of a large model makes ~1e4 entries.
MAX_ENTRIES = 2_000_000
# History entries carry the requested size; the allocator's `allocated_bytes` counts whole blocks, which are
# at least the request rounded up to the block size (memory.allocation_bytes). A large-pool block may also keep an
# unsplit tail of up to 1 MiB,
# which the history does not show: replayed and counted peaks may differ by that much per block, so a
# difference up to PEAK_TOLERANCE is expected and only a larger one is reported.
_CUDA = torch.device("cuda")  # only its type matters to allocation_bytes
PEAK_TOLERANCE = 4 << 20
# free_completed follows free_requested for blocks used on side streams; `allocated_bytes` already dropped at
# the request, so the completion carries no information the replay needs (unless it replays the block layout,
# where the completion is when the block is free for reuse).
SKIPPED_ACTIONS = ["free_completed", "snapshot"]
_TRACE_IDS = itertools.count()


def available(device: torch.device) -> bool:
    """Whether this torch can tag allocator history entries (CUDA and `_cuda_setMemoryMetadata` present)."""
    return device.type == "cuda" and hasattr(torch._C, "_cuda_setMemoryMetadata")


@dataclass
class Replay:
    """The allocator's `allocated` total replayed over tagged history entries."""

    start_allocated: dict[int, int] = field(default_factory=dict)  # tag -> allocated when the tag began
    interval_peak: dict[int, int] = field(default_factory=dict)  # tag -> max allocated within its interval
    interval_tails: dict[int, int] = field(default_factory=dict)  # tag -> block tails alive at its peak
    entries: int = 0
    stale: int = 0  # entries made by a thread whose tag was out of date (see replay)
    before_start: int = 0  # entries before the first tag: already part of allocated_at_start


def _parse_tag(meta: str, prefix: str) -> int | None:
    if not meta.startswith(prefix):
        return None
    rest = meta[len(prefix) :]
    return int(rest) if rest.isdigit() else None


def replay(
    entries: list[dict], allocated_at_start: int, first_tag: int, last_tag: int, prefix: str = "",
    layout: BlockLayout | None = None,
) -> Replay:
    """Replay `entries` (snapshot trace dicts, in order) from `allocated_at_start`, for tags first..last.

    With `layout` (the allocator's blocks when the trace began), each entry counts its block's size, as the
    allocator's counter does, and the tails of blocks beyond their requests are tracked (scanner.block_layout);
    without, requests rounded to 512 B (exact with expandable segments, whose blocks are always split).

    A tag's interval runs from the event that set it to the next event. Tags with no allocator activity
    inherit the running value, so every tag in the range gets a start value and an interval peak.

    The allocator keeps the metadata per thread, and the scanner's events run on two threads (forward and
    optimizer on the Python thread, backward on autograd's device thread). A thread that allocates before its
    next event still carries an older tag (e.g. gradient clipping on the main thread after a backward whose
    events all ran on the device thread), or another scan's tag, or none. Such a stale entry happened after
    every tag seen so far and before the next fresh one, and since the stale thread set no tag meanwhile, the
    state in force was the one just before that next fresh tag: stale entries are held and applied there.
    """
    replayer = _Replayer(allocated_at_start, first_tag, last_tag, layout)
    completions = layout is not None and any(e.get("action") == "free_completed" for e in entries)
    for e in entries:
        delta = _counted(e, layout, replayer.blocks, completions)
        if delta is None:
            continue
        tag = _parse_tag(e.get("user_metadata") or "", prefix)
        replayer.feed(tag if tag is not None and first_tag <= tag <= last_tag else None, delta)
    return replayer.finish()


class _Replayer:
    """The running state of one replay (replay's docstring says how tags and stale entries are read)."""

    def __init__(self, allocated_at_start: int, first_tag: int, last_tag: int, layout: BlockLayout | None):
        self.out = Replay()
        self.current = allocated_at_start
        self.tails = layout.start_tails if layout is not None else 0
        self.blocks: dict[int, tuple[int, int]] = {}  # address -> (block bytes, tail bytes) of traced allocations
        self.last_tag = last_tag
        self.next_tag = first_tag  # the lowest tag whose start value is not yet known
        self.newest: int | None = None  # highest fresh tag seen so far
        self.held: list[tuple[int, int]] = []  # deltas of stale entries waiting for the next fresh tag

    def feed(self, tag: int | None, delta: tuple[int, int]) -> None:
        """One counted entry, with its tag (None: untagged or outside the range)."""
        if self.newest is None and tag is None:
            self.out.before_start += 1  # recorded before the first event: allocated_at_start includes it
            return
        if tag is None or (self.newest is not None and tag < self.newest):
            self.out.stale += 1
            self.held.append(delta)
            return
        if self.held:
            self._release_held(tag - 1)
        self.newest = tag
        self._open_until(tag)
        self._apply(tag, delta)
        self.out.entries += 1

    def finish(self) -> Replay:
        if self.held:
            self._release_held(self.last_tag)
        self._open_until(self.last_tag)
        return self.out

    def _open_until(self, tag: int) -> None:
        while self.next_tag <= tag:
            self.out.start_allocated[self.next_tag] = self.current
            self.out.interval_peak[self.next_tag] = self.current
            self.out.interval_tails[self.next_tag] = self.tails
            self.next_tag += 1

    def _apply(self, tag: int, delta: tuple[int, int]) -> None:
        self.current += delta[0]
        self.tails += delta[1]
        if self.current > self.out.interval_peak[tag]:
            self.out.interval_peak[tag] = self.current
            self.out.interval_tails[tag] = self.tails

    def _release_held(self, until: int) -> None:
        owner = min(until, self.last_tag)
        self._open_until(owner)
        for delta in self.held:
            self._apply(owner, delta)
        self.held.clear()


def _counted(e: dict, layout: BlockLayout | None, blocks: dict, completions: bool) -> tuple[int, int] | None:
    """(allocated delta, block-tail delta) of a history entry; None for entries the counter does not move on
    (those still move the layout: a completed free, a segment made or given back)."""
    action = e.get("action")
    if action == "alloc":
        size = allocation_bytes(e["size"], _CUDA)
        if layout is None:
            return size, 0
        block = layout.alloc(e["addr"], e["size"])
        blocks[e["addr"]] = (block, block - size)
        return block, block - size
    if action == "free_requested":
        if layout is None:
            return -allocation_bytes(e["size"], _CUDA), 0
        block, tail = blocks.pop(e["addr"], (None, 0))
        if block is None:  # allocated before the trace: the layout knows its block and its request
            block = layout.size_of(e["addr"]) or allocation_bytes(e["size"], _CUDA)
            request = layout.requested_at_start(e["addr"])
            tail = block - rounded(request) if request else 0
        if not completions:
            layout.free(e["addr"])
        return -block, -tail
    if layout is not None:
        if action == "free_completed":
            layout.free(e["addr"])
        elif action == "segment_alloc":
            layout.segment_alloc(e["addr"], e["size"])
        elif action == "segment_free":
            layout.segment_free(e["addr"], e["size"])
    return None


class AllocatorTrace:
    """Records the allocator's history for the scanned steps and tags it with the scanner's event numbers."""

    def __init__(self, device: torch.device, with_stacks: bool = False):
        self.device = device
        self.with_stacks = with_stacks  # the user also asked for a memory_viz snapshot: keep Python stacks
        self._set = torch._C._cuda_setMemoryMetadata
        self.recording = False
        # Unique per trace: a thread keeps its last metadata after a scan, so a later scan in the same process
        # must not read an old tag as one of its own.
        self.prefix = f"scan{next(_TRACE_IDS)}:"
        self.layout: BlockLayout | None = None  # the allocator's blocks when recording began (see start)

    def start(self) -> None:
        # The blocks as they are now, taken before recording starts so that no entry is in both: without
        # expandable segments a block may be larger than its request, and the replay needs the layout to know.
        # (With them every block is split to its request: the layout adds nothing.)
        index = self.device.index if self.device.index is not None else torch.cuda.current_device()
        snap = torch.cuda.memory._snapshot()
        settings = snap.get("allocator_settings") or {}
        self.layout = None if settings.get("expandable_segments") else BlockLayout(snap["segments"], settings, index)
        self._start_segments = snap["segments"] if self.with_stacks else None  # kept in a dumped snapshot
        skipped = [] if self.with_stacks else SKIPPED_ACTIONS if self.layout is None else ["snapshot"]
        torch.cuda.memory._record_memory_history(
            enabled="all",
            context="all" if self.with_stacks else None,
            stacks="python",
            max_entries=MAX_ENTRIES,
            clear_history=True,
            skip_actions=skipped,
        )
        self.recording = True

    def tag(self, number: int) -> None:
        self._set(self.prefix + str(number))

    def stop(self, dump_to: str | None = None) -> list[dict]:
        """Stop recording; return this device's history entries (and pickle the snapshot if asked)."""
        if not self.recording:
            return []
        self._set("")
        try:
            snap = torch.cuda.memory._snapshot()
            if dump_to is not None:
                import pickle

                # the layout the replay started from: with it, the dump replays offline as the scanner did
                snap["scan_start_segments"] = self._start_segments

                with open(dump_to, "wb") as fh:
                    pickle.dump(snap, fh)
        finally:
            torch.cuda.memory._record_memory_history(enabled=None)
            self.recording = False
        traces = snap.get("device_traces") or []
        index = self.device.index if self.device.index is not None else torch.cuda.current_device()
        return traces[index] if index < len(traces) else []

    def abandon(self) -> None:
        if self.recording:
            self._set("")
            torch.cuda.memory._record_memory_history(enabled=None)
            self.recording = False


# Indices into a probe state tuple (see MemoryProbe._sample).
PHASE, SAVED, GRADS, OPTIMIZER, RC_BASE, RC_UPTO, CLAIMS_PREVIOUS = range(7)


def resolve_phases(
    states: list[tuple], after_backward: str, clip: str, optimizer: str, other: str
) -> list[str]:
    """Phase of each state, with the interval after a backward named once the next boundary is known:
    clipping when the optimizer step follows, "other" when another micro-batch's forward does."""
    phases = [s[PHASE] for s in states]
    i = 0
    while i < len(phases):
        if phases[i] != after_backward:
            i += 1
            continue
        j = i
        while j < len(phases) and phases[j] == after_backward:
            j += 1
        name = clip if j < len(phases) and phases[j] == optimizer else other
        phases[i:j] = [name] * (j - i)
        i = j
    return phases


@dataclass
class StepPeak:
    """Where a step's allocator peak happened and what the categories were at that instant."""

    peak: int
    owner: int  # the state whose categories held at the peak
    phase: str
    activations: int
    grads: int
    optimizer: int
    phase_peaks: dict
    activations_max: int
    allocated_at: dict  # tag -> allocated when the tag began (for boundary snapshots)
    activations_at: dict  # tag -> activations of that state
    tails: int = 0  # bytes of blocks beyond their requests at the peak (scanner.block_layout)


def _owner(states: list[tuple], tag: int, end: int) -> int:
    """The state whose categories held during tag's interval: the next one if its event claims the interval."""
    return tag + 1 if tag + 1 <= end and states[tag + 1][CLAIMS_PREVIOUS] else tag


def activations_of(state: tuple, start_allocated: dict) -> int:
    """Saved-tensor bytes of a state plus the live recomputed activations of the current checkpointed layer."""
    base, upto = state[RC_BASE], state[RC_UPTO]
    live = 0
    if base is not None and upto is not None and base in start_allocated and upto in start_allocated:
        live = max(0, start_allocated[upto] - start_allocated[base])
    return state[SAVED] + live


def step_peak(states: list[tuple], phases: list[str], rep: Replay, first: int, end: int) -> StepPeak:
    """The peak over the intervals of tags first..end (end = the step-end boundary's tag, included so that
    the result compares with the allocator's peak counter read right after it)."""
    best_tag, best = first, -1
    phase_peaks: dict[str, int] = {}
    act_at = {}
    for tag in range(first, end + 1):
        act_at[tag] = activations_of(states[tag], rep.start_allocated)
        value = rep.interval_peak.get(tag, -1)
        owner = _owner(states, tag, end)
        if tag < end and value > phase_peaks.get(phases[owner], -1):
            phase_peaks[phases[owner]] = value
        if value > best:
            best_tag, best = tag, value
    owner = _owner(states, best_tag, end)
    s = states[owner]
    return StepPeak(
        peak=best,
        owner=owner,
        phase=phases[owner],
        activations=activations_of(s, rep.start_allocated),
        grads=s[GRADS],
        optimizer=s[OPTIMIZER],
        phase_peaks=phase_peaks,
        activations_max=max(act_at.values(), default=0),
        allocated_at={t: rep.start_allocated[t] for t in range(first, end + 1) if t in rep.start_allocated},
        activations_at=act_at,
        tails=rep.interval_tails.get(best_tag, 0),
    )
