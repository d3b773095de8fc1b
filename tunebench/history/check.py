"""`history check`: for each experiment, its runs' regimes, whether the newest run opened a worse one, and why.

A series is one experiment (compare's join keys but the GPU, so that a new GPU is a cause, not a new series) over
the store's runs in start order. Its regimes come from tunebench.history.changepoints; the newest run alone opens
one too when it differs from the rest of its regime (a change seen in one run cannot be told from an outlier by
the change-point search, but the step times can tell it), and neighbouring regimes that compare cannot tell apart
are one. The move between the last two regimes is judged with compare's statistics on the regimes' step times
(tunebench.results.compare.steady: block bootstrap, runs resampled, 99 % interval, minimum effect) and named
with what changed between them: arguments, versions, GPU, driver, host and the steady window's environment
(tunebench.telemetry.environment_summary).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tunebench.history import changepoints
from tunebench.results.compare import rules
from tunebench.results.compare import significance as stats
from tunebench.results.compare import steady as sampled
from tunebench.telemetry import environment_summary as steady_environment

logger = logging.getLogger(__name__)

KEYS = tuple(k for k in rules.DEFAULT_KEYS if k != "gpu_name")
DEFAULT_METRIC = "steady_step_time_median"
# The newest run is judged against at least two before it (one run alone cannot be told from an outlier); a change
# between two older regimes needs changepoints.MIN_RUNS runs on each side.
MIN_RUNS_TO_JUDGE = 3
# The store's own columns beside each row: where and when a run was stored, never a cause.
STORE_COLUMNS = frozenset({"run_id", "run_label", "run_number", "run_started", "source", "started_unix"})


@dataclass
class Finding:
    """One experiment's series: its regimes and the judgement of the newest one."""

    label: str
    runs: list[int]  # run numbers (1-based, the store's start order) of this series
    values: list[float]
    regimes: list[tuple[int, int]]  # index ranges into runs
    # regression, improvement, unstable, not_significant, below_min_effect, stable, too_few_runs
    verdict: str = "stable"
    judged: dict = field(default_factory=dict)
    what_changed: str = ""
    outliers: list[str] = field(default_factory=list)

    @property
    def regression(self) -> bool:
        return self.verdict == "regression"


def steady_runs(steps: pd.DataFrame) -> dict[tuple, np.ndarray]:
    """(experiment_id, repeat, started_unix) -> the steady step seconds of that execution, in step order."""
    steady = steps[steps["steady"].fillna(False).astype(bool)].sort_values("step")
    return {(e, int(r), float(s)): grp["seconds"].to_numpy(dtype=float)
            for (e, r, s), grp in steady.groupby(["experiment_id", "repeat", "started_unix"], sort=False)}


def _side(rows: pd.DataFrame, samples: dict) -> stats.Side | str:
    runs = [samples.get((r.experiment_id, int(r.repeat), float(r.started_unix))) for r in rows.itertuples()]
    if any(run is None or len(run) < stats.MIN_STEPS for run in runs):
        return f"a run without {stats.MIN_STEPS} steady step times"
    return stats.side(runs)


def judge(before: pd.DataFrame, after: pd.DataFrame, metric: str, samples: dict, rule: rules.MetricRule) -> dict:
    """compare's verdict of the `after` rows against the `before` rows (each side: one value per row)."""
    ref, new = before[metric].astype(float), after[metric].astype(float)
    spreads = (float(ref.max() - ref.min()), float(new.max() - new.min()))
    if sampled.is_sampled(metric):
        return sampled.judge_sampled(metric, float(ref.median()), float(new.median()), _side(before, samples),
                                     _side(after, samples), spreads, rule)
    return {**rules.judge(float(ref.median()), float(new.median()), *spreads, rule), "method": "threshold"}


def _sets(rows: pd.DataFrame, column: str) -> str:
    return ", ".join(sorted({rules.canonical(v) for v in rows[column]} - {""})) or "∅"


def what_changed(before: pd.DataFrame, after: pd.DataFrame) -> str:
    """Arguments, versions, GPU, driver, host and the steady window's environment that differ between two groups."""
    parts = []
    for column in sorted(c for c in before.columns if c in after.columns and c not in KEYS and c not in STORE_COLUMNS):
        if rules.is_argument_column(column) or column in rules.ENVIRONMENT_COLUMNS:
            a, b = _sets(before, column), _sets(after, column)
            if a != b:
                parts.append(f"{column} {a} → {b}")
    views = [steady_environment.group_view(g.to_dict("records")) for g in (before, after)]
    moved = steady_environment.explain(*views)
    parts += moved or [f"new regime: {p}" for p in steady_environment.problems(views[1])]
    return "; ".join(parts) or "no argument or environment difference"


def _outliers(values: list[float], runs: list[int], regime: tuple[int, int], limit_pct: float) -> list[str]:
    """Runs of a regime further than the minimum effect from its median: one-off runs, not a regime."""
    middle = float(np.median(values[regime[0]:regime[1]]))
    return [f"run {runs[i]} ({100 * (values[i] / middle - 1):+.1f} %)" for i in range(*regime)
            if abs(values[i] / middle - 1) * 100 > limit_pct]


# Verdicts of a move compare does not report: a boundary between two regimes so judged is no boundary.
NO_CHANGE = frozenset({"not_significant", "below_min_effect"})
# Compare cannot resolve the minimum effect across the boundary: between two of three or more regimes it is a noisy
# cut like those above (CI: +13 % from run 12, then runs 12-14 | 15-20 cut at an unresolvable +5.3 %, which left
# the check "unstable" and hid the regression); a sole boundary keeps its "unstable" verdict, said to the user.
CANNOT_TELL = "unstable"


def _merge_indistinct(finding: Finding, per_run: list[pd.DataFrame], metric: str, samples: dict, rule) -> None:
    """Neighbouring regimes that compare cannot tell apart become one, the smallest move first.

    The change-point search cuts at moves of run-to-run noise's size; left alone, a noisy split after a real
    change (a +6 % regime cut again at -1.7 %) hides the change: the newest boundary is then the noisy one.
    """
    while len(finding.regimes) >= 2:
        pairs = list(zip(finding.regimes, finding.regimes[1:], strict=False))
        merge = []
        for i, ((a0, a1), (b0, b1)) in enumerate(pairs):
            verdict = judge(pd.concat(per_run[a0:a1]), pd.concat(per_run[b0:b1]), metric, samples, rule)["verdict"]
            if verdict in NO_CHANGE or (verdict == CANNOT_TELL and len(finding.regimes) >= 3):
                move = abs(math.log(np.median(finding.values[b0:b1]) / np.median(finding.values[a0:a1])))
                merge.append((move, i))
        if not merge:
            return
        i = min(merge)[1]
        finding.regimes[i:i + 2] = [(finding.regimes[i][0], finding.regimes[i + 1][1])]


def _split_newest(finding: Finding, per_run: list[pd.DataFrame], metric: str, samples: dict, rule) -> None:
    """The newest run opens a regime of its own when compare tells it from the rest of its regime."""
    first, end = finding.regimes[-1]
    if end - first < 2:
        return
    verdict = judge(pd.concat(per_run[first:end - 1]), per_run[end - 1], metric, samples, rule)["verdict"]
    if verdict in ("regression", "improvement"):
        finding.regimes[-1:] = [(first, end - 1), (end - 1, end)]


def check_series(label: str, rows: pd.DataFrame, metric: str, samples: dict, rule: rules.MetricRule) -> Finding:
    """One experiment's regimes and the verdict of its newest regime against the one before."""
    per_run = [grp for _, grp in rows.groupby("run_number", sort=True)]
    values = [float(g[metric].astype(float).median()) for g in per_run]
    runs = [int(g["run_number"].iloc[0]) for g in per_run]
    finding = Finding(label, runs, values, changepoints.regimes(len(values), changepoints.change_points(values)))
    if len(values) < MIN_RUNS_TO_JUDGE:
        finding.verdict = "too_few_runs"
        return finding
    _merge_indistinct(finding, per_run, metric, samples, rule)
    _split_newest(finding, per_run, metric, samples, rule)
    limit = rule.min_effect_pct if rule.min_effect_pct is not None else rule.threshold_pct
    finding.outliers = _outliers(values, runs, finding.regimes[-1], limit)
    if len(finding.regimes) < 2:
        return finding
    (a0, a1), (b0, b1) = finding.regimes[-2:]
    before, after = pd.concat(per_run[a0:a1]), pd.concat(per_run[b0:b1])
    finding.judged = judge(before, after, metric, samples, rule)
    finding.verdict = finding.judged["verdict"]
    finding.what_changed = what_changed(before, after)
    return finding


def check(rows: pd.DataFrame, steps: pd.DataFrame, metric: str = DEFAULT_METRIC,
          min_effects: dict[str, float] | None = None) -> list[Finding]:
    """Every experiment's finding; `rows` are the store's ok rows with a `run_number` and a value of `metric`."""
    rule = rules.rule_for(metric, min_effects=min_effects)
    samples = steady_runs(steps)
    rows = rows[pd.to_numeric(rows[metric], errors="coerce").notna()]
    labels = rules.experiment_labels(rows.drop_duplicates(list(KEYS)).reset_index(drop=True), list(KEYS))
    label_of = {tuple(rules.canonical(v) for v in r): labels[i]
                for i, r in enumerate(rows.drop_duplicates(list(KEYS))[list(KEYS)].itertuples(index=False))}
    findings = []
    for key, grp in rows.groupby([rows[k].map(rules.canonical) for k in KEYS], sort=True):
        findings.append(check_series(label_of[tuple(key)], grp, metric, samples, rule))
    return findings


def _span(runs: list[int], regime: tuple[int, int]) -> str:
    first, last = runs[regime[0]], runs[regime[1] - 1]
    return f"run {first}" if first == last else f"runs {first}-{last}"


def describe(finding: Finding) -> list[str]:
    """The finding in words: the verdict, the move with its interval, the runs on each side, what changed."""
    regimes = " | ".join(_span(finding.runs, r) for r in finding.regimes)
    head = f"{finding.verdict.upper().replace('_', ' ')}  {finding.label}: regimes {regimes}"
    if finding.verdict == "too_few_runs":
        return [f"{head}: {len(finding.runs)} run(s); a verdict needs {MIN_RUNS_TO_JUDGE} (the newest run against "
                f"at least {MIN_RUNS_TO_JUDGE - 1} before it), a change between older runs "
                f"{2 * changepoints.MIN_RUNS}"]
    lines = [head]
    if len(finding.regimes) >= 2:
        before, after = finding.regimes[-2:]
        ratio = np.median(finding.values[after[0]:after[1]]) / np.median(finding.values[before[0]:before[1]])
        judged = pd.Series(finding.judged)
        how = sampled.interval_text(judged) if sampled.is_tested(judged) else judged.get("method", "threshold rule")
        lines.append(f"  run {finding.runs[after[0]]} opened the newest regime: {100 * (ratio - 1):+.1f} % ({how}) "
                     f"from {_span(finding.runs, before)} to {_span(finding.runs, after)}")
        lines.append(f"  what changed: {finding.what_changed}")
    else:
        lines.append(
            f"  the newest run (run {finding.runs[-1]}) is in the regime of {_span(finding.runs, finding.regimes[-1])}"
        )
    if finding.outliers:
        lines.append(f"  one-off runs in that regime: {', '.join(finding.outliers)}")
    return lines
