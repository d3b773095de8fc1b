"""tunebench/experiment/steady.py's ranks and percentiles from scipy and numpy give what its hand-written sums gave:
the exact integer reference (kept here) up to 2000 samples, and the log-space search's recorded answers beyond."""

from fractions import Fraction

import pytest

from tunebench.experiment.steady import median_rank_interval, percentile

CONFIDENCES = (0.95, 0.99, 0.9, 0.5)


def _exact_rank(n: int, alpha: float) -> int:
    """The replaced implementation up to 2000 samples: largest j with P(B < j) <= alpha, B ~ Binomial(n, 1/2), in
    exact rational arithmetic."""
    limit = Fraction(alpha) * (1 << n)
    coefficient, cumulative, j = 1, 0, 0
    for i in range(n + 1):
        cumulative += coefficient
        if cumulative > limit:
            break
        j = i + 1
        coefficient = coefficient * (n - i) // (i + 1)
    return j


@pytest.mark.parametrize("confidence", CONFIDENCES)
def test_the_ranks_up_to_2000_samples_are_the_exact_ones(confidence):
    for n in [*range(1, 700), *range(700, 2001, 7), 2000]:
        j = _exact_rank(n, (1.0 - confidence) / 2.0)
        assert median_rank_interval(n, confidence) == ((j, n + 1 - j) if j >= 1 else None), (n, confidence)


# What the replaced log-space search (lgamma, summed tail) answered, recorded before it was removed.
LARGE_N = [2001, 2002, 2500, 3001, 4096, 5000, 7777, 10_000, 12_345, 20_000, 50_000, 65_537, 100_000, 250_000,
           999_999, 1_000_000]
RECORDED = {
    0.95: [957, 957, 1201, 1447, 1985, 2431, 3802, 4902, 6064, 9861, 24781, 32518, 49690, 124510, 499020, 499020],
    0.99: [943, 943, 1186, 1430, 1966, 2409, 3775, 4871, 6029, 9818, 24712, 32439, 49593, 124356, 498712, 498712],
    0.9: [964, 964, 1209, 1455, 1995, 2442, 3816, 4918, 6081, 9884, 24816, 32558, 49740, 124589, 499177, 499178],
    0.5: [985, 986, 1233, 1482, 2026, 2476, 3859, 4966, 6135, 9952, 24925, 32682, 49893, 124831, 499662, 499663],
}


@pytest.mark.parametrize("confidence", CONFIDENCES)
def test_the_ranks_beyond_2000_samples_are_the_log_space_searchs(confidence):
    assert [median_rank_interval(n, confidence)[0] for n in LARGE_N] == RECORDED[confidence]


def _hand_percentile(values: list[float], q: float) -> float:
    """The replaced percentile: linear interpolation from the lower neighbour."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def test_percentiles_are_the_hand_written_ones_to_the_last_bits():
    """numpy takes the position as q/100·(n-1) and interpolates from the upper neighbour when the fraction is >= 1/2
    (its `_lerp`), so about one value in twelve differs from the old sum in its last bits (a few ulp)."""
    import math
    import random

    rng = random.Random(0)
    for _ in range(2000):
        values = [rng.uniform(0.01, 5.0) for _ in range(rng.randint(1, 60))]
        for q in (0, 10, 25, 50, 75, 90, 100, 33.3):
            old, new = _hand_percentile(values, q), percentile(values, q)
            assert math.isclose(new, old, rel_tol=1e-14), (values, q)
    assert percentile([1.0, 2.0, 3.0, 4.0], 10) == 1.3 and percentile([5.0], 90) == 5.0


def test_the_ranks_import_only_what_the_preload_server_has_not_scipy_stats():
    """scipy.stats cost every experiment 0.2-0.6 s of imports its fork of the preload server lacked; scipy.special,
    which the server has, answers the same ranks (the tests above)."""
    import subprocess
    import sys

    from tests.fixtures.harness import REPO

    script = ("import sys; from tunebench.experiment.steady import median_rank_interval; "
              "print(median_rank_interval(50), 'scipy.stats' in sys.modules, 'scipy.special' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.stdout.split("\n")[0] == "(18, 33) False True", proc.stdout + proc.stderr[-2000:]
