"""Every GPU kernel of the scanned step from its profiler trace: class, phase, launching operator; rows and sums.

How a kernel gets its phase: the phase hooks of the scanned step drop an instant `record_function` marker
(`scanner.phase:<event>:<phase entered>`) at every boundary, on whichever thread the hook runs (the forward's
and the optimizer's on the Python thread, the backward's on autograd's device thread). Markers and kernel
launches (`cudaLaunchKernel`, cuBLAS's `cuLaunchKernelEx`) are host events on one clock, and a kernel's launch is
linked to the kernel by its correlation id, so a kernel belongs to the phase in force when it was *launched*,
however late the GPU ran it. A kernel whose launch is not in the trace falls back to its launching operator's
start (the `External id`), else it is counted as unmatched. Kernels launched outside the scanned step(s) (work
queued before the profiler started) are counted and left out.

Sums are per scanned step (totals ÷ steps). `busy` is the union of the kernels' intervals (streams overlap),
`time` the sum of their durations.
"""

from __future__ import annotations

import bisect
import csv
import gzip
import io
import json
import logging
import re
from typing import Any

from .atomic import atomic_write
from .kernel_classes import CLASSES, classify

logger = logging.getLogger(__name__)

MARK = "scanner.phase:"
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
ROW_FIELDS = ("step", "phase", "class", "start_us", "dur_us", "launch_us", "stream", "name", "op", "op_dims",
              "op_types", "bytes", "grid", "block")
PHASES = ("forward", "backward", "clip", "optimizer", "other")
SYNC = "sync"  # a host call that waited for the GPU (not GPU work: kept out of every GPU sum)
_HOST_WAIT = re.compile(r"Synchronize|^cudaMemcpy$|^cudaMemcpy2D$|^cuMemcpyDtoH|^cuMemcpyHtoD(?!Async)")


def marker_name(event: str, phase: str) -> str:
    return f"{MARK}{event}:{phase}"


def _markers(events: list[dict]) -> list[tuple[float, str, str]]:
    found = []
    for e in events:
        name = str(e.get("name", ""))
        if name.startswith(MARK) and e.get("cat") in ("user_annotation", "cpu_op", "python_function", None):
            event, _, phase = name[len(MARK):].partition(":")
            found.append((float(e["ts"]), event, phase))
    return sorted(found)


def phase_timeline(markers: list[tuple[float, str, str]]) -> tuple[list[float], list[tuple[str, int] | None]]:
    """(interval starts, (phase, step number) of each interval or None outside a step) from the sorted markers.

    The interval after a backward is "clip" when the optimizer step follows it, "other" otherwise (the
    scanner's own rule for `time_clip`)."""
    starts: list[float] = []
    labels: list[tuple[str, int] | None] = []
    step = 0
    inside = False
    for i, (ts, event, phase) in enumerate(markers):
        if event == "step_start":
            step, inside = step + 1, True
        elif event == "step_end":
            inside = False
        if phase == "after_backward":
            following = markers[i + 1][1] if i + 1 < len(markers) else ""
            phase = "clip" if following == "optimizer_start" else "other"
        starts.append(ts)
        labels.append((phase, step) if inside else None)
    return starts, labels


def locate(ts: float, starts: list[float], labels: list) -> tuple[str, int] | None:
    """The (phase, step) in force at host time `ts`; None before the first marker or outside the steps."""
    i = bisect.bisect_right(starts, ts) - 1
    return labels[i] if i >= 0 else None


class _Operators:
    """The operator that launched a kernel: the innermost `cpu_op` on the launching thread whose interval holds the
    launch (independent of how a torch version numbers `External id`s), else the one its `External id` names."""

    def __init__(self, events: list[dict]):
        self.by_thread: dict[Any, tuple[list[float], list[dict]]] = {}
        self.by_id: dict[Any, dict] = {}
        ops: dict[Any, list[dict]] = {}
        for e in events:
            if e.get("cat") == "cpu_op" and "ts" in e:
                ops.setdefault(e.get("tid"), []).append(e)
                ext = (e.get("args") or {}).get("External id")
                if ext is not None:
                    self.by_id.setdefault(ext, e)
        for tid, found in ops.items():
            found.sort(key=lambda e: float(e["ts"]))
            self.by_thread[tid] = ([float(e["ts"]) for e in found], found)

    def find(self, ts: float | None, tid: Any, ext: Any) -> dict | None:
        if ts is not None and tid in self.by_thread:
            starts, found = self.by_thread[tid]
            i = bisect.bisect_right(starts, ts) - 1
            for j in range(i, max(-1, i - 200), -1):  # the latest-starting op that still holds ts: the innermost
                if float(found[j]["ts"]) + float(found[j].get("dur", 0.0)) >= ts:
                    return found[j]
        return self.by_id.get(ext) if ext is not None else None


def _launches(events: list[dict]) -> dict[Any, tuple[float, Any, Any]]:
    """(time, thread, External id) of each launch by correlation id (the earliest, when the runtime and the
    driver API both recorded it)."""
    launches: dict[Any, tuple[float, Any, Any]] = {}
    for e in events:
        args = e.get("args") or {}
        if e.get("cat") in LAUNCH_CATEGORIES and "correlation" in args and "ts" in e:
            corr, ts = args["correlation"], float(e["ts"])
            if corr not in launches or ts < launches[corr][0]:
                launches[corr] = (ts, e.get("tid"), args.get("External id"))
    return launches


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":")) if value not in (None, "", []) else ""


def kernel_rows(trace: dict[str, Any]) -> tuple[list[dict], dict[str, int]]:
    """One row per GPU activity launched inside the scanned step(s), and the counts of those left out."""
    events = [e for e in trace.get("traceEvents", []) if isinstance(e, dict) and e.get("ph") == "X"]
    markers = _markers(events)
    starts, labels = phase_timeline(markers)
    origin = next((ts for ts, event, _ in markers if event == "step_start"), 0.0)
    launches, operators = _launches(events), _Operators(events)
    rows: list[dict] = []
    left_out = {"unmatched": 0, "outside": 0}
    for e in events:
        cat = e.get("cat")
        if cat not in DEVICE_CATEGORIES or "ts" not in e:
            continue
        args = e.get("args") or {}
        launched, tid, ext = launches.get(args.get("correlation"), (None, None, None))
        op = operators.find(launched, tid, args.get("External id", ext) if launched is None else ext)
        if launched is None and op is not None:
            launched = float(op["ts"])
        where = locate(launched, starts, labels) if launched is not None else None
        if where is None:
            left_out["unmatched" if launched is None else "outside"] += 1
            continue
        name, op_args = str(e.get("name", "")), (op or {}).get("args") or {}
        rows.append({
            "step": where[1], "phase": where[0], "class": classify(name, cat),
            "start_us": round(float(e["ts"]) - origin, 3), "dur_us": float(e.get("dur", 0.0)),
            "launch_us": round(launched - origin, 3), "stream": args.get("stream", ""), "name": name,
            "op": (op or {}).get("name", ""), "op_dims": _compact(op_args.get("Input Dims")),
            "op_types": _compact(op_args.get("Input type")), "bytes": args.get("bytes", ""),
            "grid": _compact(args.get("grid")), "block": _compact(args.get("block")),
        })
    rows += _sync_rows(events, starts, labels, origin)
    return rows, left_out


def _sync_rows(events: list[dict], starts: list[float], labels: list, origin: float) -> list[dict]:
    """Host calls that wait for the GPU (stream/device/event synchronize, a synchronous memcpy), class `sync`:
    where the host's timeline depends on the GPU's (a projection must not treat that wait as host work)."""
    rows = []
    for e in events:
        if e.get("cat") not in LAUNCH_CATEGORIES or not _HOST_WAIT.search(str(e.get("name", ""))) or "ts" not in e:
            continue
        where = locate(float(e["ts"]), starts, labels)
        if where is not None:
            ts = round(float(e["ts"]) - origin, 3)
            rows.append({"step": where[1], "phase": where[0], "class": SYNC, "start_us": ts,
                         "dur_us": float(e.get("dur", 0.0)), "launch_us": ts, "stream": "", "name": e["name"],
                         "op": "", "op_dims": "", "op_types": "", "bytes": "", "grid": "", "block": ""})
    return rows


def union_seconds(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of (start, end) intervals in microseconds, as seconds."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total / 1e6


def summarise_kernels(rows: list[dict], steps: int, left_out: dict[str, int] | None = None) -> dict[str, Any]:
    """Per scanned step: kernel count, summed and busy (union) seconds, per class and per phase × class."""
    steps = max(1, steps)
    host_sync = sum(r["dur_us"] for r in rows if r["class"] == SYNC) / 1e6 / steps
    rows = [r for r in rows if r["class"] != SYNC]
    spans = [(r["start_us"], r["start_us"] + r["dur_us"]) for r in rows]
    by_step: dict[int, list[tuple[float, float]]] = {}
    for r, span in zip(rows, spans, strict=True):
        by_step.setdefault(r["step"], []).append(span)
    classes = {c: 0.0 for c in CLASSES}
    phases: dict[str, dict[str, Any]] = {}
    for r, span in zip(rows, spans, strict=True):
        classes[r["class"]] += r["dur_us"] / 1e6 / steps
        entry = phases.setdefault(r["phase"], {"count": 0, "time_s": 0.0, "spans": [], "classes": {}})
        entry["count"] += 1
        entry["time_s"] += r["dur_us"] / 1e6 / steps
        entry["spans"].append(span)
        entry["classes"][r["class"]] = entry["classes"].get(r["class"], 0.0) + r["dur_us"] / 1e6 / steps
    for entry in phases.values():
        entry["busy_s"] = union_seconds(entry.pop("spans")) / steps
        entry["count"] /= steps
    return {
        "source": "cuda", "steps": steps, "count": len(rows) / steps,
        "time_s": sum(r["dur_us"] for r in rows) / 1e6 / steps, "busy_s": union_seconds(spans) / steps,
        "span_s": sum(max(b for _, b in s) - min(a for a, _ in s) for s in by_step.values()) / 1e6 / steps,
        "classes": classes, "phases": {p: phases[p] for p in sorted(phases, key=_phase_order)},
        "host_sync_s": host_sync, "left_out": dict(left_out or {}), "note": None,
    }


def _phase_order(phase: str) -> int:
    return PHASES.index(phase) if phase in PHASES else len(PHASES)


def write_rows(path: str, rows: list[dict]) -> None:
    """The per-kernel rows as a gzipped CSV (fixed mtime: the same rows give the same bytes), written atomically."""
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=ROW_FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write(path, gzip.compress(text.getvalue().encode(), compresslevel=6, mtime=0))


def read_rows(path: str) -> list[dict]:
    """The rows `write_rows` wrote, numbers as numbers (the projection's reader, and the tests')."""
    with gzip.open(path, "rt", newline="") as handle:
        rows = list(csv.DictReader(handle))
    for r in rows:
        r["step"] = int(r["step"])
        for key in ("start_us", "dur_us", "launch_us"):
            r[key] = float(r[key])
    return rows


def _left_out_note(left_out: dict[str, int]) -> str | None:
    parts = [f"{n} {what}" for what, n in (("with no launch or operator in the trace", left_out.get("unmatched", 0)),
                                            ("launched outside the scanned step", left_out.get("outside", 0))) if n]
    return "left out: " + ", ".join(parts) if parts else None


def flat_kernels(summary: dict[str, Any] | None, prefix: str = "scan_kernel_") -> dict[str, Any]:
    """`scan_kernel_*` columns: totals, per class, per phase (busy and per class); a note when there are none."""
    if not summary:
        return {}
    if summary.get("source") is None:
        return {prefix + "note": summary.get("note")}
    out: dict[str, Any] = {
        prefix + "source": summary["source"], prefix + "count": summary["count"], prefix + "time": summary["time_s"],
        prefix + "busy_time": summary["busy_s"], prefix + "span_time": summary["span_s"],
        prefix + "host_sync_time": summary.get("host_sync_s"),
        prefix + "note": summary.get("note") or _left_out_note(summary.get("left_out") or {}),
    }
    for cls, seconds in summary["classes"].items():
        out[f"{prefix}{cls}_time"] = seconds
    for phase, entry in summary["phases"].items():
        out[f"{prefix}{phase}_busy_time"] = entry["busy_s"]
        for cls, seconds in entry["classes"].items():  # the classes the phase ran (an absent one is 0)
            out[f"{prefix}{phase}_{cls}_time"] = seconds
    return out
