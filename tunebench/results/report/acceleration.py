"""The report's acceleration section: each framework config beside its baseline, the speed-up and the peak
change next to the loss parity, so a speed-up that came with other numerics is seen where the speed-up is."""

from __future__ import annotations

import logging

import pandas as pd
from markupsafe import Markup

from tunebench.results.report import measurement_warnings as warn
from tunebench.results.report.html import table
from tunebench.results.report.templates import render
from tunebench.vocabulary import Status

logger = logging.getLogger(__name__)

THROUGHPUT = "steady_nonpad_tokens_per_second"
TO_TARGET = "loss_target_seconds"  # time to the target loss: the speed-up that counts what was learnt
PEAK = "mem_peak_torch_max_allocated_bytes"


def _ratio(value, base) -> str:
    value, base = pd.to_numeric(value, errors="coerce"), pd.to_numeric(base, errors="coerce")
    return f"{value / base:.2f}×" if pd.notna(value) and pd.notna(base) and base else "–"


def _parity(row: pd.Series) -> str:
    value = pd.to_numeric(row.get("loss_parity_max_rel_diff"), errors="coerce")
    if pd.isna(value):
        return "–"
    ok = str(row.get("loss_parity_ok")).lower() == "true"
    return f"{100 * value:.3g} %" + ("" if ok else " (beyond tolerance)")


def section(df: pd.DataFrame, labels: pd.Series, warnings: pd.Series) -> Markup:
    """The section, heading included: a table of every ok row that has a baseline other than itself
    (`loss_parity_baseline`); nothing for a CSV from before loss parity (the other sections still apply)."""
    needed = {"loss_parity_baseline", "experiment_id", "framework_config"}
    if not needed <= set(df.columns):
        return Markup()
    ok = df[df["_status"] == Status.OK]
    by_id = ok.drop_duplicates("experiment_id").set_index("experiment_id")
    accelerated = ok[ok["loss_parity_baseline"].notna() & (ok["loss_parity_baseline"] != ok["experiment_id"])]
    if accelerated.empty:
        return render("acceleration.html.j2", table=None,
                      reason="no framework config ran beside its baseline (framework config `none`) in this CSV")
    rows = []
    for i, row in accelerated.iterrows():
        base = by_id.loc[row["loss_parity_baseline"]] if row["loss_parity_baseline"] in by_id.index else None
        speedup = _ratio(row.get(THROUGHPUT), None if base is None else base.get(THROUGHPUT))
        to_target = _ratio(None if base is None else base.get(TO_TARGET), row.get(TO_TARGET))  # base ÷ run: × faster
        peak = _ratio(row.get(PEAK), None if base is None else base.get(PEAK))
        rows.append([labels[i], row["framework_config"], warn.marked(speedup, warnings[i]), to_target, peak,
                     _parity(row)])
    headers = ["experiment", "framework config", "speed-up (steady tokens/s)", "speed-up to target loss", "peak memory",
               "loss parity"]
    return render("acceleration.html.j2", table=table(headers, rows, numeric={2, 3, 4, 5}, cls="acceleration"),
                  note=warn.elsewhere_note(warnings[accelerated.index]))
