"""Renders results for people: the self-contained HTML report and the markdown summary of a comparison.

Usage: ``python benchmark.py report <results dir or csv> [--out report.html] [--reference CSV]``.
"""

from __future__ import annotations

import argparse
import base64
import html
import logging
import sys
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from tunebench.fileio import write_atomic
from tunebench.results import charts
from tunebench.results import compare as cmp
from tunebench.results import compare_rules as rules
from tunebench.results.compare_io import CompareInputError, load_csv, numeric_metrics, resolve_results_csv
from tunebench.results.compare_markdown import signed_pct
from tunebench.results.compare_samples import interval_text, is_tested
from tunebench.results.samples import load_samples

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
# (column, panel title, divisor) of the line charts.
SCALING_PANELS = (
    ("train_nonpad_tokens_per_second", "non-pad tokens/s (global)", 1.0),
    ("train_nonpad_tokens_per_second_per_device", "non-pad tokens/s per device", 1.0),
    ("mfu", "MFU (%)", 0.01),
)
MEMORY_PANELS = (
    ("mem_peak_torch_mem_alloc_in_bytes", "peak allocated (GiB)", GIB),
    ("scan_mem_peak_allocated", "scanner peak allocated (GiB)", GIB),
)
TIME_PARTS = ("scan_time_forward", "scan_time_backward", "scan_time_clip", "scan_time_optimizer", "scan_time_other")
# Columns of the experiments table, in order; absent columns are left out.
SUMMARY_COLUMNS = (
    ("steady_nonpad_tokens_per_second", "steady non-pad tokens/s"),
    ("steady_nonpad_tokens_per_second_per_device", "steady tokens/s/device"),
    ("steady_mfu", "steady MFU"),
    ("steady_step_time_median", "median step"),
    ("steady_step_time_cv", "step CV"),
    ("train_nonpad_tokens_per_second", "whole-run tokens/s"),
    ("mfu", "whole-run MFU"),
    ("mem_peak_torch_mem_alloc_in_bytes", "peak allocated"),
    ("scan_mem_peak_allocated", "scanner peak"),
    ("train_runtime", "runtime"),
    ("train_loss", "loss"),
)
LABEL_KEYS = rules.DEFAULT_KEYS
# Scaling/batch curves join points that share every one of these columns except those the x axis moves.
CURVE_KEYS = rules.DEFAULT_KEYS


# ----------------------------------------------------------------------------------------------- HTML
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;max-width:1200px;color:#222;
padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em} h2{font-size:1.25em;border-bottom:1px solid #ddd;padding-bottom:.2em;
margin-top:1.6em} .meta{color:#666;font-size:.9em} .omitted{color:#8a6d3b;background:#fcf8e3;padding:.4em .7em;
border-radius:4px} table{border-collapse:collapse;font-size:.85em;margin:.5em 0} th,td{border:1px solid #ddd;
padding:.3em .6em;text-align:left;vertical-align:top} th{background:#f4f4f4} td.num{text-align:right;white-space:nowrap;
font-variant-numeric:tabular-nums} img{max-width:100%;border:1px solid #eee;margin:.4em 0}
.status-ok{color:#2b7a2b} .status-bad{color:#b22222;font-weight:600} .pill{display:inline-block;
padding:.1em .6em;border-radius:1em;background:#eee;margin-right:.4em}
"""


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def _table(headers: list[str], rows: list[list[str]], numeric: set[int] = frozenset(), cls: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="num">{html.escape(str(c))}</td>'
            if i in numeric
            else f"<td>{html.escape(str(c))}</td>"
            for i, c in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _omitted(reason: str) -> str:
    return f'<p class="omitted">Omitted: {html.escape(reason)}</p>'


def _labels(df: pd.DataFrame) -> pd.Series:
    keys = [k for k in LABEL_KEYS if k in df.columns] or [df.columns[0]]
    labels = rules.experiment_labels(df, keys)
    # Repeats share a label; number them so every bar and table row is distinguishable.
    counts = labels.groupby(labels).cumcount()
    dup = labels.map(labels.value_counts()) > 1
    return labels.where(~dup, labels + " #" + (counts + 1).astype(str))


def _status(df: pd.DataFrame) -> pd.Series:
    if "status" not in df.columns:
        return pd.Series("ok", index=df.index)
    return df["status"].map(rules.canonical).str.lower().replace("", "unknown")


def _chart(make, *args, **kwargs) -> str:
    """An <img> of the chart, or the reason it was left out (absent or too little data)."""
    try:
        return _img(make(*args, **kwargs), args[-1] if isinstance(args[-1], str) else "chart")
    except charts.ChartSkipped as skipped:
        return _omitted(str(skipped))


def _families(ok: pd.DataFrame, *moving: str) -> pd.Series:
    """Curve name per ok row: the CURVE_KEYS that stay fixed along the x axis (``moving`` excluded)."""
    cols = [k for k in CURVE_KEYS if k in ok.columns and k not in moving]
    return rules.experiment_labels(ok, cols) if cols and len(ok) else pd.Series("all", index=ok.index)


def _experiments_table(df: pd.DataFrame) -> str:
    cols = [(c, h) for c, h in SUMMARY_COLUMNS if c in df.columns]
    rows = []
    for _, r in df.iterrows():
        rows.append([r["_label"], r["_status"], *[rules.format_value(c, r[c]) or "–" for c, _ in cols]])
    return _table(
        ["experiment", "status", *[h for _, h in cols]],
        rows,
        numeric=set(range(2, 2 + len(cols))),
        cls="experiments",
    )


def _failures_table(df: pd.DataFrame) -> str:
    failed = df[df["_status"] != "ok"]
    if failed.empty:
        return "<p>No failed experiments.</p>"
    rows = []
    for _, r in failed.iterrows():
        line = rules.first_error_line(r.get("error_messages"))
        head = line.split(":", 1)[0]
        error_class = (
            head.rsplit(".", 1)[-1] if head.endswith(("Error", "Exception", "Interrupt", "Exit")) else ""
        )
        rows.append([r["_label"], r["_status"], error_class or "–", line or "–"])
    return _table(["experiment", "status", "error class", "error"], rows, cls="failures")


def _padding_section(df: pd.DataFrame) -> str:
    """Padded and unpadded runs side by side: what padding costs, and which attention kernel each one got."""
    cols = [c for c in ("synthetic_length_distribution", "packing", "steady_padding_fraction",
                        "scan_attention_backend", "steady_step_time_median", "steady_nonpad_tokens_per_second",
                        "steady_step_time_cv") if c in df.columns]
    ok = df[df["_status"] == "ok"]
    if "steady_padding_fraction" not in ok.columns or ok.empty:
        return _omitted("no steady-state columns in this CSV")
    rows = [[r["_label"], *[rules.format_value(c, r[c]) if rules.metric_family(c) else rules.canonical(r[c])
                             for c in cols]] for _, r in ok.sort_values("steady_padding_fraction").iterrows()]
    note = ("<p>Same model and batch with and without padding (e.g. scenarios <code>full-finetuning</code> and "
            "<code>full-finetuning-padded</code>): a padding mask can move SDPA to a slower kernel, or make it "
            "build a new kernel plan for every padded length (see the step CV).</p>")
    return note + _table(["experiment", *cols], rows, numeric=set(range(1, len(cols) + 1)), cls="padding")


def _prediction_section(df: pd.DataFrame) -> str:
    from tunebench.results.prediction_errors import ERROR_PAIRS

    chart = _chart(charts.predicted_vs_measured, df, ERROR_PAIRS)
    errors = [f"pred_error_{name}" for name, _ in ERROR_PAIRS if f"pred_error_{name}" in df.columns]
    if not errors:
        return chart
    worst = []
    for _, r in df.iterrows():
        for column in errors:
            if pd.notna(r[column]):
                worst.append((abs(r[column]), r["_label"], column.removeprefix("pred_error_"), r[column]))
    worst.sort(key=lambda w: -w[0])
    rows = [[label, category, f"{100 * error:+.2f} %"] for _, label, category, error in worst[:10]]
    return chart + "<h3>Worst predictions</h3>" + _table(["experiment", "category", "predicted / measured − 1"],
                                                          rows, numeric={2}, cls="predictions")


def _environment(df: pd.DataFrame) -> str:
    rows = []
    for col in sorted(rules.ENVIRONMENT_COLUMNS):
        if col in df.columns:
            values = sorted({rules.canonical(v) for v in df[col]} - {""})
            rows.append([col, ", ".join(values) or "–"])
    return _table(["column", "values"], rows, cls="environment") if rows else "<p>No environment columns.</p>"


def _comparison_section(result: cmp.CompareResult) -> str:
    out = result.outliers
    counts = out.groupby("kind").size().to_dict()
    n_reg = int(out["regression"].sum())
    parts = [
        # Coloured text, not emoji: headless/CI browsers often lack an emoji font and show boxes.
        (
            f'<p><b class="status-bad">{n_reg} regression(s)</b> · '
            if n_reg
            else '<p><b class="status-ok">no regression</b> · '
        )  # fmt: skip
        + " ".join(f'<span class="pill">{html.escape(k)}: {v}</span>' for k, v in sorted(counts.items()))
        + "</p>"
    ]
    if not out.empty:
        rows = [
            [
                r.label,
                r.kind,
                "yes" if r.regression else "no",
                r.metric if isinstance(r.metric, str) else "",
                rules.format_value(r.metric, r.reference)
                if isinstance(r.metric, str)
                else r.status_reference,
                rules.format_value(r.metric, r.new) if isinstance(r.metric, str) else r.status_new,
                signed_pct(r.delta_pct),
            ]
            for r in out.astype({"status_reference": object, "status_new": object}).fillna(
                {"status_reference": "", "status_new": ""}).itertuples()
        ]
        parts.append(
            _table(
                ["experiment", "finding", "regression", "metric", "reference", "new", "change"],
                rows,
                numeric={4, 5, 6},
                cls="findings",
            )
        )
    tested = [r for r in result.comparison.itertuples() if is_tested(r)]
    if tested:  # the verdicts that rest on step samples, with their intervals
        rows = [[r.label, r.metric, r.verdict, signed_pct(r.delta_pct), interval_text(r)] for r in tested]
        parts += ["<h3>Steady time and throughput: significance and effect size</h3>",
                  _table(["experiment", "metric", "verdict", "change", "test"], rows, numeric={3}, cls="verdicts")]
    if len(result.changed_arguments):
        parts.append("<h3>Changed arguments</h3>")
        parts.append(
            _table(
                ["experiment", "argument", "reference", "new"],
                result.changed_arguments.values.tolist(),
                cls="changed",
            )
        )
    if not result.comparison.empty and (result.comparison["verdict"] != "ignored").any():
        parts.append(_img(charts.delta_heatmap(result.comparison), "change vs reference"))
    return "\n".join(parts)


def build_report(df: pd.DataFrame, source: str, reference: pd.DataFrame | None = None, samples=(None, None)) -> str:
    """The whole HTML page (charts embedded as base64 PNG) for one results CSV; `samples` = the step samples of
    (reference, results) for the comparison."""
    metric_cols = [c for c in df.columns if rules.metric_family(c)]
    df = numeric_metrics(df, metric_cols, "results")
    df["_label"], df["_status"] = _labels(df), _status(df)
    status_counts = df["_status"].value_counts()
    pills = " ".join(f'<span class="pill">{html.escape(s)}: {n}</span>' for s, n in status_counts.items())
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    ok = df[df["_status"] == "ok"]
    body = [
        "<h1>tunebench report</h1>",
        f'<p class="meta">source: <code>{html.escape(source)}</code> · generated {now} · {len(df)} experiment rows '
        f"{pills}</p>",
        "<h2>Experiments</h2>",
        _experiments_table(df),
        "<h2>Memory breakdown (scanner)</h2>",
        _chart(
            charts.breakdown_chart,
            df,
            df["_label"],
            MEMORY_PARTS,
            "scan_mem_peak_allocated",
            "Memory by category",
        ),
        "<h2>Step time breakdown (scanner)</h2>",
        _chart(
            charts.breakdown_chart, df, df["_label"], TIME_PARTS, "scan_time_step", "Time per step by phase"
        ),
        "<h2>Scaling with GPU count</h2>",
        _chart(
            charts.curves_chart,
            ok,
            "num_gpus",
            SCALING_PANELS,
            _families(ok, "num_gpus"),
            "Throughput and MFU vs GPU count",
        ),
        "<h2>Memory vs effective batch size</h2>",
        _chart(
            charts.curves_chart,
            ok,
            "effective_batch_size",
            MEMORY_PANELS,
            _families(ok, "effective_batch_size", "per_device_train_batch_size"),
            "Memory vs effective batch size",
        ),
        "<h2>Padding and attention kernels</h2>",
        _padding_section(df),
        "<h2>Memory: predicted before launch vs measured</h2>",
        _prediction_section(df),
        "<h2>Failures</h2>",
        _failures_table(df),
        "<h2>Environment</h2>",
        _environment(df),
    ]
    if reference is not None:
        result = cmp.compare_frames(reference, df.drop(columns=["_label", "_status"]),
                                    reference_samples=samples[0], results_samples=samples[1])
        body += [
            f"<h2>Comparison with reference <code>{html.escape(reference.attrs.get('path', ''))}</code></h2>",
            _comparison_section(result),
        ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>tunebench report</title>'
        f"<style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def write_report(
    results: str | Path, out: str | Path | None = None, reference: str | Path | None = None
) -> Path:
    """Render ``results`` (dir or CSV) to ``out`` (default ``<results dir>/report.html``); returns the path."""
    csv = resolve_results_csv(results)
    df = load_csv(csv, "results")
    ref = load_csv(reference, "reference") if reference is not None else None
    samples = (load_samples(reference)[0], load_samples(results)[0]) if reference is not None else (None, None)
    page = build_report(df, str(csv), ref, samples)
    path = Path(out) if out is not None else csv.parent / "report.html"
    write_atomic(path, page)
    return path


def main(argv: list[str] | None = None) -> int:
    """CLI entry: 0 = report written, 2 = usage or input error."""
    p = argparse.ArgumentParser(prog="benchmark.py report", description=__doc__.splitlines()[0])
    p.add_argument("results", help="results directory (uses raw_summary.csv) or a CSV")
    p.add_argument("--out", default=None, help="HTML file to write (default: <results dir>/report.html)")
    p.add_argument("--reference", default=None, help="also compare with this reference CSV")
    try:
        args = p.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        path = write_report(args.results, args.out, args.reference)
    except CompareInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"report written to {path}", file=sys.stderr)
    return 0
