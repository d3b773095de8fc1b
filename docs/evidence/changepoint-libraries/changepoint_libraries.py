"""Measures change-point libraries on synthetic run series with known answers (docs/evidence/changepoint-libraries.md).

Each series is one experiment's steady step time over runs: a level, Gaussian run-to-run noise, and optionally a
step (the answer: the first run of the new level), isolated outliers and a slow drift. Flat series (no step) give
the false-alarm rate. Run it with each library installed in its own environment (they pin conflicting numpy
versions); it prints one JSON line of scores:

    python docs/evidence/changepoint-libraries/changepoint_libraries.py --library ruptures-pelt-l2 --series 400
    # the choice, as used:
    PYTHONPATH=. python docs/evidence/changepoint-libraries/changepoint_libraries.py --library tunebench --series 400
    # apache-otava installed:
    python docs/evidence/changepoint-libraries/changepoint_libraries.py --library otava --series 400
    # signal-processing-algorithms installed:
    python docs/evidence/changepoint-libraries/changepoint_libraries.py --library spa-edivisive --series 400

Needs numpy and the library only (not tunebench), so every environment can run it.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

SEED = 20261125


def generate(rng: np.random.Generator, with_step: bool) -> tuple[np.ndarray, int | None, dict]:
    """(series, the index of the first run after the step or None, the parameters drawn)."""
    n = int(rng.choice([12, 20, 30, 40]))
    noise = float(rng.uniform(0.002, 0.0075))  # run-to-run CV of a steady median: 0.2-0.75 %
    level = np.full(n, 1.0)
    step_at, size = None, 0.0
    if with_step:
        step_at = int(rng.integers(3, n - 2))  # at least 3 runs on each side
        size = float(rng.choice([-1, 1]) * rng.uniform(0.03, 0.20))
        level[step_at:] *= 1.0 + size
    drift = float(rng.uniform(-0.01, 0.01)) if rng.random() < 0.3 else 0.0  # up to ±1 % over the whole series
    level *= 1.0 + drift * np.linspace(0.0, 1.0, n)
    values = level * (1.0 + noise * rng.standard_normal(n))
    outliers = []
    if rng.random() < 0.3:  # one isolated outlier (a noisy run), never the first or last run, never at the step
        spot = int(rng.integers(1, n - 1))
        if step_at is None or abs(spot - step_at) > 1:
            values[spot] *= 1.0 + float(rng.choice([-1, 1]) * rng.uniform(0.05, 0.12))
            outliers.append(spot)
    return values, step_at, {"n": n, "noise": noise, "size": size, "drift": drift, "outliers": outliers}


def robust_noise(log_values: np.ndarray) -> float:
    """The run-to-run noise of a series from its first differences (a step or an outlier moves few of them)."""
    diffs = np.diff(log_values)
    return max(1.4826 * float(np.median(np.abs(diffs - np.median(diffs)))) / math.sqrt(2.0), 1e-4)


def ruptures_pelt(values: np.ndarray, model: str, beta: float) -> list[int]:
    import ruptures

    logs = np.log(values)
    scaled = (logs - np.median(logs)) / robust_noise(logs)
    ends = (
        ruptures.Pelt(model=model, min_size=2, jump=1)
        .fit(scaled.reshape(-1, 1))
        .predict(pen=beta * math.log(len(values)))
    )
    return [e for e in ends if e < len(values)]


def otava(values: np.ndarray, pvalue: float) -> list[int]:
    from otava.analysis import compute_change_points

    points, _ = compute_change_points(list(map(float, values)), window_len=30, max_pvalue=pvalue)
    return [p.index for p in points]


def spa(values: np.ndarray, pvalue: float) -> list[int]:
    from signal_processing_algorithms.energy_statistics.energy_statistics import e_divisive

    return sorted(e_divisive(values, pvalue=pvalue, permutations=100))


LIBRARIES = {
    "ruptures-pelt-l2": lambda v: ruptures_pelt(v, "l2", 3.0),
    "ruptures-pelt-l1": lambda v: ruptures_pelt(v, "l1", 3.0),
    "ruptures-pelt-l1-b2": lambda v: ruptures_pelt(v, "l1", 2.0),
    "ruptures-pelt-l1-b4": lambda v: ruptures_pelt(v, "l1", 4.0),
    "ruptures-pelt-l1-b5": lambda v: ruptures_pelt(v, "l1", 5.0),
    "ruptures-pelt-rbf": lambda v: ruptures_pelt(v, "rbf", 3.0),
    "tunebench": lambda v: __import__("tunebench.history.changepoints", fromlist=["x"]).change_points(v),
    "tunebench-b3": lambda v: __import__("tunebench.history.changepoints", fromlist=["x"]).change_points(v, beta=3.0),
    "tunebench-b4": lambda v: __import__("tunebench.history.changepoints", fromlist=["x"]).change_points(v, beta=4.0),
    "otava": lambda v: otava(v, 0.001),
    "otava-p0.01": lambda v: otava(v, 0.01),
    "spa-edivisive": lambda v: spa(v, 0.01),
}


def score(library: str, count: int) -> dict:
    """Hit rates on step series, false alarms on flat ones, and the time per series."""
    rng = np.random.default_rng(SEED)
    detect = LIBRARIES[library]
    exact = near = extra = flat_alarms = 0
    small_exact = small = 0
    seconds = 0.0
    for i in range(2 * count):
        with_step = i % 2 == 0
        values, answer, drawn = generate(rng, with_step)
        started = time.perf_counter()
        found = detect(values)
        seconds += time.perf_counter() - started
        if not with_step:
            flat_alarms += bool(found)
            continue
        exact += found == [answer]
        near += len(found) == 1 and abs(found[0] - answer) <= 1
        extra += max(0, len(found) - 1)
        if abs(drawn["size"]) < 0.05:
            small += 1
            small_exact += found == [answer]
    return {"library": library, "series": 2 * count, "step_exact_pct": round(100 * exact / count, 1),
            "step_within_1_pct": round(100 * near / count, 1), "extra_points_per_step_series": round(extra / count, 3),
            "steps_below_5pct_exact_pct": round(100 * small_exact / max(small, 1), 1),
            "flat_false_alarm_pct": round(100 * flat_alarms / count, 1),
            "ms_per_series": round(1000 * seconds / (2 * count), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", required=True, choices=sorted(LIBRARIES))
    parser.add_argument("--series", type=int, default=400, help="step series, and as many flat ones")
    args = parser.parse_args()
    print(json.dumps(score(args.library, args.series)))


if __name__ == "__main__":
    main()
