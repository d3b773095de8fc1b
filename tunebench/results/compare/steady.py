"""Steady step-time and throughput metrics judged from step samples: significance, effect size and `unstable`.

A metric below is judged this way when both sides have step samples that match their CSV rows (same number of
runs as ok rows, and the runs' median step time equal to the CSV's `steady_step_time_median`); otherwise it falls
back to the threshold rule (tunebench.results.compare.rules.judge) and the row's detail says why. The statistics
are in tunebench.results.compare.significance. Verdicts, with the metric's minimum effect E (default 5 %):

* `regression` / `improvement`: the 99 % interval of new/ref excludes 1 (two-sided p < 0.01) AND the change is
  beyond E AND the row is precise enough to tell (below), or its whole interval lies beyond E anyway.
* `unstable`: the row cannot resolve a change of E: the 99 % interval's half-width, or either side's own 95 %
  interval half-width, is wider than E. Reported with the reason; never a regression.
* `not_significant` (interval includes 1) or `below_min_effect` (real but smaller than E).
"""

from __future__ import annotations

import logging
import math

from tunebench.results.compare import rules
from tunebench.results.compare import significance as stats
from tunebench.results.compare.samples import Runs, median_of_runs

logger = logging.getLogger(__name__)

# Metric -> the step-time quantile its noise comes from (throughput = work per step / median step time).
SAMPLED_QUANTILE = {
    "steady_step_time_p10": 0.1,
    "steady_step_time_median": 0.5,
    "steady_step_time_p90": 0.9,
    "steady_tokens_per_second": 0.5,
    "steady_nonpad_tokens_per_second": 0.5,
    "steady_nonpad_tokens_per_second_per_device": 0.5,
    "steady_mfu": 0.5,
    "steady_hfu": 0.5,
}
MEDIAN_COLUMN = "steady_step_time_median"
# The sidecar and the CSV hold the same floats (both written exactly), so only rounding may separate them.
MATCH_TOLERANCE = 1e-9
_EPS = 1e-9  # an effect or width of exactly the minimum effect is not beyond it, whatever the float rounding
BOOTSTRAP_COLUMNS = ("method", "min_effect_pct", "p_value", "ci_low", "ci_high", "interval_pct", "ref_ci_pct",
                     "new_ci_pct", "df", "runs_reference", "runs_new", "steps_reference", "steps_new",
                     "blocks_reference", "blocks_new", "detail")


def is_sampled(metric: str) -> bool:
    return metric in SAMPLED_QUANTILE


class Sides:
    """The bootstrap of each experiment's side, made once and shared by its metrics (the same seed every time,
    so a side's spread depends on its own step times only)."""

    def __init__(self, samples: Runs | None, role: str):
        self.samples, self.role = samples or {}, role
        self._made: dict[str, stats.Side | str] = {}

    def get(self, key: str, ids: tuple[str, ...], csv_median: float) -> stats.Side | str:
        """The side for one grouped experiment (its ok rows' experiment ids, repeats repeated), or the reason
        there is none."""
        if key not in self._made:
            self._made[key] = self._make(ids, csv_median)
        return self._made[key]

    def _make(self, ids: tuple[str, ...], csv_median: float) -> stats.Side | str:
        if not ids:
            return f"no experiment_id in the {self.role} CSV"
        distinct = list(dict.fromkeys(ids))
        absent = [i for i in distinct if i not in self.samples]
        if absent:
            return f"no step samples for the {self.role} ({', '.join(absent)})"
        runs = [run for i in distinct for run in self.samples[i]]
        if len(runs) != len(ids):
            return f"{len(runs)} run(s) of step samples for {len(ids)} ok {self.role} row(s)"
        if not math.isnan(csv_median):
            sampled = median_of_runs(runs)
            if abs(sampled - csv_median) > MATCH_TOLERANCE * abs(csv_median):
                return (f"the {self.role} step samples do not belong to its CSV rows (median {sampled:.6g} s, "
                        f"{MEDIAN_COLUMN} {csv_median:.6g} s)")
        if any(len(run) < stats.MIN_STEPS for run in runs):
            return f"a {self.role} run has fewer than {stats.MIN_STEPS} steady steps"
        return stats.side(runs)


def judge_sampled(metric: str, ref_value: float, new_value: float, ref: stats.Side | str, new: stats.Side | str,
                  spreads: tuple[float, float], rule: rules.MetricRule) -> dict:
    """Verdict and test columns of one sampled metric; the threshold rule, saying why, when samples are unusable."""
    base = rules.judge(ref_value, new_value, *spreads, rule)
    if base["verdict"] in ("ignored", "no_data"):
        return {**base, "method": "", "detail": ""}
    reason = next((side for side in (ref, new) if isinstance(side, str)), None)
    if reason is None and (ref_value <= 0 or new_value <= 0):
        reason = "a value is not positive (no ratio)"
    if reason is not None:
        return {**base, "method": "threshold", "detail": f"threshold rule: {reason}"}
    q = stats.QUANTILES.index(SAMPLED_QUANTILE[metric])
    change = stats.ratio_change(new_value / ref_value, ref, new, q)
    ref_ci, new_ci = ref.ci_pct(q), new.ci_pct(q)
    effect, least = 100.0 * (change.ratio - 1.0), rule.min_effect_pct
    width = max(change.half_width_pct, ref_ci, new_ci)
    beyond = (change.ci_low - 1.0 if change.ratio > 1.0 else 1.0 - change.ci_high) * 100.0 > least + _EPS
    if rule.direction == rules.TWO_SIDED:
        worse = True
    else:
        worse = change.ratio < 1.0 if rule.direction == rules.LOWER_IS_WORSE else change.ratio > 1.0
    detail = ""
    if change.significant and abs(effect) > least + _EPS and (width <= least + _EPS or beyond):
        verdict = "regression" if worse else "improvement"
        if width > least + _EPS:
            detail = f"noisy (±{width:.1f} %), but the whole 99 % interval is beyond the {least:g} % minimum effect"
    elif width > least + _EPS:
        verdict = "unstable"
        detail = (f"cannot resolve a {least:g} % change: 99 % interval of the ratio ±{change.half_width_pct:.1f} %, "
                  f"own 95 % intervals ±{ref_ci:.1f} % (reference) and ±{new_ci:.1f} % (new)")
    else:
        verdict = "below_min_effect" if change.significant else "not_significant"
    return {
        **base, "verdict": verdict,
        "method": "two-stage bootstrap" if ref.resampled_runs or new.resampled_runs else "block bootstrap",
        "min_effect_pct": least, "p_value": change.p_value, "ci_low": change.ci_low, "ci_high": change.ci_high,
        "interval_pct": change.half_width_pct, "ref_ci_pct": ref_ci, "new_ci_pct": new_ci, "df": change.df,
        "runs_reference": ref.runs, "runs_new": new.runs, "steps_reference": ref.steps, "steps_new": new.steps,
        "blocks_reference": " ".join(map(str, ref.blocks)), "blocks_new": " ".join(map(str, new.blocks)),
        "detail": detail,
    }  # fmt: skip


def is_tested(row) -> bool:
    """Whether a comparison/outlier row was judged from step samples (its test columns are filled)."""
    return getattr(row, "method", "") in ("block bootstrap", "two-stage bootstrap")


def interval_text(row, with_detail: bool = True) -> str:
    """'99 % CI +5.2…+8.9 %, p=0.0003 (block bootstrap)' for a tested row; the threshold rule (and why) otherwise."""
    detail = getattr(row, "detail", "")
    detail = detail if isinstance(detail, str) else ""
    if is_tested(row):
        low, high = 100.0 * (row.ci_low - 1.0), 100.0 * (row.ci_high - 1.0)
        p = "p<0.0001" if row.p_value < 1e-4 else f"p={row.p_value:.2g}"
        text = f"99 % CI {low:+.1f}…{high:+.1f} %, {p} ({row.method})"
        return f"{text}; {detail}" if with_detail and detail else text
    return detail if detail.startswith("threshold rule") else "threshold rule"


def band_text(row) -> str:
    """The noise a change was judged against: ± the 99 % interval's half-width, or the repeats' spread."""
    if is_tested(row):
        return f"±{row.interval_pct:.1f} %"
    return "" if row.noise_pct != row.noise_pct else f"{row.noise_pct:.1f} %"
