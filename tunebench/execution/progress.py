"""One live view of the matrix: queued / running / done per experiment, and an ETA (rich on a terminal)."""

from __future__ import annotations

import logging
import sys
import time

logger = logging.getLogger(__name__)


class MatrixProgress:
    """`queued(names)`, `started(i, where)`, `finished(i, status)`; a rich live table when stderr is a TTY,
    otherwise one log line per event (CI logs stay readable)."""

    def __init__(self, names: list[str], concurrency: int = 1, live: bool | None = None):
        self.names = names
        self.state = ["queued"] * len(names)
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
        remaining = sum(1 for s in self.state if s in ("queued", "running"))
        return sum(self.durations) / len(self.durations) * remaining / self.concurrency

    def started(self, index: int, where: str = "") -> None:
        self.state[index], self.where[index] = "running", where
        self.started_at[index] = time.monotonic()
        self._update(f"started {self.names[index]} {where}".rstrip())

    def finished(self, index: int, status: str) -> None:
        self.state[index] = status
        if index in self.started_at:
            self.durations.append(time.monotonic() - self.started_at[index])
        self._update(f"finished {self.names[index]}: {status}")

    def close(self) -> None:
        if self._live is not None:
            self._live.update(self._render())
            self._live.stop()
            self._live = None

    def _summary(self) -> str:
        done = sum(1 for s in self.state if s not in ("queued", "running"))
        running = self.state.count("running")
        eta = self.eta_seconds()
        return (f"{done}/{len(self.names)} done, {running} running, {self.state.count('queued')} queued"
                + (f", ETA {eta:.0f} s" if eta is not None else ""))

    def _update(self, event: str) -> None:
        if self._live is not None:
            self._live.update(self._render())
        else:
            logger.info("%s (%s)", event, self._summary())

    def _render(self):
        from rich.table import Table

        table = Table(title=f"tunebench matrix: {self._summary()}", expand=False)
        for column in ("experiment", "state", "where"):
            table.add_column(column)
        for name, state, where in zip(self.names, self.state, self.where, strict=True):
            table.add_row(name, state, where)
        return table
