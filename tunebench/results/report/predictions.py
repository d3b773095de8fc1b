"""The report's prediction section: predicted against measured memory, only where the two mean the same thing.

On CUDA the scanner takes every category at the allocator's peak, the instant the prediction describes. On CPU
there is no allocator peak: the scanner's `activations` is the step's maximum (the prediction's CPU figure is
that same maximum), `grads` is the most gradient memory held at any phase boundary, and `temporaries`, `other`
and the peak are left empty. So on CPU rows only the static categories and the activations are compared.
"""

from __future__ import annotations

import logging

import pandas as pd
from markupsafe import Markup

from tunebench.planning.prediction_errors import ERROR_PAIRS
from tunebench.planning.sharding_notes import LEAD as SHARDING_LEAD
from tunebench.results.charts import figures as charts
from tunebench.results.report.html import img, omitted, table
from tunebench.results.report.templates import macros

logger = logging.getLogger(__name__)

# category -> why a CPU row's prediction of it cannot be held against its measurement.
CPU_NOT_COMPARABLE = {
    "grads": "the CPU scanner reports the most gradient memory held at any phase boundary of the step, while the "
             "prediction gives the gradients live at its predicted peak (none when that peak falls in the forward "
             "pass, before backward creates them)",
    "temporaries": "the scanner measures no temporaries on CPU (there is no allocator peak to take them at)",
    "peak": "no allocator peak is measured on CPU",
}
WORST_ROWS = 10


def is_cpu(df: pd.DataFrame) -> pd.Series:
    """Rows measured on CPU; rows without a device_type are taken as GPU rows (left as they were)."""
    if "device_type" not in df.columns:
        return pd.Series(False, index=df.index)
    return df["device_type"].astype(str).str.strip().str.lower() == "cpu"


def comparable(df: pd.DataFrame, category: str) -> pd.Series:
    """Rows whose prediction of `category` can be compared with what the run measured."""
    if category in CPU_NOT_COMPARABLE:
        return ~is_cpu(df)
    return pd.Series(True, index=df.index)


def comparable_only(df: pd.DataFrame) -> pd.DataFrame:
    """A copy whose predictions and errors that cannot be compared are blanked (so no chart or table uses them)."""
    out = df.copy()
    for name, _ in ERROR_PAIRS:
        keep = comparable(out, name)
        for column in (f"pred_mem_{name}", f"pred_error_{name}"):
            if column in out.columns:
                out[column] = out[column].where(keep)
    return out


def _exclusion_note(df: pd.DataFrame) -> Markup:
    """Which categories were left out on CPU rows that had a prediction of them, and why."""
    cpu = is_cpu(df)
    left_out = [name for name in CPU_NOT_COMPARABLE
                if f"pred_mem_{name}" in df.columns and df.loc[cpu, f"pred_mem_{name}"].notna().any()]
    if not left_out:
        return Markup()
    return macros("predictions.html.j2").exclusion_note(int(cpu.sum()),
                                                        [(name, CPU_NOT_COMPARABLE[name]) for name in left_out])


def worst(df: pd.DataFrame, labels: pd.Series, count: int = WORST_ROWS) -> list[tuple[str, str, float, str]]:
    """(label, category, predicted / measured − 1, the bound's word) of the comparable pairs, largest |error|
    first."""
    measured_of = dict(ERROR_PAIRS)
    found = []
    for name, _ in ERROR_PAIRS:
        column = f"pred_error_{name}"
        if column not in df.columns:
            continue
        errors = df[column].where(comparable(df, name)).dropna()
        found += [(abs(error), labels[i], name, error, bound_word(df.loc[i], name, measured_of[name]))
                  for i, error in errors.items()]
    found.sort(key=lambda item: -item[0])
    return [item[1:] for item in found[:count]]


def bound_word(row: pd.Series, name: str, measured: str) -> str:
    """The calibrated bound of a prediction (planning.residuals) and whether the measurement stayed under it."""
    bound, predicted, actual = row.get(f"pred_mem_{name}_upper"), row.get(f"pred_mem_{name}"), row.get(measured)
    if not all(pd.api.types.is_number(v) and pd.notna(v) for v in (bound, predicted, actual)) or not predicted:
        return "–"
    over = f"+{100 * (bound / predicted - 1):.2f} %"
    return f"within ({over})" if actual <= bound else f"above ({over}): a new residual for the data"


def sharding_notes(df: pd.DataFrame, labels: pd.Series) -> Markup:
    """The sharded rows whose planned per-rank peak is not below one GPU's, each with the causes its `pred_note`
    names (planning.sharding_notes: FSDP's float32 master weights first); '' when there is none."""
    if "pred_note" not in df.columns:
        return Markup()
    rows = []
    for i, note in df["pred_note"].items():
        said = [part for part in str(note).split("; ") if part.startswith(SHARDING_LEAD)] if pd.notna(note) else []
        rows += [[labels[i], part.removeprefix(SHARDING_LEAD).lstrip(": ")] for part in said]
    if not rows:
        return Markup()
    return macros("predictions.html.j2").sharding(table(["experiment", "why"], rows, cls="sharding"))


def section(df: pd.DataFrame, labels: pd.Series) -> Markup:
    """Chart of predicted vs measured per category, the CPU exclusions, the worst predictions table and the sharded
    rows that save nothing."""
    shown = comparable_only(df)
    try:
        chart = img(charts.predicted_vs_measured(shown, ERROR_PAIRS), "predicted vs measured memory")
    except charts.ChartSkipped as skipped:
        chart = omitted(str(skipped))
    # + 0.0 turns a rounded -0.0 into 0.0: a prediction a few bytes over is not "-0.00 %".
    rows = [[label, name, f"{round(100 * error, 2) + 0.0:+.2f} %", bound]
            for label, name, error, bound in worst(df, labels)]
    worst_table = table(["experiment", "category", "predicted / measured − 1", "measured vs calibrated bound"], rows,
                        numeric={2}, cls="predictions") if rows else None
    errors = any(f"pred_error_{name}" in df.columns for name, _ in ERROR_PAIRS)
    return macros("predictions.html.j2").section(chart, _exclusion_note(df), errors, worst_table,
                                                 sharding_notes(df, labels))
