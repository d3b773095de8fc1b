"""Regression comparison of results against a reference CSV: join, judge every metric, write the findings.

The command line is tunebench.cli.compare; the rules (families, thresholds, noise bands) are
tunebench.results.compare.rules; steady time and throughput metrics with step samples
(tunebench.results.compare.samples) are judged by significance and effect size in tunebench.results.compare.steady.
"""

from __future__ import annotations

import fnmatch
import logging
import os
from pathlib import Path

import numpy as np
import pandas as pd

from tunebench.fileio import write_atomic
from tunebench.results.compare import rules
from tunebench.results.compare import steady as sampled
from tunebench.results.compare.markdown import render_markdown
from tunebench.results.compare.reading import (
    CompareInputError,
    load_csv,
    numeric_metrics,
    resolve_results_csv,
)
from tunebench.results.compare.result import CompareResult
from tunebench.results.compare.rules import canonical, experiment_labels, first_error_line, judge
from tunebench.results.compare.samples import Runs, load_samples
from tunebench.telemetry import environment_summary as steady_environment
from tunebench.vocabulary import Status

logger = logging.getLogger(__name__)

OK, SKIPPED = Status.OK, Status.SKIPPED


# ----------------------------------------------------------------------------------------------- judging
def _group(df: pd.DataFrame, keys: list[str], metrics: list[str], arguments: list[str]) -> pd.DataFrame:
    """One row per experiment key: repeat count, status summary, medians and spreads over ok rows, the ok rows'
    experiment ids and median step time (to find and check their step samples), environment values."""
    df = df.copy()
    steps = pd.to_numeric(df.get(sampled.MEDIAN_COLUMN, pd.Series(np.nan, index=df.index)), errors="coerce")
    environment = sorted(c for c in rules.ENVIRONMENT_COLUMNS if c in df.columns)
    df["_key"] = df[keys].apply(lambda row: "\x1f".join(canonical(v) for v in row), axis=1)
    status = df["status"].map(canonical).str.lower().replace("", "unknown") if "status" in df else OK
    df["_status"] = status
    errors = df["error_messages"] if "error_messages" in df else pd.Series("", index=df.index)
    df["_error"] = errors.map(first_error_line)
    rows = {}
    for key, grp in df.groupby("_key", sort=False):
        ok = grp[grp["_status"] == OK]
        bad = grp[grp["_status"] != OK]
        row = {
            "_n": len(grp),
            "_n_ok": len(ok),
            "_status": OK if bad.empty else ",".join(sorted(set(bad["_status"]))),
            "_error": next((e for e in bad["_error"] if e), ""),
            "_ids": tuple(ok["experiment_id"].astype(str).str.strip()) if "experiment_id" in ok else (),
            "_median_step": float(steps[ok.index].median()) if steps[ok.index].notna().any() else np.nan,
        }
        for c in environment:
            row[f"{c}__env"] = ", ".join(sorted({canonical(v) for v in grp[c]} - {""})) or "∅"
        for k in keys:
            row[k] = grp[k].iloc[0]
        for m in metrics:
            vals = ok[m].dropna()
            row[m] = float(vals.median()) if len(vals) else np.nan
            row[f"{m}__spread"] = float(vals.max() - vals.min()) if len(vals) else np.nan
        for a in arguments:
            row[f"{a}__arg"] = grp[a].iloc[0]
        row["_environment"] = steady_environment.group_view(grp.to_dict("records"))
        rows[key] = row
    return pd.DataFrame.from_dict(rows, orient="index")


def _resolve_keys(
    ref: pd.DataFrame, new: pd.DataFrame, keys: list[str] | None, notes: list[str]
) -> list[str]:
    if keys:
        for role, df in (("reference", ref), ("results", new)):
            absent = [k for k in keys if k not in df.columns]
            if absent:
                raise CompareInputError(
                    f"{role} {df.attrs.get('path', '?')}: key column(s) {absent} not in the CSV; "
                    f"choose --keys from its columns"
                )
        return list(keys)
    chosen = []
    for k in rules.DEFAULT_KEYS:
        if k in ref.columns and k in new.columns:
            chosen.append(k)
        elif k in ref.columns or k in new.columns:
            where = "reference" if k in ref.columns else "results"
            notes.append(f"key `{k}` is only in the {where} CSV and is not used to join")
        else:
            notes.append(f"key `{k}` is in neither CSV and is not used to join")
    if not chosen:
        raise CompareInputError(
            f"no common key column between reference {ref.attrs.get('path', '?')} and results "
            f"{new.attrs.get('path', '?')} (defaults: {', '.join(rules.DEFAULT_KEYS)}); pass --keys col,col"
        )
    return chosen


def _select_metrics(ref, new, patterns, thresholds, directions, min_effects, notes) -> list[str]:
    ref_m = [c for c in ref.columns if rules.metric_family(c)]
    new_m = [c for c in new.columns if rules.metric_family(c)]
    common = [c for c in ref_m if c in new_m]
    for role, only in (("reference", set(ref_m) - set(new_m)), ("results", set(new_m) - set(ref_m))):
        if only:
            notes.append(f"metric column(s) only in the {role} CSV, not compared: {', '.join(sorted(only))}")
    if patterns:
        unmatched = [p for p in patterns if not any(fnmatch.fnmatchcase(c, p) for c in common)]
        if unmatched:
            raise CompareInputError(
                f"--metrics {unmatched}: no common metric column matches; available: {', '.join(common)}"
            )
        common = [c for c in common if any(fnmatch.fnmatchcase(c, p) for p in patterns)]
    unknown = rules.unknown_override_names(list(thresholds) + list(directions) + list(min_effects), ref_m + new_m)
    if unknown:
        raise CompareInputError(
            f"--threshold/--direction/--min_effect name(s) {unknown} match no metric column and no family "
            f"({', '.join(rules.DEFAULT_RULES)}); fix the spelling"
        )
    # A minimum effect means something only where significance is tested: time and throughput metrics.
    timed = [c for c in ref_m + new_m if rules.metric_family(c) in ("time", "throughput")]
    off = [n for n in min_effects if n not in ("time", "throughput") and (n in rules.DEFAULT_RULES or
                                                                          rules.unknown_override_names([n], timed))]
    if off:
        raise CompareInputError(f"--min_effect {off}: only time and throughput metrics have a minimum effect; "
                                "use --threshold for the others")
    return common


def _environment_diff(ref: pd.DataFrame, new: pd.DataFrame) -> list[tuple[str, str, str]]:
    diffs = []
    for col in sorted(rules.ENVIRONMENT_COLUMNS):
        if col in ref.columns and col in new.columns:
            a = sorted({canonical(v) for v in ref[col]} - {""})
            b = sorted({canonical(v) for v in new[col]} - {""})
            if a != b:
                diffs.append((col, ", ".join(a) or "∅", ", ".join(b) or "∅"))
    return diffs


# Columns of outliers.csv; status/error columns are empty for metric findings and vice versa, the test columns
# are filled for metrics judged from step samples only.
OUTLIER_COLUMNS = (
    "kind regression metric family direction threshold_pct noise_pct reference new delta delta_pct "
    "n_reference n_new status_reference status_new error detail method min_effect_pct p_value ci_low ci_high "
    "interval_pct why"
).split()
# Metric verdicts that become findings (outliers.csv, the summary's tables).
FLAGGED = ("regression", "unstable", "improvement")
KIND_ORDER = ("regression", "failed", "missing", "unstable", "improvement", "fixed", "new")


def _status_finding(ref: pd.Series, new: pd.Series) -> dict | None:
    """failed (a regression unless the reference failed the same way) or fixed, for a matched pair."""
    if new["_status"] != OK:
        # A reference that recorded the same failure (e.g. an OOM probe) makes it the expected outcome.
        expected = new["_status"] == ref["_status"] and ref["_n_ok"] == 0
        return {"kind": "failed", "regression": not expected, "error": new["_error"],
                "detail": "same status as reference" if expected else ""}  # fmt: skip
    if ref["_status"] != OK and ref["_n_ok"] == 0:
        return {"kind": "fixed", "regression": False}
    return None


def _metric_row(metric: str, ref: pd.Series, new: pd.Series, rule: rules.MetricRule, sides) -> dict:
    spreads = (ref[f"{metric}__spread"], new[f"{metric}__spread"])
    if sampled.is_sampled(metric):
        key = ref.name
        ref_side = sides[0].get(key, ref["_ids"], ref["_median_step"])
        new_side = sides[1].get(key, new["_ids"], new["_median_step"])
        verdict = sampled.judge_sampled(metric, ref[metric], new[metric], ref_side, new_side, spreads, rule)
    else:
        verdict = {**judge(ref[metric], new[metric], *spreads, rule), "method": "threshold", "detail": ""}
    return {
        "metric": metric, "family": rule.family, "direction": rule.direction,
        "threshold_pct": rule.threshold_pct, "reference": ref[metric], "new": new[metric],
        "reference_spread": spreads[0], "new_spread": spreads[1], **verdict,
        "n_reference": int(ref["_n_ok"]), "n_new": int(new["_n_ok"]),
    }  # fmt: skip


def _why(changed: list[dict], ref: pd.Series, new: pd.Series) -> str:
    """The arguments and environment values (versions, GPU, driver, git sha) of this pair that differ."""
    parts = [f"{c['argument']} {c['reference'] or '∅'} → {c['new'] or '∅'}" for c in changed]
    for column in sorted(c.removesuffix("__env") for c in ref.index if c.endswith("__env")):
        if f"{column}__env" in new.index and ref[f"{column}__env"] != new[f"{column}__env"]:
            parts.append(f"{column} {ref[f'{column}__env']} → {new[f'{column}__env']}")
    moved = steady_environment.explain(ref["_environment"], new["_environment"])
    # Nothing moved, yet the new run's own environment may be why it is slow or unstable.
    parts += moved or [f"new run: {problem}" for problem in steady_environment.problems(new["_environment"])]
    return "; ".join(dict.fromkeys(parts)) or "no argument or environment difference"


def _sample_notes(metric_cols: list[str], comparison: list[dict], sources: tuple[str, str] | None) -> list[str]:
    """How the steady time and throughput metrics were judged: the method, or why the threshold rule was used."""
    if not any(sampled.is_sampled(m) for m in metric_cols):
        return []
    notes = [f"step samples: reference {sources[0]}; results {sources[1]}"] if sources else []
    rows = [r for r in comparison if sampled.is_sampled(r["metric"]) and r.get("method")]
    tested = sum(r["method"] != "threshold" for r in rows)
    notes.append(f"{tested} of {len(rows)} steady time/throughput row(s) judged by significance and effect size "
                 "(block bootstrap of step times, 99 % interval, minimum effect; docs/compare.md)")
    reasons = sorted({r["detail"].removeprefix("threshold rule: ") for r in rows if r["method"] == "threshold"})
    if reasons:
        notes.append(f"{len(rows) - tested} judged by the threshold rule instead: " + "; ".join(reasons[:5]) +
                     (" ..." if len(reasons) > 5 else ""))
    return notes


class _Judge:
    """Every finding of one comparison, experiment key by experiment key: missing, new, failed, the changed
    arguments, and each metric's verdict."""

    def __init__(self, keys, labels, metric_cols, arg_cols, allow_missing, overrides, sides):
        self.keys, self.labels, self.metric_cols, self.arg_cols = keys, labels, metric_cols, arg_cols
        self.allow_missing, self.overrides, self.sides = allow_missing, overrides, sides
        self.findings: list[dict] = []
        self.comparison: list[dict] = []
        self.changed: list[dict] = []

    def key(self, key, identity: dict, r: pd.Series | None, n: pd.Series | None) -> None:
        ident = {"label": self.labels[key], **identity}
        if n is None:
            self.findings.append({**ident, "kind": "missing", "regression": not self.allow_missing,
                                  "status_reference": r["_status"]})
            return
        if r is None:  # no reference: only a failure counts
            failed = n["_status"] not in (OK, SKIPPED)
            self.findings.append({**ident, "kind": "failed" if failed else "new", "regression": failed,
                                  "status_new": n["_status"], "error": n["_error"]})
            return
        status = _status_finding(r, n)
        if status:
            self.findings.append({**ident, "status_reference": r["_status"], "status_new": n["_status"], **status})
        pair = [{"label": self.labels[key], "argument": a, "reference": canonical(r[f"{a}__arg"]),
                 "new": canonical(n[f"{a}__arg"])}
                for a in self.arg_cols if canonical(r[f"{a}__arg"]) != canonical(n[f"{a}__arg"])]
        self.changed += pair
        for m in self.metric_cols:
            rule = rules.rule_for(m, *self.overrides)
            row = {**ident, **_metric_row(m, r, n, rule, self.sides)}
            self.comparison.append(row)
            if row["verdict"] in FLAGGED:
                self.findings.append({**row, "kind": row["verdict"], "regression": row["verdict"] == "regression",
                                      "why": _why(pair, r, n)})


def compare_frames(
    reference: pd.DataFrame,
    results: pd.DataFrame,
    *,
    keys: list[str] | None = None,
    thresholds: dict[str, float] | None = None,
    directions: dict[str, str] | None = None,
    metrics: list[str] | None = None,
    allow_missing: bool = False,
    min_effects: dict[str, float] | None = None,
    reference_samples: Runs | None = None,
    results_samples: Runs | None = None,
    sample_sources: tuple[str, str] | None = None,
) -> CompareResult:
    """Join results to reference on ``keys`` and judge every common metric; pure, writes nothing.

    ``*_samples`` (experiment_id -> runs of steady step seconds) let steady time and throughput metrics be judged
    by significance and effect size; without them those metrics fall back to the threshold rule.
    """
    thresholds, directions, min_effects, notes = dict(thresholds or {}), dict(directions or {}), \
        dict(min_effects or {}), []
    keys = _resolve_keys(reference, results, keys, notes)
    metric_cols = _select_metrics(reference, results, metrics, thresholds, directions, min_effects, notes)
    results_ok = results["status"].map(canonical).str.lower().eq(OK).any() if "status" in results else True
    if not metric_cols and results_ok:
        # Nothing could be judged: "0 regressions" would be a pass that checked nothing.
        raise CompareInputError(
            f"reference {reference.attrs.get('path', '?')} and results {results.attrs.get('path', '?')} share no "
            "metric column, so nothing can be compared; pass a reference made by this benchmark (same columns)"
        )
    ref = numeric_metrics(reference, metric_cols, "reference")
    new = numeric_metrics(results, metric_cols, "results")
    arg_cols = [c for c in ref.columns if c in new.columns and c not in keys and rules.is_argument_column(c)]
    g_ref, g_new = _group(ref, keys, metric_cols, arg_cols), _group(new, keys, metric_cols, arg_cols)
    if "status" not in reference.columns or "status" not in results.columns:
        notes.append("a CSV has no `status` column: its rows are taken as ok")

    union = pd.concat([g_ref[keys], g_new[keys].loc[~g_new.index.isin(g_ref.index)]])
    judge = _Judge(keys, experiment_labels(union, keys), metric_cols, arg_cols, allow_missing,
                   (thresholds, directions, min_effects),
                   (sampled.Sides(reference_samples, "reference"), sampled.Sides(results_samples, "results")))
    for key in union.index:
        judge.key(key, union.loc[key, keys].to_dict(), g_ref.loc[key] if key in g_ref.index else None,
                  g_new.loc[key] if key in g_new.index else None)
    notes += _sample_notes(metric_cols, judge.comparison, sample_sources)
    return _result(judge, keys, notes, _environment_diff(reference, results))


def _result(judge: _Judge, keys: list[str], notes: list[str], environment) -> CompareResult:
    """The comparison's findings, worst first (the top of outliers.csv and of every table is what broke the
    build), with its Markdown."""
    outliers = pd.DataFrame(judge.findings).reindex(columns=["label", *keys, *OUTLIER_COLUMNS])
    outliers = outliers.sort_values("kind", key=lambda k: k.map(KIND_ORDER.index), kind="stable",
                                    ignore_index=True)
    outliers["regression"] = outliers["regression"].astype(bool)
    result = CompareResult(
        exit_code=1 if outliers["regression"].any() else 0, markdown="", comparison=pd.DataFrame(judge.comparison),
        outliers=outliers,
        changed_arguments=pd.DataFrame(judge.changed, columns=["label", "argument", "reference", "new"]),
        keys=keys, notes=notes, environment=environment)
    result.markdown = render_markdown(result)
    return result


# ----------------------------------------------------------------------------------------------- outputs
def write_outputs(result: CompareResult, out_dir: Path, charts: bool = True) -> list[Path]:
    """outliers.csv, comparison.csv, summary.md and (optionally) the PNG charts, all written atomically."""
    files = []
    for name, frame in (("outliers.csv", result.outliers), ("comparison.csv", result.comparison)):
        write_atomic(out_dir / name, frame.to_csv(index=False))
        files.append(out_dir / name)
    if charts and not result.comparison.empty:
        from tunebench.results.charts import (
            figures as ch,  # matplotlib is imported only when charts are wanted
        )

        for name, png in ch.comparison_charts(result.comparison).items():
            write_atomic(out_dir / name, png)
            files.append(out_dir / name)

    result.files = files + [out_dir / "summary.md"]
    result.markdown = render_markdown(result)
    write_atomic(out_dir / "summary.md", result.markdown)
    return result.files


def compare_paths(
    reference: str | os.PathLike,
    results: str | os.PathLike,
    out_dir: str | os.PathLike | None = None,
    *,
    keys: list[str] | None = None,
    thresholds: dict[str, float] | list[str] | None = None,
    directions: dict[str, str] | list[str] | None = None,
    metrics: list[str] | None = None,
    allow_missing: bool = False,
    charts: bool = True,
    min_effects: dict[str, float] | list[str] | None = None,
) -> CompareResult:
    """Load both CSVs and their step samples, compare, write outputs to ``out_dir`` (default
    ``<results dir>/compare``). The reference's samples are its sidecar; the results' are its experiment folders
    (or its sidecar, for a CSV).

    Raises CompareInputError (exit code 2 in ``main``) on a bad file or option.
    """
    try:
        thresholds = thresholds if isinstance(thresholds, dict) else rules.parse_thresholds(thresholds)
        directions = directions if isinstance(directions, dict) else rules.parse_directions(directions)
        min_effects = min_effects if isinstance(min_effects, dict) else rules.parse_min_effects(min_effects)
    except ValueError as exc:
        raise CompareInputError(str(exc)) from None
    results_csv = resolve_results_csv(results)
    ref_df = load_csv(resolve_results_csv(reference, "reference"), "reference")
    new_df = load_csv(results_csv, "results")
    (ref_runs, ref_where), (new_runs, new_where) = load_samples(reference), load_samples(results)
    result = compare_frames(ref_df, new_df, keys=keys, thresholds=thresholds, directions=directions, metrics=metrics,
                            allow_missing=allow_missing, min_effects=min_effects, reference_samples=ref_runs,
                            results_samples=new_runs, sample_sources=(ref_where, new_where))
    result.notes[0:0] = [f"reference: `{reference}` ({len(ref_df)} rows); results: `{results_csv}` ({len(new_df)} "
                         "rows)", *ref_df.attrs.get("notes", []), *new_df.attrs.get("notes", [])]
    out = Path(out_dir) if out_dir is not None else results_csv.parent / "compare"
    write_outputs(result, out, charts=charts)
    return result
