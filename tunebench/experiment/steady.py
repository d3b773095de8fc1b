"""Steady-state statistics of per-step times: warm-up exclusion, median and spread, the median's confidence."""

from __future__ import annotations

import functools
import logging
import math
import statistics
from dataclasses import dataclass, field
from fractions import Fraction

logger = logging.getLogger(__name__)

CONFIDENCE = 0.95


@dataclass(frozen=True)
class SteadyPolicy:
    """How the steady window is chosen and judged (every field is recorded with the results).

    `warmup_steps`: the first optimizer steps left out (allocator growth, cuBLAS/cuDNN heuristics, kernel
    caches, data-loader start). `min_steps` and `max_cv`: below/above these the figures carry a
    `measurement_warning`. `target_ci_pct`: in `auto` mode training stops once the median step time is known to
    ±this many percent at 95 % confidence (never before `min_steps` steady steps, never after `max_steps`).
    """

    warmup_steps: int = 5
    min_steps: int = 10
    max_cv: float = 0.05
    target_ci_pct: float = 1.0

    def __post_init__(self):
        if self.warmup_steps < 0 or self.min_steps < 1:
            raise ValueError(f"steady state: warmup_steps must be >= 0 and min_steps >= 1, got {self}")
        if self.max_cv <= 0 or self.target_ci_pct <= 0:
            raise ValueError(f"steady state: max_cv and target_ci_pct must be positive, got {self}")


# Below this many samples the binomial tail is summed exactly in integers; above it, in log space (see
# `_log_space_rank`). Both give the same ranks where they overlap (tested), and the exact sum costs ~1 ms here.
_EXACT_UP_TO = 2000


@functools.lru_cache(maxsize=4096)
def median_rank_interval(n: int, confidence: float = CONFIDENCE) -> tuple[int, int] | None:
    """1-based ranks (j, k) of the order statistics bounding the median with at least `confidence`.

    Distribution-free: the number of samples below the true median is Binomial(n, 1/2), so
    P(x_(j) <= median <= x_(k)) = P(j <= B < k) with k = n + 1 - j. `j` is the largest rank whose two tails
    together stay within 1 - confidence. None when n is too small for any such interval (n < 6 at 95 %).
    Valid for any n: exact integer arithmetic up to `_EXACT_UP_TO`, log-space sums beyond (2**-n underflows a
    float from n = 1075, and math.comb(n, i) / 2.0**n overflowed from n = 1024).
    """
    if n < 1:
        return None
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    alpha = (1.0 - confidence) / 2.0
    j = _exact_rank(n, alpha) if n <= _EXACT_UP_TO else _log_space_rank(n, alpha)
    if j < 1:
        return None
    return j, n + 1 - j


def _exact_rank(n: int, alpha: float) -> int:
    """Largest j with P(B < j) <= alpha, B ~ Binomial(n, 1/2), in exact rational arithmetic."""
    limit = Fraction(alpha) * (1 << n)  # P(B <= i) <= alpha  <=>  sum_{m <= i} C(n, m) <= alpha * 2**n
    coefficient, cumulative, j = 1, 0, 0
    for i in range(n + 1):
        cumulative += coefficient  # sum of C(n, m) for m <= i
        if cumulative > limit:
            break
        j = i + 1
        coefficient = coefficient * (n - i) // (i + 1)
    return j


def _log_binomial_cdf(n: int, k: int) -> float:
    """log P(B <= k) for B ~ Binomial(n, 1/2) and k < n/2, summed from k downwards in log space.

    The terms pmf(m-1)/pmf(m) = m/(n-m+1) shrink as m falls, so once a term t is reached with ratio r the rest
    of the tail is at most t·r/(1-r); the sum stops when that bound is below 1e-17 of the total. The absolute
    error of math.lgamma (a few ulp of lgamma(n+1) ~ n log n) bounds the relative error of the result: ~1e-8
    at n = 10**6, so only an alpha within that of a tail probability could be ranked one off.
    """
    log_pmf = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) - n * math.log(2.0)
    total, term, m = 1.0, 1.0, k
    while m > 0:
        ratio = m / (n - m + 1)
        term *= ratio
        total += term
        m -= 1
        if ratio < 1.0 and term * ratio / (1.0 - ratio) < 1e-17 * total:
            break
    return log_pmf + math.log(total)


def _log_space_rank(n: int, alpha: float) -> int:
    """Largest j with P(B < j) <= alpha, searched from the normal approximation's guess (a few steps away)."""
    log_alpha = math.log(alpha)
    z = statistics.NormalDist().inv_cdf(alpha)  # negative
    k = max(0, min(n // 2 - 1, int(n / 2.0 + z * math.sqrt(n) / 2.0)))
    if _log_binomial_cdf(n, k) <= log_alpha:
        while k + 1 < n // 2 and _log_binomial_cdf(n, k + 1) <= log_alpha:
            k += 1
        return k + 1  # P(B <= k) <= alpha: j = k + 1
    while k > 0 and _log_binomial_cdf(n, k - 1) > log_alpha:
        k -= 1
    return k  # P(B <= k - 1) <= alpha < P(B <= k)


def median_ci_pct(times: list[float], confidence: float = CONFIDENCE) -> float | None:
    """Half-width of the median's confidence interval as % of the median; None with too few samples."""
    ranks = median_rank_interval(len(times), confidence)
    if ranks is None:
        return None
    ordered = sorted(times)
    median = statistics.median(ordered)
    if median <= 0:
        return None
    low, high = ordered[ranks[0] - 1], ordered[ranks[1] - 1]
    return 100.0 * max(median - low, high - median) / median


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default method), q in [0, 100]."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass
class SteadySummary:
    """Statistics of the steady window; `steps` are the 1-based optimizer steps it holds."""

    steps: list[int]
    median: float | None = None
    p10: float | None = None
    p90: float | None = None
    mean: float | None = None
    cv: float | None = None  # sample standard deviation / mean
    robust_cv: float | None = None  # 1.4826 · median absolute deviation / median: the CV a normal series would have
    ci_pct: float | None = None  # 95 % half-width of the median, % of the median
    warnings: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.steps)


def steady_steps(num_steps: int, policy: SteadyPolicy, excluded: set[int] = frozenset()) -> list[int]:
    """Steps after warm-up that are not excluded (a scanned memory step, the step after a host sync)."""
    return [s for s in range(policy.warmup_steps + 1, num_steps + 1) if s not in excluded]


def summarize(step_times: list[float], policy: SteadyPolicy, excluded: set[int] = frozenset()) -> SteadySummary:
    """Steady-state statistics of `step_times` (index i holds optimizer step i + 1)."""
    steps = steady_steps(len(step_times), policy, excluded)
    summary = SteadySummary(steps=steps)
    if not steps:
        summary.warnings.append(
            f"no steady steps: {len(step_times)} step(s) run, warm-up excludes the first {policy.warmup_steps}"
        )
        return summary
    times = [step_times[s - 1] for s in steps]
    summary.median = statistics.median(times)
    summary.p10, summary.p90 = percentile(times, 10), percentile(times, 90)
    summary.mean = statistics.fmean(times)
    summary.cv = statistics.stdev(times) / summary.mean if len(times) > 1 and summary.mean > 0 else None
    summary.robust_cv = robust_cv(times)
    summary.ci_pct = median_ci_pct(times)
    if len(steps) < policy.min_steps:
        summary.warnings.append(f"only {len(steps)} steady step(s) (< {policy.min_steps}): raise max_steps")
    # The warning judges the spread of the bulk of the steps (MAD-based, robust to a few outliers): one 2x step
    # among 24 steady ones reads CV 21.7 % while the median is known to ±2.9 %. The CV stays in the CSV.
    if summary.robust_cv is not None and summary.robust_cv > policy.max_cv:
        summary.warnings.append(
            f"step time spread {100 * summary.robust_cv:.1f} % (robust CV, 1.4826·MAD/median) exceeds "
            f"{100 * policy.max_cv:.0f} %: the steady window is not steady"
        )
    return summary


def robust_cv(times: list[float]) -> float | None:
    """1.4826 × the median absolute deviation ÷ the median: for normally distributed times it estimates the CV,
    and a few outlying steps barely move it (breakdown point 50 %)."""
    if len(times) < 2:
        return None
    median = statistics.median(times)
    if median <= 0:
        return None
    return 1.4826 * statistics.median(abs(t - median) for t in times) / median


def median_is_known(times: list[float], policy: SteadyPolicy) -> bool:
    """`auto` mode's stopping rule: enough steady steps and the median's 95 % CI within ±target_ci_pct."""
    if len(times) < policy.min_steps:
        return False
    ci = median_ci_pct(times)
    return ci is not None and ci <= policy.target_ci_pct
