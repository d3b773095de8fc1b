"""One live view of the matrix: queued / submitted / running / done per experiment with its GPUs (or CPU slots),
batch and framework, and an ETA (rich on a terminal)."""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tunebench.experiment.spec import ExperimentSpec

logger = logging.getLogger(__name__)

QUEUED, SUBMITTED, RUNNING = "queued", "submitted", "running"
WAITING = (QUEUED, SUBMITTED, RUNNING)  # every state that is not an outcome


@dataclass(frozen=True)
class Settings:
    """What tells experiments of one scenario apart at a glance."""

    devices: int
    on_cpu: bool
    batch: str  # per-device × gradient accumulation, e.g. "4×2"
    framework: str

    @property
    def device_text(self) -> str:
        unit = "CPU slot" if self.on_cpu else "GPU"
        return f"{self.devices} {unit}{'' if self.devices == 1 else 's'}"

    def describe(self) -> str:
        return f"{self.device_text}, batch {self.batch}, {self.framework}"


def settings_of(experiment: ExperimentSpec) -> Settings:
    """The progress view's columns for one experiment."""

    batch = f"{experiment.micro_batch}×{experiment.grad_accum}"
    return Settings(experiment.num_gpus, experiment.device_type == "cpu", batch, experiment.framework_config.name)


class MatrixProgress:
    """`started(i, where)` (the experiment runs now), `submitted(i, where)` (handed to a scheduler that starts it
    later: Ray), `finished(i, status)`; a rich live table when stderr is a TTY, otherwise one log line per event
    (CI logs stay readable). `settings` (one per name) adds GPUs or CPU slots, batch and framework."""

    def __init__(self, names: list[str], concurrency: int = 1, live: bool | None = None,
                 settings: list[Settings] | None = None):
        self.names = names
        self.settings = settings
        self.state = [QUEUED] * len(names)
        self.where = [""] * len(names)
        self.started_at: dict[int, float] = {}
        self.durations: list[float] = []
        self.concurrency = max(1, concurrency)
        self._live = None
        if live if live is not None else sys.stderr.isatty():
            try:
                from rich.console import Console
                from rich.live import Live

                self._live = Live(self._render(), console=Console(stderr=True), refresh_per_second=2, transient=False)
                self._live.start()
            except ImportError:  # rich is optional for the view; the log lines carry the same information
                self._live = None

    def eta_seconds(self) -> float | None:
        if not self.durations:
            return None
        remaining = sum(1 for s in self.state if s in WAITING)
        return sum(self.durations) / len(self.durations) * remaining / self.concurrency

    def started(self, index: int, where: str = "") -> None:
        self.state[index], self.where[index] = RUNNING, where
        self.started_at[index] = time.monotonic()
        self._update(f"started {self._name(index)} {where}".rstrip())

    def submitted(self, index: int, where: str = "") -> None:
        """Handed over, not known to run: a Ray task waits in Ray's queue until its resources are free, and the
        driver learns when it started only once it returns. Its duration is not timed from here."""
        self.state[index], self.where[index] = SUBMITTED, where
        self._update(f"submitted {self._name(index)} {where}".rstrip())

    def finished(self, index: int, status: str, seconds: float | None = None) -> bool:
        """Record an outcome; True the first time. An executor may report an experiment's row again (Ray recounts
        `concurrent_experiments` once every task has returned): that updates the status shown, but the
        experiment is not finished a second time (no second event, no second duration for the ETA).
        `seconds`: the experiment's own run time where the executor knows it better than this view."""
        first = self.state[index] in WAITING
        self.state[index] = status
        if not first:
            logger.debug("updated %s: %s", self.names[index], status)
            if self._live is not None:
                self._live.update(self._render())
            return False
        if seconds is None and index in self.started_at:
            seconds = time.monotonic() - self.started_at[index]
        if seconds is not None:
            self.durations.append(seconds)
        self._update(f"finished {self.names[index]}: {status}")
        return True

    def close(self) -> None:
        if self._live is not None:
            self._live.update(self._render())
            self._live.stop()
            self._live = None

    def _name(self, index: int) -> str:
        if self.settings is None:
            return self.names[index]
        return f"{self.names[index]} ({self.settings[index].describe()})"

    def summary(self) -> str:
        done = sum(1 for s in self.state if s not in WAITING)
        counts = {state: self.state.count(state) for state in WAITING}
        eta = self.eta_seconds()
        submitted = f", {counts[SUBMITTED]} submitted" if counts[SUBMITTED] else ""
        return (f"{done}/{len(self.names)} done, {counts[RUNNING]} running{submitted}, {counts[QUEUED]} queued"
                + (f", ETA {eta:.0f} s" if eta is not None else ""))

    def _update(self, event: str) -> None:
        if self._live is not None:
            self._live.update(self._render())
        else:
            logger.info("%s (%s)", event, self.summary())

    def _render(self):
        from rich.table import Table

        table = Table(title=f"tunebench matrix: {self.summary()}", expand=False)
        details = self.settings is not None
        devices = "CPU slots" if details and all(s.on_cpu for s in self.settings) else "GPUs"
        for column in ("experiment", *((devices, "batch", "framework") if details else ()), "state", "where"):
            table.add_column(column)
        for i, (name, state, where) in enumerate(zip(self.names, self.state, self.where, strict=True)):
            extra = (str(self.settings[i].devices), self.settings[i].batch, self.settings[i].framework) if details \
                else ()
            table.add_row(name, *extra, state, where)
        return table


@contextlib.contextmanager
def shown_to_stderr() -> Iterator[None]:
    """Within it, a Python caller who configured no logging still sees the run's progress on stderr: without a
    handler Python shows warnings only, and a run from the API said nothing for the first minute (data, the
    preload server's imports, each experiment started and finished). A caller with logging set up hears it there,
    as before."""
    package = logging.getLogger("tunebench")
    if logging.getLogger().handlers or package.handlers:
        yield
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("tunebench: %(message)s"))
    level = package.level
    package.addHandler(handler)
    if package.getEffectiveLevel() > logging.INFO:
        package.setLevel(logging.INFO)
    try:
        yield
    finally:
        package.removeHandler(handler)
        package.setLevel(level)
