"""The Pareto chart of a results CSV: steady tokens/s against peak memory and J/token, the front marked.

A point is on the front when no other ok row is at least as fast with at most its memory (or energy) and
strictly better in one of the two: those are the configurations worth choosing between (`benchmark.py tune`
runs put their whole search here).
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.text import Annotation
from matplotlib.transforms import Bbox

from tunebench.results.charts.figures import NEUTRAL_COLOR, REGRESSION_COLOR, ChartSkipped, _figure, to_png

logger = logging.getLogger(__name__)

THROUGHPUT = "steady_nonpad_tokens_per_second"
# x axes, lower better: (column, axis label, divisor). Memory: the first of these present (measured by torch, the
# scanner, HF's metrics; the prediction where nothing was measured; the host's on CPU), then energy where the
# sidecar measured it.
MEMORY = (("mem_peak_torch_max_allocated_bytes", "peak allocated [GiB]", 1024**3),
          ("scan_mem_peak_allocated", "peak allocated in the scanned step [GiB]", 1024**3),
          ("mem_peak_torch_mem_alloc_in_bytes", "peak allocated (HF metrics) [GiB]", 1024**3),
          ("pred_mem_peak", "predicted peak [GiB] (no measured peak)", 1024**3),
          ("mem_peak_host_rss_bytes", "peak host RSS [GiB] (a CPU run: no device allocator)", 1024**3))
MAX_LABEL = 40  # characters of a point's label
ENERGY = ("steady_energy_joules_per_nonpad_token", "J per non-padding token", 1.0)


def front(cost: np.ndarray, gain: np.ndarray) -> np.ndarray:
    """Boolean mask of the points no other point dominates (cost lower-better, gain higher-better)."""
    on = np.ones(len(cost), dtype=bool)
    for i in range(len(cost)):
        dominated = (cost <= cost[i]) & (gain >= gain[i]) & ((cost < cost[i]) | (gain > gain[i]))
        on[i] = not dominated.any()
    return on


def _panels(ok: pd.DataFrame) -> list[tuple[str, str, float]]:
    def present(column: str) -> bool:
        return column in ok.columns and ok[column].notna().any()

    memory = next((m for m in MEMORY if present(m[0])), None)
    return [p for p in (memory, ENERGY) if p is not None and present(p[0])]


def front_key(ok: pd.DataFrame, labels: pd.Series) -> list[tuple[int, str]]:
    """(number, label) of every point on a panel's front, fastest first: the chart marks each with its number, and
    the page lists the labels in full (a tune search's labels, `lora-bs8-sl1024-gc-compile-...`, were cut to fit
    the axes)."""
    on = pd.Series(False, index=ok.index)
    for column, _, _ in _panels(ok) if THROUGHPUT in ok.columns else ():
        rows = ok[ok[column].notna() & ok[THROUGHPUT].notna()]
        on[rows.index[front(rows[column].to_numpy(float), rows[THROUGHPUT].to_numpy(float))]] = True
    fastest = ok[on].sort_values(THROUGHPUT, ascending=False).index
    return [(k, str(labels[i])) for k, i in enumerate(fastest, start=1)]


def pareto_figure(ok: pd.DataFrame, labels: pd.Series, title: str = "Pareto front") -> Figure:
    """One panel per cost column present: every ok row, the front joined and its points numbered inside the axes
    (front_key: the numbers' labels)."""
    if THROUGHPUT not in ok.columns or ok[THROUGHPUT].notna().sum() < 2:
        raise ChartSkipped(f"{title}: fewer than two ok rows with {THROUGHPUT}.")
    panels = _panels(ok)
    if not panels:
        raise ChartSkipped(f"{title}: no peak memory or energy column among ok rows.")
    fig = _figure(6.0 * len(panels), 4.5)
    numbers = {label: str(k) for k, label in front_key(ok, labels)}
    placed = []
    for axis, (column, label, scale) in zip(fig.subplots(1, len(panels), squeeze=False)[0], panels, strict=True):
        rows = ok[ok[column].notna() & ok[THROUGHPUT].notna()]
        cost, gain = rows[column].to_numpy(float) / scale, rows[THROUGHPUT].to_numpy(float)
        mask = front(cost, gain)
        axis.scatter(cost[~mask], gain[~mask], color=NEUTRAL_COLOR, alpha=0.6, label="dominated")
        order = np.argsort(cost[mask])
        axis.plot(cost[mask][order], gain[mask][order], "o-", color=REGRESSION_COLOR, label="Pareto front")
        for x, y, text in zip(cost[mask], gain[mask], labels[rows.index][mask], strict=True):
            note = axis.annotate(numbers.get(str(text), str(text)[:MAX_LABEL]), (x, y), fontsize=8, xytext=(4, 4),
                                 textcoords="offset points")
            # Out of the layout: constrained layout would otherwise shrink the axes to make room for a label past
            # their edge; the label is moved inside instead (below), against axes that no longer move.
            note.set_in_layout(False)
            placed.append((axis, note))
        axis.set_xlabel(label)
        axis.set_ylabel("steady non-padding tokens/s")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    fig.suptitle(title)
    fig.canvas.draw()  # the final layout, so the axes' boxes below are the PNG's
    renderer = fig.canvas.get_renderer()
    for axis, note in placed:
        _inside(note, axis.get_window_extent(renderer), renderer)
    return fig


def _inside(note: Annotation, box: Bbox, renderer) -> None:
    """Put a point's label on the side of the point that keeps it inside the axes (right/left, above/below);
    where no side has room, shorten it until one does. A label past the axes ran over the neighbouring panel or
    off the PNG (issue W)."""
    text = note.get_text()
    while True:
        for dx, dy in ((4, 4), (-4, 4), (4, -4), (-4, -4)):
            note.set_position((dx, dy))
            note.set_horizontalalignment("left" if dx > 0 else "right")
            note.set_verticalalignment("bottom" if dy > 0 else "top")
            extent = note.get_window_extent(renderer)
            if extent.x0 >= box.x0 and extent.x1 <= box.x1 and extent.y0 >= box.y0 and extent.y1 <= box.y1:
                return
        if len(text) <= 2:
            note.set_visible(False)  # axes too small for any label: none rather than one outside
            return
        text = text[: max(2, len(text) * 3 // 4)]
        note.set_text(text[:-1] + "…")


def pareto_chart(ok: pd.DataFrame, labels: pd.Series, title: str = "Pareto front") -> bytes:
    """The Pareto figure as a PNG."""
    return to_png(pareto_figure(ok, labels, title))
