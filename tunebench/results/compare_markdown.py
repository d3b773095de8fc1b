"""The markdown summary of a comparison (for $GITHUB_STEP_SUMMARY and `compare`'s summary.md)."""

from __future__ import annotations

import logging

import pandas as pd

from tunebench.results import compare_rules as rules
from tunebench.results.compare_result import CompareResult
from tunebench.results.compare_samples import band_text, interval_text, is_tested

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


def render_markdown(result: CompareResult) -> str:
    """Summary for $GITHUB_STEP_SUMMARY: verdict, counts, then one table per non-empty finding kind."""
    out = result.outliers
    n_reg = int(out["regression"].sum())
    by_kind = {
        kind: out[out["kind"] == kind]
        for kind in ("regression", "failed", "missing", "unstable", "improvement", "fixed", "new")
    }
    verdict = f"❌ {n_reg} regression(s)" if n_reg else "✅ no regression"
    parts = [f"## tunebench comparison: {verdict}", ""]
    counts = [
        [
            len(by_kind["regression"]),
            len(by_kind["failed"]),
            len(by_kind["missing"]),
            len(by_kind["improvement"]) + len(by_kind["fixed"]),
            len(by_kind["new"]),
            len(result.changed_arguments),
            len(by_kind["unstable"]),
        ]
    ]
    parts += [
        _md_table(
            ["metric regressions", "failed", "missing", "improvements", "new", "changed arguments",
             "unstable (not failing)"], counts
        ),
        "",
    ]
    parts.append(f"Join keys: {', '.join(f'`{k}`' for k in result.keys)}")
    parts += [f"- {note}" for note in result.notes] + [""]

    def metric_rows(df):
        return [
            [
                r.label,
                r.metric,
                rules.format_value(r.metric, r.reference),
                rules.format_value(r.metric, r.new),
                signed_pct(r.delta_pct),
                _threshold_cell(r),
                band_text(r),
                interval_text(r),
                r.why,
            ]
            for r in df.itertuples()
        ]

    metric_headers = ["experiment", "metric", "reference", "new", "change", "threshold", "noise band", "test",
                      "why it moved"]
    if len(by_kind["regression"]):
        parts += ["### Regressions", _md_table(metric_headers, metric_rows(by_kind["regression"])), ""]
    if len(by_kind["unstable"]):
        rows = [[r.label, r.metric, rules.format_value(r.metric, r.reference), rules.format_value(r.metric, r.new),
                 signed_pct(r.delta_pct), interval_text(r, with_detail=False), r.detail, r.why]
                for r in by_kind["unstable"].itertuples()]  # fmt: skip
        parts += [
            "### Unstable (too noisy to tell; not a regression)",
            _md_table(["experiment", "metric", "reference", "new", "change", "test", "why unstable",
                       "why it moved"], rows),
            "",
        ]
    if len(by_kind["failed"]):
        rows = [
            [
                r.label,
                r.status_new,
                r.status_reference,
                "yes" if r.regression else f"no ({r.detail})",
                r.error,
            ]
            for r in by_kind["failed"].itertuples()
        ]
        parts += [
            "### Failed",
            _md_table(["experiment", "status", "reference status", "regression", "error"], rows),
            "",
        ]
    if len(by_kind["missing"]):
        rows = [
            [r.label, r.status_reference, "yes" if r.regression else "no (--allow_missing)"]
            for r in by_kind["missing"].itertuples()
        ]
        parts += [
            "### Missing from results",
            _md_table(["experiment", "reference status", "regression"], rows),
            "",
        ]
    if len(by_kind["improvement"]) or len(by_kind["fixed"]):
        rows = metric_rows(by_kind["improvement"])
        rows += [
            [r.label, "status", r.status_reference, r.status_new, "fixed", "", "", "", ""]
            for r in by_kind["fixed"].itertuples()
        ]
        parts += ["### Improvements", _md_table(metric_headers, rows), ""]
    if len(by_kind["new"]):
        rows = [[r.label, r.status_new] for r in by_kind["new"].itertuples()]
        parts += ["### New experiments without reference", _md_table(["experiment", "status"], rows), ""]
    if len(result.changed_arguments):
        parts += [
            "### Changed arguments",
            _md_table(
                ["experiment", "argument", "reference", "new"], result.changed_arguments.values.tolist()
            ),
            "",
        ]
    if result.environment:
        parts += [
            "### Environment differences",
            _md_table(["column", "reference", "results"], [list(e) for e in result.environment]),
            "",
        ]
    if result.files:
        parts.append("Files: " + ", ".join(f"`{p.name}`" for p in result.files))
    return "\n".join(parts).rstrip() + "\n"
