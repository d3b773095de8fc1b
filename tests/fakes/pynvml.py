"""Fake nvidia-ml-py (import name pynvml) over the fake_gpus inventory, for the NVML sidecar backend tests."""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fake_gpus  # noqa: E402

_samples: dict[str, int] = {}


class NVMLError(Exception):
    pass


def nvmlInit() -> None:
    fake_gpus.record_invocation("nvml", sys.argv[1:])
    if fake_gpus.mode() == "fail":
        raise NVMLError("Driver Not Loaded")


def _find(uuid: str) -> tuple[int, dict]:
    for position, gpu in enumerate(fake_gpus.gpus()):
        if gpu["uuid"] == uuid:
            return position, gpu
    raise NVMLError("Not Found")


def nvmlDeviceGetHandleByUUID(uuid: str):
    position, gpu = _find(uuid)
    return SimpleNamespace(position=position, gpu=gpu)


nvmlMemory_v2 = 0x02000028  # the real constant: sizeof(nvmlMemory_v2_t) | 2 << 24


def nvmlDeviceGetMemoryInfo(handle, version=None):
    # The k-th reading of a handle follows the same ramp as the fake nvidia-smi's k-th loop sample.
    k = _samples.get(handle.gpu["uuid"], 0)
    _samples[handle.gpu["uuid"]] = k + 1
    used_mib = handle.gpu["baseline_mib"] + fake_gpus.extra_mib(handle.position, k)
    return SimpleNamespace(used=int(used_mib * 2**20), total=int(handle.gpu["memory_total"] * 2**20))


def nvmlDeviceGetIndex(handle) -> int:
    return handle.gpu["index"]


def nvmlDeviceGetPciInfo(handle):
    return SimpleNamespace(busId=handle.gpu["pci_bus_id"].encode())  # old bindings return bytes


def nvmlDeviceGetUtilizationRates(handle):
    return SimpleNamespace(gpu=handle.gpu["util"], memory=0)


def nvmlDeviceGetPowerUsage(handle) -> int:
    if handle.gpu.get("power_w") is None:
        raise NVMLError("Not Supported")
    return int(handle.gpu["power_w"] * 1000)  # mW
