"""One torch.profiler session around the memory-scanned step(s): collectives, attention kernels, a trace file.

Only one profiler can run at a time, so a single session serves every question asked of the scanned step:
which collectives ran (scanner.collectives), which attention kernel ran (scanner.kernels), and the chrome
trace the user asked for. CPU activity alone answers the attention question; CUDA activity is added for
NCCL kernel times or a trace on a GPU. The memory-scanned step is not the timed step, so its cost is free.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from typing import Any

import torch

from .collectives import summarise_trace
from .kernels import attention_summary
from .outputs import UMASK

logger = logging.getLogger(__name__)


class StepProfiler:
    def __init__(self, device_type: str, collectives: bool, trace_path: str | None = None):
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device_type == "cuda" and (collectives or trace_path):
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.collectives = collectives
        self.trace_path = trace_path
        # gloo collectives are recognised by their input shapes; nothing else needs them.
        self.profiler = torch.profiler.profile(activities=activities, record_shapes=collectives)

    def start(self) -> None:
        self.profiler.start()

    def stop(self, world_size: int, write: bool = True) -> tuple[dict | None, dict | None, str | None]:
        """(collective summary or None, attention summary, trace path written or None)."""
        self.profiler.stop()
        if not write:
            return None, None, None
        # The trace is exported beside its destination (os.replace cannot cross filesystems); with no
        # destination, into the system's temp folder, read and removed.
        folder = os.path.dirname(os.path.abspath(self.trace_path)) if self.trace_path else None
        if folder:
            os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".json", prefix=".scan-trace-", dir=folder)
        os.close(fd)
        try:
            self.profiler.export_chrome_trace(tmp)
            with open(tmp) as handle:
                trace: dict[str, Any] = json.load(handle)
            written = None
            if self.trace_path:
                os.chmod(tmp, 0o666 & ~UMASK)
                os.replace(tmp, self.trace_path)
                written = self.trace_path
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        cpu_ops = (e.get("name", "") for e in trace.get("traceEvents", [])
                   if isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") == "cpu_op")
        attention = attention_summary(cpu_ops)
        collectives = summarise_trace(trace, world_size) if self.collectives else None
        return collectives, attention, written
