"""Matplotlib charts (Agg, no pyplot state) for the comparison and the report, returned as PNG bytes."""

from __future__ import annotations

import io
import logging
import math
import re
from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LinearSegmentedColormap, TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from tunebench.results.charts.layout import fitted_legend, wrapped
from tunebench.results.compare import rules

logger = logging.getLogger(__name__)

REGRESSION_COLOR = "#d62728"
IMPROVEMENT_COLOR = "#2ca02c"
NEUTRAL_COLOR = "#4c72b0"
REFERENCE_COLOR = "#b0b0b0"
# Tableau-like qualitative palette; stacked segments keep the same colour for the same component everywhere.
PALETTE = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c")
_DELTA_CLIP_PCT = 50.0  # colour saturates here so one +900 % cell does not wash out the others
# White at 0 so unchanged cells recede and only real movement is coloured.
_DELTA_CMAP = LinearSegmentedColormap.from_list("worse_better", ["#c0392b", "#f7f7f7", "#27ae60"])
# Always charted, even when unchanged: the numbers people look at first.
HEADLINE_METRICS = (
    "train_nonpad_tokens_per_second",
    "mfu",
    "mem_peak_torch_mem_alloc_in_bytes",
    "train_runtime",
    "train_loss",
)


class ChartSkipped(Exception):
    """A chart cannot be drawn from this data; the message says why (shown in the report instead)."""


def _figure(width: float, height: float) -> Figure:
    # Figure + FigureCanvasAgg instead of pyplot: no global backend switch, no figure registry to leak.
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def to_png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "chart"


# ------------------------------------------------------------------------------------------ comparison
def _goodness(delta_pct: float, direction: str) -> float:
    """Signed so that positive = better, for colouring."""
    if direction == rules.LOWER_IS_WORSE:
        return delta_pct
    if direction == rules.HIGHER_IS_WORSE:
        return -delta_pct
    return -abs(delta_pct)


def delta_heatmap(comparison: pd.DataFrame) -> bytes:
    """Experiments x metrics grid of % change, green = better, red = worse; flagged cells are marked.

    Metrics that did not move in any experiment (|change| < 0.05 %) are left out, except the headline ones,
    so a 30-metric CSV still gives a readable picture of what changed.
    """
    data = comparison[comparison["verdict"] != "ignored"]
    moved = data.groupby("metric", sort=False)["delta_pct"].apply(lambda s: (s.abs() >= 0.05).any())
    metrics = [m for m in moved.index if moved[m] or m in HEADLINE_METRICS]
    hidden = len(moved) - len(metrics)
    data = data[data["metric"].isin(metrics)]
    labels = list(dict.fromkeys(data["label"]))
    grid = np.full((len(labels), len(metrics)), np.nan)
    text = [["n/a"] * len(metrics) for _ in labels]
    for row in data.itertuples(index=False):
        i, j = labels.index(row.label), metrics.index(row.metric)
        if not math.isnan(row.delta_pct):
            clipped = max(-_DELTA_CLIP_PCT, min(_DELTA_CLIP_PCT, row.delta_pct))
            grid[i, j] = _goodness(clipped, row.direction)
            mark = {"regression": "▼", "improvement": "▲"}.get(row.verdict, "")
            text[i][j] = f"{row.delta_pct:+.1f}%{mark}" if abs(row.delta_pct) >= 0.05 else "="
    fig = _figure(min(16.0, 3.5 + 0.75 * len(metrics)), max(2.5, 0.3 * len(labels) + 2.4))
    ax = fig.add_subplot()
    ax.set_facecolor("#e6e6e6")  # NaN cells (no data on one side) show the background
    image = ax.imshow(
        np.ma.masked_invalid(grid),
        cmap=_DELTA_CMAP,
        aspect="auto",
        norm=TwoSlopeNorm(vmin=-_DELTA_CLIP_PCT, vcenter=0.0, vmax=_DELTA_CLIP_PCT),
    )
    for i in range(len(labels)):
        for j in range(len(metrics)):
            flagged = text[i][j].endswith(("▼", "▲"))
            ax.text(
                j,
                i,
                text[i][j],
                ha="center",
                va="center",
                fontsize=7,
                fontweight="bold" if flagged else "normal",
                color="black" if flagged else "#444444",
            )
    ax.set_xticks(range(len(metrics)), metrics, rotation=35, ha="right", fontsize=7.5)
    ax.set_yticks(range(len(labels)), labels, fontsize=7.5)
    ax.set_xticks(np.arange(len(metrics) + 1) - 0.5, minor=True)
    ax.set_yticks(np.arange(len(labels) + 1) - 0.5, minor=True)
    ax.grid(which="minor", color="white", linewidth=1)
    ax.tick_params(which="minor", length=0)
    note = f"; {hidden} unchanged metric(s) not shown" if hidden else ""
    title = f"Change vs reference (▼ regression, ▲ improvement, = unchanged{note})"
    # A figure title (centred on the PNG), not an axes title: long tick labels push the axes right, and a title
    # centred on them ran past the right edge.
    fig.suptitle(wrapped(title, fig.get_figwidth() * 0.95, 9), fontsize=9)
    fig.colorbar(image, ax=ax, label="worse  ←  change (%)  →  better", shrink=0.8, pad=0.01)
    return to_png(fig)


def reference_vs_new(comparison: pd.DataFrame, metric: str) -> bytes:
    """Horizontal grouped bars: reference median vs new median per experiment, new bar coloured by verdict."""
    data = comparison[comparison["metric"] == metric]
    scale, unit = rules.display_scale(metric)
    labels = list(data["label"])
    y = np.arange(len(labels))
    fig = _figure(8.0, max(2.2, 0.42 * len(labels) + 1.3))
    ax = fig.add_subplot()
    ref = data["reference"].to_numpy(dtype=float) / scale
    new = data["new"].to_numpy(dtype=float) / scale
    colors = [
        {"regression": REGRESSION_COLOR, "improvement": IMPROVEMENT_COLOR}.get(v, NEUTRAL_COLOR)
        for v in data["verdict"]
    ]
    ax.barh(y - 0.2, np.nan_to_num(ref), height=0.4, color=REFERENCE_COLOR, label="reference")
    ax.barh(y + 0.2, np.nan_to_num(new), height=0.4, color=colors, label="new")
    for yi, r, value, pct in zip(y, ref, new, data["delta_pct"], strict=True):
        if not math.isnan(value) and not math.isnan(pct):
            ax.text(value, yi + 0.2, f" {pct:+.1f}%", va="center", fontsize=8)
        else:  # a failed side: say so instead of leaving an unexplained gap
            why = (
                "no data"
                if math.isnan(r) and math.isnan(value)
                else ("no new value" if math.isnan(value) else "no reference")
            )
            ax.text(0 if math.isnan(r) else r, yi, f" {why}", va="center", fontsize=7.5, color="#666")
    ax.set_yticks(y, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"{metric} [{unit}]" if unit else metric)
    rule = data.iloc[0]
    head = f"{metric}: reference vs new ({rule['direction'].replace('_', ' ')}, threshold {rule['threshold_pct']:g}%)"
    fig.suptitle(wrapped(head, fig.get_figwidth() * 0.95, 9) + "\nnew bar red = regression, green = improvement",
                 fontsize=9)
    ax.margins(x=0.15)
    ax.legend(fontsize=8, loc="lower right")
    return to_png(fig)


def comparison_charts(comparison: pd.DataFrame) -> dict[str, bytes]:
    """``deltas.png`` plus ``ref_vs_new_<metric>.png`` for the headline metrics and every flagged metric.

    Charting all ~30 metrics would bury the few that matter; comparison.csv still holds every number.
    """
    judged = comparison[~comparison["verdict"].isin(["ignored"])]
    if judged.empty:
        return {}
    charts = {"deltas.png": delta_heatmap(judged)}
    for metric, rows in judged.groupby("metric", sort=False):
        flagged = rows["verdict"].isin(["regression", "improvement"]).any()
        if (flagged or metric in HEADLINE_METRICS) and rows[["reference", "new"]].notna().all(axis=1).any():
            charts[f"ref_vs_new_{safe_name(metric)}.png"] = reference_vs_new(judged, metric)
    return charts


# ---------------------------------------------------------------------------------------------- report
def stacked_barh(
    labels: Sequence[str],
    components: dict[str, Sequence[float]],
    xlabel: str,
    title: str,
    marker: tuple[str, Sequence[float]] | None = None,
) -> bytes:
    """One horizontal bar per experiment, one coloured segment per component (NaN counts as 0).

    ``marker`` (name, values) draws a black tick per bar, e.g. the measured peak next to the breakdown sum.
    """
    y = np.arange(len(labels))
    fig = _figure(10.0, max(2.4, 0.32 * len(labels) + 1.6))
    ax = fig.add_subplot()
    left = np.zeros(len(labels))
    for color, (name, values) in zip(PALETTE * 4, components.items(), strict=False):
        vals = np.nan_to_num(np.asarray(values, dtype=float))
        ax.barh(y, vals, left=left, color=color, label=name, height=0.6)
        left += vals
    if marker is not None:
        ax.scatter(
            np.asarray(marker[1], dtype=float),
            y,
            marker="|",
            s=400,
            linewidths=2.5,
            color="black",
            label=marker[0],
            zorder=3,
        )
    ends = left if marker is None else np.fmax(left, np.asarray(marker[1], dtype=float))
    for yi, total, end in zip(y, left, ends, strict=True):
        ax.text(end, yi, f" {total:,.2f}", va="center", fontsize=8)
    ax.set_yticks(y, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    fig.suptitle(wrapped(title, fig.get_figwidth() * 0.95, 10), fontsize=10)  # centred on the PNG: see delta_heatmap
    ax.margins(x=0.12)
    handles, names = ax.get_legend_handles_labels()
    if marker is not None:  # matplotlib lists the scatter first; the components read better in stack order
        handles, names = handles[1:] + handles[:1], names[1:] + names[:1]
    fitted_legend(fig, handles, names, 6)
    return to_png(fig)


def line_panels(panels: Sequence[dict]) -> bytes:
    """Side-by-side line charts. Each panel: title, xlabel, ylabel, series {name: (xs, ys[, flagged])}; a
    flagged point (e.g. from a row with a measurement warning) is ringed in red and marked "!"."""
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    # ~10.5 in at 110 dpi fits the 1200 px page without downscaling, so fonts stay readable.
    fig = _figure(10.5 if ncols > 1 else 6.0, 3.4 * nrows + 0.6)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    any_flagged = False
    for ax, panel in zip(axes, panels, strict=False):
        for color, (name, points) in zip(PALETTE * 4, panel["series"].items(), strict=False):
            xs, ys = np.asarray(points[0], dtype=float), np.asarray(points[1], dtype=float)
            order = np.argsort(xs)
            ax.plot(xs[order], ys[order], marker="o", color=color, label=name)
            flags = np.asarray(points[2], dtype=bool) if len(points) > 2 else np.zeros(len(xs), dtype=bool)
            if flags.any():
                any_flagged = True
                ax.scatter(xs[flags], ys[flags], s=150, facecolors="none", edgecolors=REGRESSION_COLOR,
                           linewidths=1.8, zorder=4)
                for x, y in zip(xs[flags], ys[flags], strict=True):
                    # Straight above the ring: an offset to the side could leave the figure at the last x.
                    ax.annotate("!", (x, y), xytext=(0, 7), textcoords="offset points", ha="center",
                                color=REGRESSION_COLOR, fontsize=9, fontweight="bold")
        ax.set_title(wrapped(panel["title"], fig.get_figwidth() / ncols * 0.85, 9), fontsize=9)
        ax.set_xlabel(panel["xlabel"], fontsize=8)
        ax.set_ylabel(panel["ylabel"], fontsize=8)
        ax.tick_params(labelsize=8)
        if panel.get("integer_x"):
            ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    handles, names = axes[0].get_legend_handles_labels()
    if handles:
        if any_flagged:
            handles.append(Line2D([], [], marker="o", linestyle="none", markerfacecolor="none", markersize=9,
                                  markeredgecolor=REGRESSION_COLOR, markeredgewidth=1.8))
            names.append("! measurement warning")
        fitted_legend(fig, handles, names, 3)
    else:
        axes[0].text(0.5, 0.5, "no series with two or more points", ha="center", transform=axes[0].transAxes)
    return to_png(fig)


def _memory_scale(total_bytes: float) -> tuple[float, str]:
    return (1024**3, "GiB") if total_bytes >= 1024**3 else (1024**2, "MiB")


def _time_scale(total_seconds: float) -> tuple[float, str]:
    return (1.0, "s") if total_seconds >= 1 else (1e-3, "ms")


def breakdown_chart(
    df: pd.DataFrame, labels: pd.Series, parts: Sequence[str], marker_col: str, title: str,
    names: Sequence[str] | None = None, source: str = "the scanner",
) -> bytes:
    """Stacked bars of ``parts`` (bytes or seconds; legend ``names``, default the columns' last words) per row that
    has any, with the measured total."""
    named = dict(zip(parts, names or [c.split("_", 2)[-1] for c in parts], strict=True))
    present = [c for c in parts if c in df.columns and df[c].notna().any()]
    if not present:
        raise ChartSkipped(f"{title}: columns {', '.join(parts)} are absent or empty in this CSV "
                           f"(they come from {source}).")  # fmt: skip
    rows = df[df[present].notna().any(axis=1)]
    to_scale = _memory_scale if rules.metric_family(present[0]) == "memory" else _time_scale
    scale, unit = to_scale(rows[present].sum(axis=1).max())
    components = {named[c]: (rows[c] / scale).fillna(0).tolist() for c in present}
    marker = None
    if marker_col in rows.columns and rows[marker_col].notna().any():
        marker = (f"measured ({marker_col})", (rows[marker_col] / scale).tolist())
    return stacked_barh(labels[rows.index].tolist(), components, f"{title} [{unit}]", title, marker=marker)


def plotted_rows(ok: pd.DataFrame, x: str, column: str, families: pd.Series) -> pd.Index:
    """The rows behind `curves_chart`'s points of `column`: a family needs a value at two or more x."""
    rows = ok[ok[x].notna() & ok[column].notna()] if x in ok.columns and column in ok.columns else ok.iloc[:0]
    spread = rows.groupby(families[rows.index])[x].transform("nunique")
    return rows.index[spread >= 2]


def curves_chart(
    ok: pd.DataFrame, x: str, panels: Sequence[tuple[str, str, float]], families: pd.Series, title: str,
    flagged: pd.Series | None = None,
) -> bytes:
    """One panel per (column, title, divisor): median y per x, one line per family of ok rows. A point is
    flagged when any row behind it is (`flagged`: bool per row)."""
    wanted = [p[0] for p in panels]
    panels = [p for p in panels if p[0] in ok.columns and ok[p[0]].notna().any()]
    if x not in ok.columns or ok[x].isna().all():
        raise ChartSkipped(f"{title}: no ok row has {x}.")
    if not panels:  # say which columns: "or its metric columns" read as if the x axis were the one missing
        raise ChartSkipped(f"{title}: no ok row has {' or '.join(wanted)}.")
    ok = ok[ok[x].notna()]
    if ok[x].nunique() < 2:
        value = ", ".join(sorted({rules.canonical(v) for v in ok[x]})) or "none"
        raise ChartSkipped(f"{title}: all ok rows have {x} = {value}; a curve needs at least two values.")
    specs = []
    for col, label, scale in panels:
        series = {}
        for name, grp in ok.groupby(families[ok.index], sort=False):
            med = grp.groupby(x)[col].median().dropna()
            if len(med) >= 2:  # a single point is no curve (e.g. a config only run on 1 GPU)
                measured = grp[grp[col].notna()]
                flags = (flagged[measured.index].groupby(measured[x]).any().reindex(med.index, fill_value=False)
                         if flagged is not None else pd.Series(False, index=med.index))
                series[name] = (med.index.to_numpy(dtype=float), med.to_numpy(dtype=float) / scale,
                                flags.to_numpy(dtype=bool))
        specs.append({"title": label, "xlabel": x, "ylabel": label, "series": series, "integer_x": True})
    if not any(s["series"] for s in specs):
        raise ChartSkipped(f"{title}: no experiment family has ok rows at two or more values of {x}.")
    return line_panels(specs)


def predicted_vs_measured(df: pd.DataFrame, pairs: Sequence[tuple[str, str]]) -> bytes:
    """One panel per memory category: predicted (y) against measured (x) per experiment, and y = x."""
    present = [(name, measured) for name, measured in pairs
               if f"pred_mem_{name}" in df.columns and measured in df.columns
               and (df[f"pred_mem_{name}"].notna() & df[measured].notna()).any()]
    if not present:
        raise ChartSkipped("no experiment has both a prediction (--plan) and the scanner's measurement")
    ncols = min(3, len(present))
    fig = _figure(10.5 if ncols > 1 else 5.0, 3.2 * math.ceil(len(present) / ncols) + 0.4)
    axes = fig.subplots(math.ceil(len(present) / ncols), ncols, squeeze=False).ravel()
    for ax in axes[len(present):]:
        ax.set_visible(False)
    for ax, (name, measured) in zip(axes, present, strict=False):
        both = df[df[f"pred_mem_{name}"].notna() & df[measured].notna()]
        scale, unit = _memory_scale(float(max(both[measured].max(), both[f"pred_mem_{name}"].max(), 1)))
        x, y = both[measured] / scale, both[f"pred_mem_{name}"] / scale
        top = float(max(x.max(), y.max())) * 1.08 or 1.0
        ax.plot([0, top], [0, top], color="#999999", linewidth=1, label="predicted = measured")
        ax.scatter(x, y, color=PALETTE[0], zorder=3)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel(f"measured ({measured}) [{unit}]", fontsize=7)
        ax.set_ylabel(f"predicted [{unit}]", fontsize=8)
        ax.set_xlim(0, top)
        ax.set_ylim(0, top)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    return to_png(fig)
