"""Fake GPU inventory and per-sample values shared by the fake nvidia-smi and the fake pynvml."""

from __future__ import annotations

import json
import os
import sys

# Two H100s; PCI bus ids deliberately not in nvidia-smi index order is a test-level override.
DEFAULT_GPUS = [
    {
        "index": 0,
        "uuid": "GPU-5e1a2b3c-0000-4000-8000-00000000aaaa",
        "pci_bus_id": "00000000:18:00.0",
        "name": "NVIDIA H100 80GB HBM3",
        "memory_total": 81559,
        "driver": "550.54.15",
        "baseline_mib": 4,
        "power_w": 100.0,
        "util": 50,
        "mig": [],
    },
    {
        "index": 1,
        "uuid": "GPU-7f9d8e6c-1111-4111-8111-11111111bbbb",
        "pci_bus_id": "00000000:2A:00.0",
        "name": "NVIDIA H100 80GB HBM3",
        "memory_total": 81559,
        "driver": "550.54.15",
        "baseline_mib": 517,
        "power_w": 150.0,
        "util": 51,
        "mig": [],
    },
]


def gpus() -> list[dict]:
    """The fake inventory: FAKE_NVIDIA_SMI_GPUS (JSON list) or DEFAULT_GPUS."""
    raw = os.environ.get("FAKE_NVIDIA_SMI_GPUS")
    return json.loads(raw) if raw else DEFAULT_GPUS


def clock_fields(gpu: dict) -> dict:
    """Clocks, clock event reasons, temperature and power cap of a fake GPU (overridable per GPU entry)."""
    reasons = gpu.get("reasons", "0x0000000000000000")
    return {
        "clocks.sm": gpu.get("sm_clock", 1980),
        "clocks.max.sm": gpu.get("sm_clock_max", 1980),
        "clocks.mem": gpu.get("mem_clock", 2619),
        "clocks_event_reasons.active": reasons,
        "clocks_throttle_reasons.active": reasons,
        "temperature.gpu": gpu.get("temperature", 41),
        "power.limit": f"{gpu.get('power_limit', 700.0):.2f}",
        "enforced.power.limit": f"{gpu.get('power_limit', 700.0):.2f}",
    }


def unsupported() -> set[str]:
    """FAKE_NVIDIA_SMI_UNSUPPORTED: comma-separated fields this fake driver rejects, as an older/newer one would."""
    return set(filter(None, os.environ.get("FAKE_NVIDIA_SMI_UNSUPPORTED", "").split(",")))


def apps_text(fields: list[str], gpus: list[dict]) -> str:
    """`--query-compute-apps` lines from FAKE_NVIDIA_SMI_APPS (a JSON list of {pid, gpu (index), used_memory, name})."""
    lines = []
    for app in json.loads(os.environ.get("FAKE_NVIDIA_SMI_APPS", "[]")):
        values = {
            "pid": app["pid"],
            "gpu_uuid": gpus[app.get("gpu", 0)]["uuid"],
            "used_memory": app.get("used_memory", 100),
            "process_name": app.get("name", "python3"),
        }
        if any(f not in values for f in fields):
            print(
                f'Field "{next(f for f in fields if f not in values)}" is not a valid field to query.', file=sys.stderr
            )
            sys.exit(2)
        lines.append(", ".join(str(values[f]) for f in fields))
    return "".join(line + "\n" for line in lines)


def mode() -> str:
    """FAKE_NVIDIA_SMI_MODE: ok | malformed | fail | hang | hang_ignore_term | die_after:<n> | apps_fail.

    Appending "_loop" (e.g. fail_loop, hang_ignore_term_loop) applies the knob to the -lms poller only.
    """
    return os.environ.get("FAKE_NVIDIA_SMI_MODE", "ok")


def extra_mib(position: int, sample: int) -> float:
    """Memory above baseline at loop sample k: ramps to a peak of 3000·(position+1) MiB, then 2000·(...)."""
    pattern = [0, 1000, 3000, 2000]
    return pattern[min(sample, len(pattern) - 1)] * (position + 1)


def record_invocation(kind: str, argv: list[str]) -> None:
    """Append {"pid", "kind", "argv"} to FAKE_NVIDIA_SMI_PIDFILE so tests can find and check the process."""
    path = os.environ.get("FAKE_NVIDIA_SMI_PIDFILE")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"pid": os.getpid(), "kind": kind, "argv": argv}) + "\n")
