"""The report's comparison with a reference: findings, tested steady verdicts, changed arguments, heatmap."""

from __future__ import annotations

import logging

import pandas as pd
from markupsafe import Markup

from tunebench.results.charts import figures as charts
from tunebench.results.compare import rules
from tunebench.results.compare.markdown import signed_pct
from tunebench.results.compare.result import CompareResult
from tunebench.results.compare.steady import interval_text, is_tested
from tunebench.results.report.html import img, table
from tunebench.results.report.measurement_warnings import elsewhere_note, is_steady, marked, warning_texts
from tunebench.results.report.templates import render

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


def section(result: CompareResult, results: pd.DataFrame) -> Markup:
    """`results`: the results rows compared, whose measurement warnings qualify their steady figures here too."""
    keys = [k for k in result.keys if k in results.columns]
    warned = warnings_by_key(results, keys)
    out = result.outliers
    heatmap = None
    if not result.comparison.empty and (result.comparison["verdict"] != "ignored").any():
        heatmap = img(charts.delta_heatmap(result.comparison), "change vs reference")
    changed = None
    if len(result.changed_arguments):
        changed = table(["experiment", "argument", "reference", "new"], result.changed_arguments.values.tolist(),
                        cls="changed")
    return render("comparison.html.j2", regressions=int(out["regression"].sum()),
                  counts=sorted(out.groupby("kind").size().to_dict().items()),
                  findings=_findings(out, keys, warned), verdicts=_verdicts(result, keys, warned), changed=changed,
                  heatmap=heatmap)


def _findings(out: pd.DataFrame, keys: list[str], warned: dict) -> Markup | None:
    """The findings table (one row per outlier) and its measurement-warning line; None without findings."""
    if out.empty:
        return None
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
    return table(["experiment", "finding", "regression", "metric", "reference", "new", "change"], rows,
                 numeric={4, 5, 6}, cls="findings") + elsewhere_note(notes)


def _verdicts(result: CompareResult, keys: list[str], warned: dict) -> Markup | None:
    """The verdicts that rest on step samples, with their intervals; None when no verdict was tested."""
    tested = [r for r in result.comparison.itertuples() if is_tested(r)]
    if not tested:
        return None
    warnings = [_row_warning(r, keys, warned) for r in tested]
    rows = [[r.label, r.metric, r.verdict, marked(signed_pct(r.delta_pct), w), interval_text(r)]
            for r, w in zip(tested, warnings, strict=True)]
    return table(["experiment", "metric", "verdict", "change", "test"], rows, numeric={3}, cls="verdicts") + \
        elsewhere_note(warnings)
