"""A harness tracker from another package: the experiment's wall time as the harness saw it, in its own column."""

import contextlib
import time
from dataclasses import dataclass, field

from tunebench.bounds import Range
from tunebench.plugins import cli_option
from tunebench.results.columns.types import BOOKKEEPING, METRIC, Column
from tunebench.vocabulary import Direction, MetricFamily


@dataclass(frozen=True)
class WallClockSettings:
    scale: float = field(default=1.0, metadata=cli_option(
        "--wall_clock_scale", "multiply the measured seconds by this", Range(0, 1000, low_open=True), type=float))


class WallClockTracker:
    name = "wall_clock"
    Settings = WallClockSettings
    COLUMNS = (
        Column("demo_wall_seconds", METRIC, "s", "the experiment's wall time seen by the demo tracker", "Bookkeeping",
               Direction.HIGHER_IS_WORSE, MetricFamily.STARTUP),
        Column("demo_tracker_name", BOOKKEEPING, "-", "which demo tracker measured it", "Bookkeeping"),
    )

    def __init__(self, settings: WallClockSettings):
        self.settings = settings

    @contextlib.contextmanager
    def around(self, device_type, gpu_ids, folder):
        started = {"at": time.monotonic()}
        yield started
        started["seconds"] = time.monotonic() - started["at"]

    def columns(self, handle, row, folder):
        return {"demo_wall_seconds": round(handle["seconds"] * self.settings.scale, 6),
                "demo_tracker_name": self.name}
