"""The timed steps of a scan: phase marks only, on steps the memory hooks never touch, read without a sync.

Why a separate window: the memory hooks (saved-tensor packing, per-parameter gradient hooks, allocator tags)
cost time on small models, so a step that is memory-scanned is not a representative step. The time window
is a run of later steps with only the phase hooks; the report takes its phases from the window's median step.
Its marks are read once the device has passed the last one (`ready()` asks without blocking), so timing adds
no host sync to the run either.
"""

from __future__ import annotations

import logging
from typing import Any

from .phases import PhaseProbe
from .record import StepRecord

logger = logging.getLogger(__name__)


class TimeWindow:
    """Arms a PhaseProbe for steps first..last (inclusive) and collects their records."""

    def __init__(self, first: int, last: int):
        self.first, self.last = first, last
        self.records: list[StepRecord] = []
        self.probe: PhaseProbe | None = None
        self.closed = False  # the window ended (all steps done, training ended, or a step raised)
        self.clock = None
        self._last_mark: Any = None

    def maybe_arm(self, global_step: int, model, optimizer) -> None:
        """Arm before step `first`, i.e. at the end of step first - 1 (or at train begin when first == 1)."""
        if self.probe is not None or self.closed or global_step + 1 != self.first or model is None:
            return
        self.probe = PhaseProbe(model, optimizer)
        self.probe.install()
        self.clock = self.probe.clock
        self.probe.begin_step(self.first)

    def restart_if_idle(self) -> bool:
        """At an epoch boundary: move the open step's start past the epoch bookkeeping."""
        rec = self.probe.open_record if self.probe is not None else None
        if rec is not None and rec.micro_batches == 0:
            self.probe.restart(None)
            return True
        return False

    def on_step_end(self, global_step: int) -> None:
        probe = self.probe
        if probe is None:
            return
        if probe.aborted or not probe.installed:
            logger.warning("Scanner: a timed step raised; the time window is dropped")
            self.records, self.closed = [], True
            self.remove()
            return
        rec = probe.open_record
        if rec is None or rec.step != global_step:
            return
        rec, end_mark = probe.end_step()
        self.records.append(rec)
        self._last_mark = end_mark
        if global_step >= self.last:
            self.closed = True
            self.remove()
        else:
            probe.begin_step(global_step + 1, end_mark)

    def close(self) -> None:
        """Training ended: keep the complete steps, drop an open one."""
        self.closed = True
        self.remove()

    def remove(self) -> None:
        if self.probe is not None:
            self.probe.remove()
            self.probe = None

    def ready(self) -> bool:
        """Closed, and the device has passed every mark (so reading them needs no sync)."""
        if not self.closed:
            return False
        return self._last_mark is None or self.clock.reached(self._last_mark)
