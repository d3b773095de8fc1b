"""NVML (nvidia-ml-py) poller printing the same CSV lines as `nvidia-smi --query-gpu` (run as its own process).

Standalone on purpose (stdlib + pynvml only): the sidecar runs it by file path, so the poller process imports
neither torch nor tunebench. Usage:
    python -m tunebench.telemetry.nvml_sidecar --ids GPU-aaa,GPU-bbb [--loop-ms 100]
Without --loop-ms it prints one sample per GPU and exits, like nvidia-smi without -lms.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from datetime import datetime

logger = logging.getLogger(__name__)


def _text(value: bytes | str) -> str:
    # nvidia-ml-py returned bytes before 11.515 and str after.
    return value.decode() if isinstance(value, bytes) else value


def _or_na(read, scale: float = 1.0, digits: int = 0) -> str:
    """Read one NVML value, formatted like nvidia-smi; "[N/A]" where the GPU does not support it."""
    import pynvml

    try:
        value = read() * scale
    except pynvml.NVMLError:
        return "[N/A]"
    return f"{value:.{digits}f}"


def _memory_info(handle):
    """NVML v2 memory info, which matches nvidia-smi's memory.used; v1 on older drivers/bindings.

    v1 `used` also counts driver-reserved memory (480 MiB on an H100 with driver 580) that nvidia-smi lists
    apart; it is constant, so the sidecar's baseline subtraction cancels it either way.
    """
    import pynvml

    version = getattr(pynvml, "nvmlMemory_v2", None)
    if version is not None:
        try:
            return pynvml.nvmlDeviceGetMemoryInfo(handle, version=version)
        except (TypeError, pynvml.NVMLError):
            pass
    return pynvml.nvmlDeviceGetMemoryInfo(handle)


def sample_line(handle, uuid: str) -> str:
    """One CSV line in poll_log.POLL_FIELDS order for one GPU."""
    import pynvml

    now = datetime.now().strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
    memory = _memory_info(handle)
    fields = [
        now,
        str(pynvml.nvmlDeviceGetIndex(handle)),
        uuid,
        _text(pynvml.nvmlDeviceGetPciInfo(handle).busId),
        # MiB like nvidia-smi (whole MiB).
        str(memory.used // 2**20),
        str(memory.total // 2**20),
        _or_na(lambda: pynvml.nvmlDeviceGetUtilizationRates(handle).gpu),
        _or_na(lambda: pynvml.nvmlDeviceGetPowerUsage(handle), scale=1e-3, digits=2),  # mW → W
    ]
    return ", ".join(fields)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ids", required=True, help="comma-separated GPU UUIDs to poll")
    parser.add_argument("--loop-ms", type=int, default=None, help="poll period; omit for a single sample")
    args = parser.parse_args(argv)
    if args.loop_ms is not None and args.loop_ms < 1:
        parser.error(f"--loop-ms must be a positive integer, got {args.loop_ms}")
    try:
        import pynvml
    except ImportError:
        print("nvidia-ml-py is not installed: pip install nvidia-ml-py", file=sys.stderr)
        return 3
    try:
        pynvml.nvmlInit()
        uuids = [u.strip() for u in args.ids.split(",") if u.strip()]
        handles = [(pynvml.nvmlDeviceGetHandleByUUID(u), u) for u in uuids]
    except pynvml.NVMLError as exc:
        print(f"NVML initialisation failed: {exc}", file=sys.stderr)
        return 4
    period = None if args.loop_ms is None else args.loop_ms / 1000.0
    next_tick = time.monotonic()
    while True:
        try:
            lines = [sample_line(h, u) for h, u in handles]
        except pynvml.NVMLError as exc:  # e.g. GPU fell off the bus: stop loudly, as nvidia-smi does
            print(f"NVML query failed: {exc}", file=sys.stderr)
            return 5
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()  # stdout is a file: flush so a SIGTERM loses at most the current loop
        if period is None:
            return 0
        # Fixed-rate schedule (no drift from the sampling cost); skip ticks if we fell behind.
        next_tick += period
        delay = next_tick - time.monotonic()
        if delay < 0:
            next_tick = time.monotonic()
            delay = 0.0
        time.sleep(delay)


if __name__ == "__main__":
    sys.exit(main())
