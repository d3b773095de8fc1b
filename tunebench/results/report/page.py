"""The self-contained HTML report of a results CSV: the page, its tables and sections (the command line is
tunebench.cli.report).

Usage: ``python benchmark.py report <results dir or csv> [--out report.html] [--reference CSV]``.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
from markupsafe import Markup

from tunebench.fileio import write_atomic
from tunebench.results.charts import figures as charts
from tunebench.results.charts import pareto
from tunebench.results.compare import comparison as cmp
from tunebench.results.compare import rules
from tunebench.results.compare.reading import (
    CompareInputError,
    load_csv,
    numeric_metrics,
    resolve_results_csv,
)
from tunebench.results.compare.samples import load_samples
from tunebench.results.report import acceleration as report_acceleration
from tunebench.results.report import comparison as report_comparison
from tunebench.results.report import fit_map as report_fit_map
from tunebench.results.report import measurement_warnings as warn
from tunebench.results.report import predictions as report_predictions
from tunebench.results.report import projection as report_projection
from tunebench.results.report import tune as report_tune
from tunebench.results.report.html import img, omitted, table
from tunebench.results.report.templates import macros, render
from tunebench.results.row_values import frame_problems
from tunebench.vocabulary import Status

logger = logging.getLogger(__name__)

MEMORY_PARTS = (
    "scan_mem_params",
    "scan_mem_grads",
    "scan_mem_optimizer",
    "scan_mem_activations",
    "scan_mem_temporaries",
    "scan_mem_other",
)
GIB = 1024**3
# (steady column, whole-run column for rows without the steady one, panel title, divisor) of the scaling chart:
# the steady figures are the headline; a row without them (an older CSV, a run too short for a steady window)
# is plotted with its whole-run figure, as a series of its own labelled WHOLE_RUN.
SCALING_SOURCES = (
    ("steady_nonpad_tokens_per_second", "train_nonpad_tokens_per_second", "steady non-pad tokens/s (global)", 1.0),
    ("steady_nonpad_tokens_per_second_per_device", "train_nonpad_tokens_per_second_per_device",
     "steady non-pad tokens/s per device", 1.0),
    ("steady_mfu", "mfu", "steady MFU (%)", 0.01),
    # several GPUs against the same work on one (results.scaling); no whole-run figure stands in for it
    ("scaling_efficiency", None, "scaling efficiency vs one GPU (%)", 0.01),
)
WHOLE_RUN = " (whole-run figure)"
MEMORY_PANELS = (
    ("mem_peak_torch_mem_alloc_in_bytes", "peak allocated (GiB)", GIB),
    ("scan_mem_peak_allocated", "scanner peak allocated (GiB)", GIB),
)
# A CPU run has no device allocator: its memory is the process's (the curve rather than "omitted").
HOST_PEAK = "mem_peak_host_rss_bytes"
HOST_MEMORY_PANELS = ((HOST_PEAK, "peak host RSS (GiB): a CPU run's memory", GIB),)
TIME_PARTS = ("scan_time_forward", "scan_time_backward", "scan_time_clip", "scan_time_optimizer", "scan_time_other")
# An experiment's start-up in the order it happens (the launcher before the training process, then its stages:
# tunebench.experiment.startup); the marker is the training entry's own total, the launcher not in it.
STARTUP_PARTS = (("startup_launcher_seconds", "launcher"), ("startup_imports_seconds", "imports"),
                 ("startup_data_seconds", "data"), ("startup_model_seconds", "model"),
                 ("startup_trainer_seconds", "trainer"), ("startup_train_setup_seconds", "train setup"))
# Columns of the experiments table, in order; absent columns are left out.
SUMMARY_COLUMNS = (
    ("steady_nonpad_tokens_per_second", "steady non-pad tokens/s"),
    ("steady_nonpad_tokens_per_second_per_device", "steady tokens/s per device"),
    # Beside the speed, what it bought: tokens and seconds to the target loss (a faster step that learns less is
    # slower here).
    ("loss_target_tokens", "tokens to target loss"),
    ("loss_target_seconds", "s to target loss"),
    ("steady_mfu", "steady MFU"),
    ("steady_step_time_median", "median step"),
    # the spread the measurement warning and the terminal quote (1.4826 × MAD ÷ median), not the plain CV
    ("steady_step_time_robust_cv", "step spread (robust CV)"),
    ("train_nonpad_tokens_per_second", "whole-run tokens/s"),
    ("mfu", "whole-run MFU"),
    ("mem_peak_torch_mem_alloc_in_bytes", "peak allocated"),
    ("scan_mem_peak_allocated", "scanner peak"),
    ("train_runtime", "runtime"),
    ("train_loss", "loss"),
)
# Columns of the padding table: short headers, so eight columns fit the page (the CSV names are in
# docs/reference/columns.md).
PADDING_COLUMNS = (
    ("synthetic_length_distribution", "lengths"),
    ("packing", "packing"),
    ("steady_padding_fraction", "padding"),
    ("scan_attention_backend", "attention kernel"),
    ("steady_step_time_median", "median step"),
    ("steady_nonpad_tokens_per_second", "steady non-pad tokens/s"),
    ("steady_step_time_robust_cv", "step spread (robust CV)"),
)
LABEL_KEYS = rules.DEFAULT_KEYS
# Scaling/batch curves join points that share every one of these columns except those the x axis moves.
CURVE_KEYS = rules.DEFAULT_KEYS


def _labels(df: pd.DataFrame) -> pd.Series:
    keys = [k for k in LABEL_KEYS if k in df.columns] or [df.columns[0]]
    labels = rules.experiment_labels(df, keys)
    # Repeats share a label; number them so every bar and table row is distinguishable.
    counts = labels.groupby(labels).cumcount()
    dup = labels.map(labels.value_counts()) > 1
    return labels.where(~dup, labels + " #" + (counts + 1).astype(str))


def _status(df: pd.DataFrame) -> pd.Series:
    if "status" not in df.columns:
        return pd.Series(Status.OK.value, index=df.index)
    return df["status"].map(rules.canonical).str.lower().replace("", "unknown")


def _chart(make, *args, **kwargs) -> Markup:
    """The chart's image, or the reason it was left out (absent or too little data)."""
    try:
        return img(make(*args, **kwargs), args[-1] if isinstance(args[-1], str) else "chart")
    except charts.ChartSkipped as skipped:
        return omitted(str(skipped))


def _sections():
    return macros("sections.html.j2")


def _families(ok: pd.DataFrame, *moving: str) -> pd.Series:
    """Curve name per ok row: the CURVE_KEYS that stay fixed along the x axis (``moving`` excluded)."""
    cols = [k for k in CURVE_KEYS if k in ok.columns and k not in moving]
    return rules.experiment_labels(ok, cols) if cols and len(ok) else pd.Series("all", index=ok.index)


def _with_spread(columns: tuple, df: pd.DataFrame) -> list[tuple[str, str]]:
    """`columns` present in `df`; a CSV from before the robust CV keeps its plain CV, said so in the header."""
    plain = ("steady_step_time_cv", "step CV (plain: no robust CV in this CSV)")
    return [(c, h) if c in df.columns else plain for c, h in columns
            if c in df.columns or (c == "steady_step_time_robust_cv" and plain[0] in df.columns)]


def _experiments_table(df: pd.DataFrame, warnings: pd.Series) -> Markup:
    """One row per experiment; a row with a measurement warning has its steady figures marked and the warning
    printed right under its numbers (the one place the report prints it)."""
    present = _with_spread(SUMMARY_COLUMNS, df)
    # A column empty in every row (MFU and CUDA peaks on a CPU run) only takes the labels' width: named instead.
    cols = [(c, h) for c, h in present if df[c].notna().any()]
    empty = [h for c, h in present if (c, h) not in cols]
    if "scanner peak" in empty and HOST_PEAK in df.columns and df[HOST_PEAK].notna().any():
        cols.insert(len(cols) - 2 if len(cols) > 2 else len(cols), (HOST_PEAK, "peak host RSS (CPU)"))
        empty.append("scanner peak (a CPU run has no device allocator: its memory is the peak host RSS)")
        empty.remove("scanner peak")
    rows = []
    for i, r in df.iterrows():
        cells = [rules.format_value(c, r[c]) or "–" for c, _ in cols]
        rows.append([r["_label"], r["_status"], *[warn.marked(text, warnings[i]) if warn.is_steady(c) else text
                                                  for (c, _), text in zip(cols, cells, strict=True)]])
    note = _sections().empty_columns(empty) if empty else Markup()
    return table(["experiment", "status", *[h for _, h in cols]], rows, numeric=set(range(2, 2 + len(cols))),
                 cls="experiments", notes=[warn.row_note(warnings[i]) for i in df.index]) + note


def _failures_table(df: pd.DataFrame) -> Markup:
    failed = df[df["_status"] != Status.OK]
    if failed.empty:
        return _sections().no_failures()
    rows = []
    for _, r in failed.iterrows():
        line = rules.first_error_line(r.get("error_messages"))
        head = line.split(":", 1)[0]
        error_class = (
            head.rsplit(".", 1)[-1] if head.endswith(("Error", "Exception", "Interrupt", "Exit")) else ""
        )
        rows.append([r["_label"], r["_status"], error_class or "–", line or "–"])
    return table(["experiment", "status", "error class", "error"], rows, cls="failures")


def _padding_section(df: pd.DataFrame, warnings: pd.Series) -> Markup:
    """Padded and unpadded runs side by side: what padding costs, and which attention kernel each one got."""
    cols = _with_spread(PADDING_COLUMNS, df)
    ok = df[df["_status"] == Status.OK]
    if "steady_padding_fraction" not in ok.columns or ok.empty:
        return omitted("no steady-state columns in this CSV")
    ok = ok.sort_values("steady_padding_fraction")
    rows = []
    for i, r in ok.iterrows():
        cells = [rules.format_value(c, r[c]) if rules.metric_family(c) else rules.canonical(r[c]) for c, _ in cols]
        rows.append([r["_label"], *[warn.marked(text, warnings[i]) if warn.is_steady(c) else text
                                    for (c, _), text in zip(cols, cells, strict=True)]])
    return _sections().padding(table(["experiment", *[h for _, h in cols]], rows, numeric=set(range(1, len(cols) + 1)),
                                     cls="padding") + warn.elsewhere_note(warnings[ok.index]))


def _scaling_section(ok: pd.DataFrame, warnings: pd.Series) -> Markup:
    """Steady throughput and MFU against GPU count (whole-run figures only for rows without steady ones, as
    series of their own), the points of rows with a measurement warning marked and explained under it."""
    headline = SCALING_SOURCES[0][0]
    steady = ok[headline].notna() if headline in ok.columns else pd.Series(False, index=ok.index)
    frame, panels = ok.copy(), []
    for steady_col, whole_col, title, scale in SCALING_SOURCES:
        nan = pd.Series(float("nan"), index=ok.index)
        frame[f"_plot_{steady_col}"] = ok.get(steady_col, nan).where(steady, ok.get(whole_col, nan))
        panels.append((f"_plot_{steady_col}", title, scale))
    families = _families(ok, "num_gpus")
    families = families.where(steady, families + WHOLE_RUN)
    flagged = warnings[ok.index] != ""
    title = "Steady throughput and MFU vs GPU count"
    try:
        chart = img(charts.curves_chart(frame, "num_gpus", panels, families, title, flagged=flagged), title)
    except charts.ChartSkipped as skipped:
        return omitted(str(skipped))
    plotted = charts.plotted_rows(frame, "num_gpus", panels[0][0], families)
    fallback = sum(1 for i in plotted if not steady[i])
    return _sections().scaling(chart, fallback, WHOLE_RUN.strip(),
                               warn.chart_note(ok["_label"], warnings, plotted, "this chart"))


def _memory_panels(ok: pd.DataFrame) -> tuple:
    """The device allocator's peaks where a row has them, else the host's (a CPU matrix)."""
    device = any(c in ok.columns and ok[c].notna().any() for c, _, _ in MEMORY_PANELS)
    return MEMORY_PANELS if device else HOST_MEMORY_PANELS


def _pareto_section(ok: pd.DataFrame) -> Markup:
    """The Pareto chart, its front's points numbered, and the numbers' labels in full beneath it."""
    try:
        chart = img(pareto.pareto_chart(ok, ok["_label"], "Pareto front"), "Pareto front")
    except charts.ChartSkipped as skipped:
        return omitted(str(skipped))
    return _sections().pareto(chart, pareto.front_key(ok, ok["_label"]))


def _environment(df: pd.DataFrame) -> Markup:
    rows = []
    for col in sorted(rules.ENVIRONMENT_COLUMNS):
        if col in df.columns:
            values = sorted({rules.canonical(v) for v in df[col]} - {""})
            rows.append([col, ", ".join(values) or "–"])
    return table(["column", "values"], rows, cls="environment") if rows else _sections().no_environment()


def build_report(df: pd.DataFrame, source: str, reference: pd.DataFrame | None = None, samples=(None, None)) -> str:
    """The whole HTML page (charts embedded as base64 PNG) for one results CSV, from templates/page.html.j2;
    `samples` = the step samples of (reference, results) for the comparison."""
    metric_cols = [c for c in df.columns if rules.metric_family(c)]
    # A copy: numeric_metrics assigns column by column, which leaves a wide CSV's frame fragmented.
    df = numeric_metrics(df, metric_cols, "results").copy()
    df["_label"], df["_status"] = _labels(df), _status(df)
    warnings = warn.warning_texts(df)
    ok = df[df["_status"] == Status.OK]
    sections = {
        "warning_summary": warn.summary(df),
        "tune": report_tune.section(source),  # a folder `benchmark.py tune` wrote: its winner first
        "experiments": _experiments_table(df, warnings),
        "memory_breakdown": _chart(charts.breakdown_chart, df, df["_label"], MEMORY_PARTS, "scan_mem_peak_allocated",
                                   "Memory by category"),
        "time_breakdown": _chart(charts.breakdown_chart, df, df["_label"], TIME_PARTS, "scan_time_step",
                                 "Time per step by phase"),
        "startup": _chart(charts.breakdown_chart, df, df["_label"], [c for c, _ in STARTUP_PARTS], "startup_seconds",
                          "Start-up by stage", names=[n for _, n in STARTUP_PARTS],
                          source="the training entry's start-up marks"),
        "scaling": _scaling_section(ok, warnings),
        "memory_vs_batch": _chart(charts.curves_chart, ok, "effective_batch_size", _memory_panels(ok),
                                  _families(ok, "effective_batch_size", "per_device_train_batch_size"),
                                  "Memory vs effective batch size"),
        "pareto": _pareto_section(ok),
        "acceleration": report_acceleration.section(df, df["_label"], warnings),  # with its heading; or none
        "padding": _padding_section(df, warnings),
        "predictions": report_predictions.section(df, df["_label"]),
        "fit_map": report_fit_map.section(source),  # a `plan --fit_map` beside the CSV: its batch × length map
        "projection": report_projection.section(source),  # a `plan --project_from` beside the CSV: tokens/s by GPU
        "failures": _failures_table(df),
        "environment": _environment(df),
        "comparison": Markup(),
    }
    if reference is not None:
        result = cmp.compare_frames(reference, df.drop(columns=["_label", "_status"]),
                                    reference_samples=samples[0], results_samples=samples[1])
        sections["comparison"] = report_comparison.section(result, df)
    return str(render("page.html.j2", source=source, row_count=len(df),
                  generated=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                  status_counts=list(df["_status"].value_counts().items()),
                  reference=None if reference is None else reference.attrs.get("path", ""),
                  **sections))


def write_report(
    results: str | Path, out: str | Path | None = None, reference: str | Path | None = None
) -> Path:
    """Render ``results`` (dir or CSV) to ``out`` (default ``<results dir>/report.html``); returns the path."""
    csv = resolve_results_csv(results)
    df = load_csv(csv, "results")
    if problems := frame_problems(df, str(csv)):  # what a run never writes is named, not charted
        raise CompareInputError(f"results {csv}: {len(problems)} cell(s) no run produces:\n" +
                                "\n".join(f"  - {p}" for p in problems))
    ref = load_csv(resolve_results_csv(reference, "reference"), "reference") if reference is not None else None
    samples = (load_samples(reference)[0], load_samples(results)[0]) if reference is not None else (None, None)
    page = build_report(df, str(csv), ref, samples)
    path = Path(out) if out is not None else csv.parent / "report.html"
    write_atomic(path, page)
    return path
