"""Telemetry measured by the harness around an experiment's processes, one kind per `memory_logging` mode.

A harness tracker wraps the experiment's run (`around`: a context manager) and gives its columns after it.
Adding a kind is one class and one line in HARNESS_TRACKERS; the in-process kinds (the scanner, HF's memory
metrics) are in tunebench.experiment.trackers.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SidecarSettings:
    backend: Literal["nvidia-smi", "nvml"] = "nvidia-smi"  # the nvidia-smi CLI or NVML, both in a separate process
    loop_ms: int = 100  # poll period


class NvidiaSidecarTracker:
    """GPU memory, utilisation and power polled by a separate process restricted to the experiment's GPUs."""

    name = "nvidia"

    def __init__(self, settings: SidecarSettings):
        self.settings = settings

    def around(self, device_type: str, gpu_ids: list[int], folder: Path):
        if device_type != "cuda":
            return contextlib.nullcontext(None)
        from tunebench.telemetry.gpus import query_gpus, resolve_visible_gpus
        from tunebench.telemetry.sidecar import NvidiaSmiSidecar

        try:
            gpus = resolve_visible_gpus(",".join(map(str, gpu_ids)), query_gpus())
        except ValueError as exc:  # the sidecar is an observer: it never stops the matrix
            logger.warning("nvidia-smi sidecar disabled for %s: %s", folder.name, exc)
            return contextlib.nullcontext(None)
        return NvidiaSmiSidecar(gpus, folder, loop_ms=self.settings.loop_ms, backend=self.settings.backend)

    def columns(self, sidecar, row: dict[str, Any], folder: Path) -> dict[str, Any]:
        if sidecar is None:
            return {}
        from tunebench.telemetry.steady_energy import steady_energy_columns

        return {**sidecar.summary(nonpad_tokens=row.get("train_nonpad_tokens")),
                **steady_energy_columns(sidecar, folder)}


HARNESS_TRACKERS = {NvidiaSidecarTracker.name: NvidiaSidecarTracker}
