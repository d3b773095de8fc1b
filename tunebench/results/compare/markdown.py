"""The markdown summary of a comparison (for $GITHUB_STEP_SUMMARY and `compare`'s summary.md)."""

from __future__ import annotations

import logging

import pandas as pd

from tunebench.results.compare import rules
from tunebench.results.compare.result import CompareResult
from tunebench.results.compare.steady import band_text, interval_text, is_tested

logger = logging.getLogger(__name__)


def _md_cell(value) -> str:
    text = "" if value is None or (not isinstance(value, str) and pd.isna(value)) else str(value)
    return text.replace("|", "\\|").replace("\n", " ")[:200]


def _md_table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def signed_pct(value: float) -> str:
    return "" if pd.isna(value) else f"{value:+.1f} %"


def _threshold_cell(row) -> str:
    """The bar a change had to clear: the threshold, or the minimum effect when significance was tested."""
    if is_tested(row):
        return f"min effect {row.min_effect_pct:g} %"
    return f"{row.threshold_pct:g} %"


KINDS = ("regression", "failed", "missing", "unstable", "improvement", "fixed", "new")
METRIC_HEADERS = ["experiment", "metric", "reference", "new", "change", "threshold", "noise band", "test",
                  "why it moved"]


def render_markdown(result: CompareResult) -> str:
    """Summary for $GITHUB_STEP_SUMMARY: verdict, counts, then one table per non-empty finding kind."""
    out = result.outliers
    n_reg = int(out["regression"].sum())
    by_kind = {kind: out[out["kind"] == kind] for kind in KINDS}
    verdict = f"❌ {n_reg} regression(s)" if n_reg else "✅ no regression"
    counts = [[len(by_kind["regression"]), len(by_kind["failed"]), len(by_kind["missing"]),
               len(by_kind["improvement"]) + len(by_kind["fixed"]), len(by_kind["new"]),
               len(result.changed_arguments), len(by_kind["unstable"])]]
    parts = [f"## tunebench comparison: {verdict}", "",
             _md_table(["metric regressions", "failed", "missing", "improvements", "new", "changed arguments",
                        "unstable (not failing)"], counts), ""]
    parts.append(f"Join keys: {', '.join(f'`{k}`' for k in result.keys)}")
    parts += [f"- {note}" for note in result.notes] + [""]
    for title, headers, rows in _sections(result, by_kind):
        if rows:
            parts += [f"### {title}", _md_table(headers, rows), ""]
    if result.files:
        parts.append("Files: " + ", ".join(f"`{p.name}`" for p in result.files))
    return "\n".join(parts).rstrip() + "\n"


def _metric_rows(df: pd.DataFrame) -> list[list]:
    return [[r.label, r.metric, rules.format_value(r.metric, r.reference), rules.format_value(r.metric, r.new),
             signed_pct(r.delta_pct), _threshold_cell(r), band_text(r), interval_text(r), r.why]
            for r in df.itertuples()]


def _sections(result: CompareResult, by_kind: dict[str, pd.DataFrame]) -> list[tuple[str, list[str], list[list]]]:
    """(title, headers, rows) of each finding's table, in the summary's order; empty rows leave a table out."""
    unstable = [[r.label, r.metric, rules.format_value(r.metric, r.reference), rules.format_value(r.metric, r.new),
                 signed_pct(r.delta_pct), interval_text(r, with_detail=False), r.detail, r.why]
                for r in by_kind["unstable"].itertuples()]
    failed = [[r.label, r.status_new, r.status_reference, "yes" if r.regression else f"no ({r.detail})", r.error]
              for r in by_kind["failed"].itertuples()]
    missing = [[r.label, r.status_reference, "yes" if r.regression else "no (--allow_missing)"]
               for r in by_kind["missing"].itertuples()]
    improved = _metric_rows(by_kind["improvement"]) + [
        [r.label, "status", r.status_reference, r.status_new, "fixed", "", "", "", ""]
        for r in by_kind["fixed"].itertuples()]
    return [
        ("Regressions", METRIC_HEADERS, _metric_rows(by_kind["regression"])),
        ("Unstable (too noisy to tell; not a regression)",
         ["experiment", "metric", "reference", "new", "change", "test", "why unstable", "why it moved"], unstable),
        ("Failed", ["experiment", "status", "reference status", "regression", "error"], failed),
        ("Missing from results", ["experiment", "reference status", "regression"], missing),
        ("Improvements", METRIC_HEADERS, improved),
        ("New experiments without reference", ["experiment", "status"],
         [[r.label, r.status_new] for r in by_kind["new"].itertuples()]),
        ("Changed arguments", ["experiment", "argument", "reference", "new"],
         result.changed_arguments.values.tolist()),
        ("Environment differences", ["column", "reference", "results"], [list(e) for e in result.environment]),
    ]
