"""Phase timestamps without host syncs: CUDA events on the GPU, perf_counter_ns on the CPU."""

from __future__ import annotations

import time

import torch


class CpuClock:
    """Timestamps are host nanoseconds; on CPU the host is where the work happens."""

    def mark(self) -> int:
        return time.perf_counter_ns()

    def elapsed(self, start: int, end: int) -> float:
        return (end - start) / 1e9

    def synchronize(self) -> None:
        pass

    def reached(self, mark: int) -> bool:
        return True


class CudaClock:
    """Timestamps are CUDA events recorded on the current stream; reading them needs one sync at the end.

    An event measures when the GPU reaches that point of the stream, so host-side waits (data loading,
    logging) show up as device idle time between events and land in the phase that spans them.
    """

    def __init__(self, device: torch.device):
        self.device = device

    def mark(self) -> torch.cuda.Event:
        ev = torch.cuda.Event(enable_timing=True)
        ev.record(torch.cuda.current_stream(self.device))
        return ev

    def elapsed(self, start: torch.cuda.Event, end: torch.cuda.Event) -> float:
        return start.elapsed_time(end) / 1e3

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def reached(self, mark: torch.cuda.Event) -> bool:
        """Whether the device has passed `mark` (cudaEventQuery: never blocks, so never a host sync)."""
        return mark.query()


def make_clock(device: torch.device) -> CpuClock | CudaClock:
    return CudaClock(device) if device.type == "cuda" else CpuClock()
