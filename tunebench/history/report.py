"""`history report`: one trend chart per experiment (regimes shaded, each point a link to its run) and the runs table.

Charts are matplotlib SVGs inlined in one HTML file; every point carries a link to its run's row in the table
below (`#run-N`: label, start, versions, GPU, host, the results folder).
"""

from __future__ import annotations

import io
import logging
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from tunebench.fileio import write_atomic
from tunebench.history.check import check, describe
from tunebench.results.report.templates import markup
from tunebench.results.report.templates import render as render_template

logger = logging.getLogger(__name__)

RUN_TABLE = ("run_number", "run_label", "run_started", "tunebench_git_sha", "torch_version", "transformers_version",
             "cuda_version", "driver_version", "gpu_name", "host_name", "source")
SHADES = ("#dbe9f6", "#fde2cf")


def _chart(finding, metric: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    figure, axis = plt.subplots(figsize=(9, 2.8))
    for i, (first, end) in enumerate(finding.regimes):
        axis.axvspan(finding.runs[first] - 0.5, finding.runs[end - 1] + 0.5, color=SHADES[i % 2], lw=0)
    points = axis.scatter(finding.runs, finding.values, color="#1f4e79", zorder=3, s=22)
    points.set_urls([f"#run-{r}" for r in finding.runs])
    axis.plot(finding.runs, finding.values, color="#1f4e79", lw=0.8, zorder=2)
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    axis.set_xlabel("run")
    axis.set_ylabel(metric)
    axis.set_title(finding.label, fontsize=10)
    figure.tight_layout()
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg")
    plt.close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def _when(seconds: float) -> str:
    """A run's start as a date; a value no clock shows (a store written before add checked its rows: NaN, 1e300)
    stays the number it is."""
    try:
        return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    except (OverflowError, OSError, ValueError):
        return f"{seconds!r} (no time: Unix seconds out of range)"


def _runs(rows: pd.DataFrame) -> list[tuple[object, list[str]]]:
    """(run number, its cells in RUN_TABLE's order) of each run, in run order: the runs table's rows."""
    runs = rows.drop_duplicates("run_number").sort_values("run_number")
    table = []
    for run in runs.itertuples(index=False):
        cells = []
        for column in RUN_TABLE:
            value = getattr(run, column, "") if hasattr(run, column) else ""
            if column == "run_started" and isinstance(value, float):
                value = _when(value)
            cells.append("" if value is None or value != value else str(value))
        table.append((run.run_number, cells))
    return table


def render(rows: pd.DataFrame, steps: pd.DataFrame, metric: str) -> str:
    """The page, from the report's templates (history.html.j2): every text escaped there, the charts inlined."""
    # The chart is the SVG matplotlib drew (its points' links included): markup the template writes as is.
    findings = [{"verdict": finding.verdict, "lines": describe(finding), "chart": markup(_chart(finding, metric))}
                for finding in check(rows, steps, metric)]
    return render_template("history.html.j2", metric=metric, findings=findings, columns=RUN_TABLE, runs=_runs(rows))


def write_report(rows: pd.DataFrame, steps: pd.DataFrame, metric: str, out: Path) -> None:
    write_atomic(out, render(rows, steps, metric))
