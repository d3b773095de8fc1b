"""One torch.profiler session around the memory-scanned step(s): collectives, attention kernels, kernel split, a trace.

Only one profiler can run at a time, so a single session serves every question asked of the scanned step:
which collectives ran (scanner.collectives), which attention kernel ran (scanner.kernels), where the GPU's
time went kernel by kernel (scanner.kernel_split), and the chrome trace the user asked for. CPU activity alone
answers the attention question; CUDA activity is added for NCCL kernel times, the kernel split or a trace on a
GPU. The memory-scanned step is not the timed step, so its cost is free.

CUDA activity leaves the scanner's memory figures alone: CUPTI keeps its activity records in host buffers and
never allocates through PyTorch's caching allocator, from which every memory category and peak is read
(`scan_mem_nvml_used` and `scan_mem_cuda_context`, read from the driver, may include what CUPTI itself holds).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import torch

from .atomic import atomic_via_tmp
from .collectives import summarise_trace
from .kernel_split import kernel_rows, marker_name, summarise_kernels, write_rows
from .kernels import attention_summary

logger = logging.getLogger(__name__)

# Kineto's tracing-probe lines, printed at every session's start and stop whatever its log level (only
# KINETO_LOG_LEVEL=6 hides them, and its errors with them): `USDT:2026-11-28 12:00:00 1:1 ...cpp:52] profiler_start`.
PROBE_LINE = re.compile(r"^(USDT|STAGE):\d{4}-\d\d-\d\d [\d:]+ \d+:\d+ \w+\.cpp:\d+\] ")


@contextlib.contextmanager
def without_probe_lines() -> Iterator[None]:
    """Within it, what the process writes to its stderr (fd 2, where Kineto's C++ writes) passes through, but for
    Kineto's probe lines: they filled `benchmark.py verify`'s output and every experiment's stderr.log."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            kept = [line for line in capture.read().decode(errors="replace").splitlines(keepends=True)
                    if not PROBE_LINE.match(line)]
            if kept:
                os.write(2, "".join(kept).encode())


class StepProfiler:
    def __init__(self, device_type: str, collectives: bool, trace_path: str | None = None,
                 kernels: bool = False, kernel_rows_path: str | None = None):
        activities = [torch.profiler.ProfilerActivity.CPU]
        # The kernel split needs the GPU's own activity: on a CPU run there is nothing to split.
        self.kernels = kernels and device_type == "cuda"
        self.kernels_note = None if self.kernels or not kernels else f"no GPU kernels: the step ran on {device_type}"
        if device_type == "cuda" and (collectives or trace_path or self.kernels):
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.collectives = collectives
        self.trace_path = trace_path
        self.kernel_rows_path = kernel_rows_path if self.kernels else None
        self.steps = 0
        # gloo collectives are recognised by their input shapes, a kernel's work by its operator's shapes.
        self.profiler = torch.profiler.profile(activities=activities, record_shapes=collectives or self.kernels)

    def start(self) -> None:
        with without_probe_lines():
            self.profiler.start()

    def mark(self, event: str, phase: str) -> None:
        """An instant marker at a phase boundary (the phase probe's listener): kernels launched after it and before
        the next one belong to `phase`."""
        if event == "step_start":
            self.steps += 1
        with torch.profiler.record_function(marker_name(event, phase)):
            pass

    def stop(self, world_size: int, write: bool = True) -> tuple[dict | None, dict | None, str | None, dict | None]:
        """(collective summary or None, attention summary, trace path written or None, kernel split or None)."""
        with without_probe_lines():
            self.profiler.stop()
        if not write:
            return None, None, None, None
        trace, written = self._export()
        cpu_ops = (e.get("name", "") for e in trace.get("traceEvents", [])
                   if isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") == "cpu_op")
        attention = attention_summary(cpu_ops)
        collectives = summarise_trace(trace, world_size) if self.collectives else None
        return collectives, attention, written, self._kernel_split(trace)

    def _export(self) -> tuple[dict[str, Any], str | None]:
        """The trace as a dict, and where it was written: the user's path (atomically, scanner.atomic), else a
        scratch folder that is removed."""
        if self.trace_path:
            atomic_via_tmp(self.trace_path, self.profiler.export_chrome_trace)
            with open(self.trace_path) as handle:
                return json.load(handle), self.trace_path
        with tempfile.TemporaryDirectory(prefix="scan-trace-") as folder:
            path = os.path.join(folder, "trace.json")
            self.profiler.export_chrome_trace(path)
            with open(path) as handle:
                return json.load(handle), None

    def _kernel_split(self, trace: dict[str, Any]) -> dict | None:
        """The kernel split, or a note saying why there is none; never raises (the step's other figures stand)."""
        if not self.kernels:
            return {"source": None, "note": self.kernels_note} if self.kernels_note else None
        try:
            rows, left_out = kernel_rows(trace)
            if not rows:
                return {"source": None, "note": f"the trace holds no GPU kernel launched in the scanned step "
                                                f"(left out: {left_out})"}
            summary = summarise_kernels(rows, self.steps, left_out)
            if self.kernel_rows_path:
                write_rows(self.kernel_rows_path, rows)
                summary["file"] = self.kernel_rows_path
            return summary
        except Exception as exc:  # a measurement aid must not fail the experiment: an empty column and the reason
            logger.warning("scanner: kernel split failed (%r); scan_kernel_* left empty", exc)
            return {"source": None, "note": f"kernel split failed: {exc!r}"[:300]}
