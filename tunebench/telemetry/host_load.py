"""The host's load while an experiment ran, against its cores: a CPU run on a busy host shares the cores with other
processes, and its times say more about them than about the configuration (`host loaded` warning)."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

SAMPLE_SECONDS = 2.0  # the 1-minute load average moves slowly: a sample every 2 s sees every rise


class LoadWatch:
    """The highest 1-minute load average seen from entering to leaving (sampled at both ends and in between)."""

    def __init__(self):
        self.highest: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="host-load", daemon=True)

    def _sample(self) -> None:
        try:
            load = os.getloadavg()[0]
        except OSError:  # no load average on this platform: the columns stay empty
            return
        self.highest = load if self.highest is None else max(self.highest, load)

    def _loop(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self._sample()

    def __enter__(self) -> LoadWatch:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sample()


class HostLoadTracker:
    """Always on: `host_load_avg_1m` and `host_cpu_count` on every row; a CPU run on a host loaded beyond its
    cores gets a `host loaded` measurement warning."""

    name = "host_load"

    def __init__(self):
        self.device_type = "cpu"

    def around(self, device_type: str, gpu_ids: list[int], folder: Path) -> LoadWatch:
        self.device_type = device_type
        return LoadWatch()

    def columns(self, watch: LoadWatch, row: dict[str, Any], folder: Path) -> dict[str, Any]:
        cores = os.cpu_count() or 1
        found: dict[str, Any] = {"host_cpu_count": cores, "host_load_avg_1m": None}
        if watch.highest is None:
            return found
        found["host_load_avg_1m"] = round(watch.highest, 2)
        if self.device_type == "cpu" and watch.highest > cores:
            warning = (f"host loaded: the 1-minute load average reached {watch.highest:.2f} on {cores} cores during "
                       "the run (other processes shared the CPU: its times are not comparable)")
            found["measurement_warning"] = "; ".join(w for w in (row.get("measurement_warning"), warning) if w)
        return found
