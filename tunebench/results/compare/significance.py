"""Is a step-time change real? Circular block bootstrap of per-run quantiles, Politis–White block length, Welch t.

Step times are autocorrelated (thermal and clock drift, allocator and data-loader phases), so resampling single
steps (an iid bootstrap) underestimates the noise and calls noise significant. Here each run is resampled in
circular blocks whose length follows Politis & White (2004, with Patton et al. 2009's correction for the
circular bootstrap) doubled: proportional to n^(1/3), the constant estimated from the run's own autocorrelation,
never shorter than round(n^(1/3)) nor longer than min(3·sqrt(n), n/3). With 3 or more runs on a side the runs are
resampled too (two-stage bootstrap), so run-to-run variation counts as noise.

The bootstrap gives the variance of log(statistic) on each side; the test of log(new/ref) then uses Student's t
with Welch's degrees of freedom counted in independent units (blocks, or runs when runs are resampled). Percentile
intervals of the same bootstrap were too narrow when a run holds few blocks' worth of information (13 of 200
null AR(1) phi = 0.9 trials of 200 steps a side significant at 1 % while developing this); the t quantile and
the units/(units − 1) factor are the small-sample correction. Measured calibration: docs/compare.md. The t
distribution is scipy's (scipy.stats).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

logger = logging.getLogger(__name__)

ALPHA = 0.01  # two-sided: significant when the 99 % interval of the ratio excludes 1
SIDE_CONFIDENCE = 0.95  # each side's own interval, reported and used for `unstable`
REPLICATES = 1000  # used for a variance only (not tail percentiles): its own error is ~4.5 %
SEED = 20240611  # fixed: the same inputs always give the same verdict
MIN_STEPS = 5  # a run with fewer steady steps has no usable spread
MIN_RUNS_TO_RESAMPLE = 3  # below this the runs themselves are too few to resample
QUANTILES = (0.1, 0.5, 0.9)  # steady_step_time_p10, _median, _p90
# Politis–White's length minimises the mean squared error of the variance estimate, which leaves that estimate
# biased low (by ~1/L) when steps are strongly autocorrelated; twice the length halves the bias, and the t
# quantile on the fewer blocks pays for the noisier variance. Measured on AR(1) phi = 0.9, 300 steps a side, no
# shift, 200 trials: 11 significant at the 1 % level with 1×, 4 with 2×, while every 10 % shift is still found.
LENGTH_FACTOR = 2.0
_CHUNK_ELEMENTS = 4_000_000  # bootstrap draws per chunk: bounds memory on runs of many thousand steps


# ----------------------------------------------------------------------------------- Student's t
def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with `df` (real, > 0) degrees of freedom (scipy.stats, imported on first use)."""
    from scipy.stats import t as student

    return float(student.sf(t, df))


def t_quantile(upper_tail: float, df: float) -> float:
    """The t with P(T > t) = upper_tail (0 < upper_tail < 0.5)."""
    from scipy.stats import t as student

    return float(student.isf(upper_tail, df))


# ----------------------------------------------------------------------------------- bootstrap
def block_length(x: np.ndarray) -> int:
    """Politis–White automatic block length for the circular block bootstrap, bounded as the module says."""
    n = len(x)
    floor = max(1, round(n ** (1.0 / 3.0)))
    cap = max(1, int(min(3.0 * math.sqrt(n), n / 3.0)))
    centred = np.asarray(x, dtype=float) - float(np.mean(x))
    variance = float(centred @ centred) / n if n else 0.0
    if n < 8 or np.ptp(x) == 0:
        return min(floor, cap)
    # The flat-top lag window's bandwidth: twice the first lag after which `k_n` autocorrelations in a row are
    # insignificant (Politis 2003's rule, c = 2), searched up to sqrt(n) + k_n lags.
    k_n = max(5, math.ceil(math.sqrt(math.log10(n))))
    max_lag = min(n - 1, math.ceil(math.sqrt(n)) + k_n)
    autocov = np.array([float(centred[: n - k] @ centred[k:]) / n for k in range(max_lag + 1)])
    rho = np.abs(autocov / variance)
    bound = 2.0 * math.sqrt(math.log10(n) / n)
    m_hat = next((m for m in range(max_lag - k_n + 1) if np.all(rho[m + 1: m + k_n + 1] < bound)), max_lag)
    bandwidth = min(2 * max(m_hat, 1), max_lag)
    lags = np.arange(1, bandwidth + 1)
    window = np.where(lags / bandwidth <= 0.5, 1.0, 2.0 * (1.0 - lags / bandwidth))
    g = 2.0 * float(np.sum(window * lags * autocov[1: bandwidth + 1]))
    spectrum0 = variance + 2.0 * float(np.sum(window * autocov[1: bandwidth + 1]))
    if spectrum0 <= 0.0:
        return cap  # a negative long-run variance estimate: the series is too short to say; be cautious
    length = (2.0 * g * g / ((4.0 / 3.0) * spectrum0 * spectrum0)) ** (1.0 / 3.0) * n ** (1.0 / 3.0)
    return int(min(max(round(LENGTH_FACTOR * length), floor), cap))


def circular_replicates(x: np.ndarray, block: int, count: int, rng: np.random.Generator,
                        quantiles=QUANTILES) -> np.ndarray:
    """(len(quantiles), count) quantiles of `count` circular-block resamples of x (each of length len(x))."""
    n = len(x)
    blocks = -(-n // block)
    out = np.empty((len(quantiles), count))
    chunk = max(1, _CHUNK_ELEMENTS // (blocks * block))
    # Every block of the circle, as a view: a resample is then one gather of whole blocks, with no modulo.
    windows = np.lib.stride_tricks.sliding_window_view(np.concatenate([x, x[: block - 1]]), block)
    for start in range(0, count, chunk):
        size = min(chunk, count - start)
        starts = rng.integers(0, n, size=(size, blocks))
        out[:, start: start + size] = row_quantiles(windows[starts].reshape(size, blocks * block)[:, :n], quantiles)
    return out


def row_quantiles(values: np.ndarray, quantiles) -> np.ndarray:
    """np.quantile(values, quantiles, axis=1) (its default 'linear' method) from one partial sort: the bootstrap
    spends most of its time here, and one np.partition on the needed ranks is 2-3 times faster."""
    n = values.shape[1]
    positions = [(n - 1) * q for q in quantiles]
    ranks = sorted({r for h in positions for r in (math.floor(h), math.ceil(h))})
    ordered = np.partition(values, ranks, axis=1)
    out = np.empty((len(quantiles), values.shape[0]))
    for i, h in enumerate(positions):
        low, high = ordered[:, math.floor(h)], ordered[:, math.ceil(h)]
        out[i] = low + (h - math.floor(h)) * (high - low)
    return out


@dataclass(frozen=True)
class Side:
    """One side's step-time statistics: a value and the bootstrap variance of its log, per quantile."""

    values: tuple[float, ...]  # per quantile: the median over runs of each run's quantile (what the CSV holds)
    log_variances: tuple[float, ...]  # per quantile: bootstrap variance of log(value), × units/(units − 1)
    units: int  # independent units behind that variance: blocks, or runs when runs are resampled
    runs: int
    steps: int
    blocks: tuple[int, ...]  # block length of each run
    resampled_runs: bool

    def ci_pct(self, q: int, confidence: float = SIDE_CONFIDENCE) -> float:
        """Half-width of this side's own interval for quantile index q, in % of its value."""
        spread = math.sqrt(self.log_variances[q])
        return 100.0 * math.expm1(t_quantile((1.0 - confidence) / 2.0, max(self.units - 1, 1)) * spread)


def side(runs: list[np.ndarray], *, replicates: int = REPLICATES, seed: int = SEED, block: int | None = None,
         quantiles=QUANTILES) -> Side:
    """Bootstrap one side. `block` forces a block length (1 = the naive iid bootstrap, for comparison only)."""
    runs = [np.asarray(r, dtype=float) for r in runs]
    if not runs or any(len(r) < MIN_STEPS for r in runs):
        raise ValueError(f"every run needs at least {MIN_STEPS} steady steps")
    rng = np.random.default_rng(seed)
    blocks = tuple(block or block_length(r) for r in runs)
    k = len(runs)
    values = tuple(float(v) for v in np.median([np.quantile(r, quantiles) for r in runs], axis=0))
    if k >= MIN_RUNS_TO_RESAMPLE:
        # Two-stage: draw k runs with replacement, then block-resample each draw independently (k·B draws a run).
        within = np.stack(
            [circular_replicates(r, b, k * replicates, rng, quantiles) for r, b in zip(runs, blocks, strict=True)]
        )
        chosen = rng.integers(0, k, size=(replicates, k))
        column = np.arange(k)[None, :] * replicates + np.arange(replicates)[:, None]
        stats = np.median(within[chosen, :, column], axis=1).T  # (quantiles, replicates)
        units = k
    else:
        within = np.stack(
            [circular_replicates(r, b, replicates, rng, quantiles) for r, b in zip(runs, blocks, strict=True)]
        )
        stats = np.median(within, axis=0)
        units = sum(-(-len(r) // b) for r, b in zip(runs, blocks, strict=True))
    correction = units / (units - 1) if units > 1 else math.inf
    log_variances = tuple(float(np.var(np.log(s), ddof=1)) * correction for s in stats)
    return Side(values, log_variances, units, k, sum(len(r) for r in runs), blocks, k >= MIN_RUNS_TO_RESAMPLE)


@dataclass(frozen=True)
class Change:
    """The test of one ratio new/ref: its interval, p-value and degrees of freedom."""

    ratio: float
    ci_low: float
    ci_high: float
    p_value: float
    df: float
    half_width_pct: float  # of the (1 − alpha) interval, in % of the ratio: 100·(exp(t·se) − 1)

    @property
    def significant(self) -> bool:
        return self.ci_low > 1.0 or self.ci_high < 1.0


def ratio_change(ratio: float, ref: Side, new: Side, q: int, alpha: float = ALPHA) -> Change:
    """Welch t test of log(ratio) = 0, the variance of each side from its bootstrap (quantile index q).

    `ratio` is new/ref of the metric itself (for throughput, the inverse of the step-time ratio times any change
    of work per step): its noise is the step-time noise, since log(work/time) moves only with log(time).
    """
    log_ratio = math.log(ratio)
    v_ref, v_new = ref.log_variances[q], new.log_variances[q]
    variance = v_ref + v_new
    if not math.isfinite(variance):
        return Change(ratio, 0.0, math.inf, 1.0, 0.0, math.inf)
    if variance == 0.0:  # identical steps on both sides: any difference is exact
        p = 1.0 if log_ratio == 0.0 else 0.0
        return Change(ratio, ratio, ratio, p, math.inf, 0.0)
    terms = [(v, u) for v, u in ((v_ref, ref.units), (v_new, new.units)) if v > 0.0]
    df = variance * variance / sum(v * v / (u - 1) for v, u in terms)
    se = math.sqrt(variance)
    p = min(1.0, 2.0 * t_sf(abs(log_ratio) / se, df))
    half = t_quantile(alpha / 2.0, df) * se
    return Change(ratio, ratio * math.exp(-half), ratio * math.exp(half), p, df, 100.0 * math.expm1(half))


def compare_runs(ref_runs: list, new_runs: list, *, block: int | None = None, alpha: float = ALPHA,
                 seed: int = SEED) -> tuple[Change, Side, Side]:
    """Median step time of new vs ref from raw runs (each a list of steady step seconds), and both sides."""
    ref, new = (side(runs, block=block, seed=seed) for runs in (ref_runs, new_runs))
    q = QUANTILES.index(0.5)
    return ratio_change(new.values[q] / ref.values[q], ref, new, q, alpha), ref, new
