"""Steady-state statistics of per-step times: warm-up exclusion, median and spread, the median's confidence."""

from __future__ import annotations

import functools
import logging
import statistics
from dataclasses import dataclass, field

import numpy

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


@functools.lru_cache(maxsize=4096)
def median_rank_interval(n: int, confidence: float = CONFIDENCE) -> tuple[int, int] | None:
    """1-based ranks (j, k) of the order statistics bounding the median with at least `confidence`.

    Distribution-free: the number of samples below the true median is Binomial(n, 1/2), so
    P(x_(j) <= median <= x_(k)) = P(j <= B < k) with k = n + 1 - j. `j` is the largest rank whose two tails
    together stay within 1 - confidence. None when n is too small for any such interval (n < 6 at 95 %).
    Valid for any n (scipy's binomial CDF; tests/tunebench/experiment/test_steady_ranks.py holds the
    exact reference it matches).
    """
    if n < 1:
        return None
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    j = _rank(n, (1.0 - confidence) / 2.0)
    if j < 1:
        return None
    return j, n + 1 - j


def _rank(n: int, alpha: float) -> int:
    """Largest j with P(B < j) <= alpha, B ~ Binomial(n, 1/2). P(B < j) = P(B <= j - 1) rises with j, so j counts
    the k in [0, n) with P(B <= k) <= alpha (scipy.special's binomial CDF). scipy.special, not
    scipy.stats: the preload server has it imported, while scipy.stats cost every experiment 0.2-0.6 s."""
    from scipy.special import bdtr

    return int(numpy.count_nonzero(bdtr(numpy.arange(n), n, 0.5) <= alpha))


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
    if not values:
        raise ValueError("percentile of no values")
    return float(numpy.percentile(values, q))


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
