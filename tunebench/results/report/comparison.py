"""The report's comparison with a reference: findings, tested steady verdicts, changed arguments, heatmap."""

from __future__ import annotations

import html
import logging

import pandas as pd

from tunebench.results.charts import figures as charts
from tunebench.results.compare import rules
from tunebench.results.compare.markdown import signed_pct
from tunebench.results.compare.result import CompareResult
from tunebench.results.compare.steady import interval_text, is_tested
from tunebench.results.report.html import img, table
from tunebench.results.report.measurement_warnings import elsewhere_note, is_steady, marked, warning_texts

logger = logging.getLogger(__name__)


def _key(values) -> tuple[str, ...]:
    return tuple(rules.canonical(v) for v in values)


def warnings_by_key(results: pd.DataFrame, keys: list[str]) -> dict[tuple[str, ...], str]:
    """The measurement warnings of the results rows behind each compared experiment (repeats joined)."""
    texts = warning_texts(results)
    present = [k for k in keys if k in results.columns]
    found: dict[tuple[str, ...], list[str]] = {}
    for i, text in texts.items():
        if text:
            found.setdefault(_key(results.loc[i, present]), []).append(text)
    return {key: "; ".join(dict.fromkeys(values)) for key, values in found.items()}


def _row_warning(row, keys: list[str], warned: dict[tuple[str, ...], str]) -> str:
    return warned.get(_key(getattr(row, k, "") for k in keys), "") if warned else ""


def section(result: CompareResult, results: pd.DataFrame) -> str:
    """`results`: the results rows compared, whose measurement warnings qualify their steady figures here too."""
    keys = [k for k in result.keys if k in results.columns]
    warned = warnings_by_key(results, keys)
    out = result.outliers
    counts = out.groupby("kind").size().to_dict()
    n_reg = int(out["regression"].sum())
    parts = [
        # Coloured text, not emoji: headless/CI browsers often lack an emoji font and show boxes.
        (f'<p><b class="status-bad">{n_reg} regression(s)</b> · ' if n_reg
         else '<p><b class="status-ok">no regression</b> · ')
        + " ".join(f'<span class="pill">{html.escape(k)}: {v}</span>' for k, v in sorted(counts.items()))
        + "</p>"
    ]
    if not out.empty:
        rows, notes = [], []
        frame = out.astype({"status_reference": object, "status_new": object}).fillna(
            {"status_reference": "", "status_new": ""})
        for r in frame.itertuples():
            metric = r.metric if isinstance(r.metric, str) else ""
            warning = _row_warning(r, keys, warned) if metric and is_steady(metric) else ""
            new = rules.format_value(metric, r.new) if metric else r.status_new
            rows.append([r.label, r.kind, "yes" if r.regression else "no", metric,
                         rules.format_value(metric, r.reference) if metric else r.status_reference,
                         marked(new, warning), signed_pct(r.delta_pct)])
            notes.append(warning)
        parts.append(table(["experiment", "finding", "regression", "metric", "reference", "new", "change"], rows,
                           numeric={4, 5, 6}, cls="findings") + elsewhere_note(notes))
    tested = [r for r in result.comparison.itertuples() if is_tested(r)]
    if tested:  # the verdicts that rest on step samples, with their intervals
        warnings = [_row_warning(r, keys, warned) for r in tested]
        rows = [[r.label, r.metric, r.verdict, marked(signed_pct(r.delta_pct), w), interval_text(r)]
                for r, w in zip(tested, warnings, strict=True)]
        parts += ["<h3>Steady time and throughput: significance and effect size</h3>",
                  table(["experiment", "metric", "verdict", "change", "test"], rows, numeric={3}, cls="verdicts")
                  + elsewhere_note(warnings)]
    if len(result.changed_arguments):
        parts.append("<h3>Changed arguments</h3>")
        parts.append(table(["experiment", "argument", "reference", "new"], result.changed_arguments.values.tolist(),
                           cls="changed"))
    if not result.comparison.empty and (result.comparison["verdict"] != "ignored").any():
        parts.append(img(charts.delta_heatmap(result.comparison), "change vs reference"))
    return "\n".join(parts)
