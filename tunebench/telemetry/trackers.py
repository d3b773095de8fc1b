"""Telemetry measured by the harness around an experiment's processes, chosen by name from TRACKERS.

A harness tracker wraps the experiment's run (`around(device_type, gpu_ids, folder)`: a context manager) and
gives its columns after it (`columns(handle, row, folder)`); its options, if any, are a dataclass `Settings`
whose fields carry their command-line face (tunebench.plugins.cli_option). Adding one is one class and one line
in TRACKERS, or an entry point of another package (group `tunebench.trackers`); a tracker's new columns are
declared in its `COLUMNS` (tunebench.results.columns.types.Column) so that the CSV, compare and the report know them.
The in-process kinds (the scanner, HF's memory metrics) are in tunebench.experiment.trackers.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tunebench.bounds import Range
from tunebench.plugins import Registry, cli_option

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SidecarSettings:
    """The nvidia-smi sidecar's options."""

    backend: Literal["nvidia-smi", "nvml"] = field(default="nvidia-smi", metadata=cli_option(
        "--nvidia_smi_backend", "poll with the nvidia-smi CLI or NVML (nvidia-ml-py), both in a separate process",
        choices=["nvidia-smi", "nvml"]))
    loop_ms: int = field(default=100, metadata=cli_option(
        "--nvidia_smi_loop_ms", "sidecar poll period", Range(1, 60_000), type=int, metavar="MS",
        aliases=["--loop_ms"]))


class NvidiaSidecarTracker:
    """GPU memory, utilisation and power polled by a separate process restricted to the experiment's GPUs."""

    name = "nvidia"
    Settings = SidecarSettings

    def __init__(self, settings: SidecarSettings | None = None):
        self.settings = settings or SidecarSettings()

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


TRACKERS = Registry("tracker", "tunebench.trackers", {
    "host_load": "tunebench.telemetry.host_load:HostLoadTracker",
    NvidiaSidecarTracker.name: "tunebench.telemetry.trackers:NvidiaSidecarTracker",
    "steady_environment": "tunebench.telemetry.environment_summary:SteadyEnvironmentTracker",
})
# On every run: what else ran on the host and on the experiment's GPUs is part of every measurement.
ALWAYS = ("host_load", "steady_environment")


def harness_trackers(names: tuple[str, ...], settings_of) -> list[tuple[str, Any]]:
    """(name, tracker) of one experiment: the always-on ones, then those named (each once), made with the run's
    settings of their type (`settings_of(Settings)`, defaults when the run gives none). A plugin that fails to
    load or to be made is a PluginError naming it."""
    made = []
    for name in dict.fromkeys((*ALWAYS, *names)):
        cls = TRACKERS.load(name)
        settings_class = getattr(cls, "Settings", None)
        with TRACKERS.blame(name, "to start"):
            made.append((name, cls(settings_of(settings_class)) if settings_class is not None else cls()))
    return made
