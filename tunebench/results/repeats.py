"""Experiments run several times (`--repeats N`): each experiment's olympic mean and spread over its runs.

The olympic mean drops the fastest and the slowest run (with three runs or more), as MLPerf reports repeated
runs: one disturbed run moves it less than it moves a plain mean. The spread is (max - min) / olympic mean over
all runs. Every run stays a row of its own; these columns are added to each of them.
"""

from __future__ import annotations

import logging

import pandas as pd

from tunebench.vocabulary import Status

logger = logging.getLogger(__name__)

REPEATED = ("steady_nonpad_tokens_per_second", "steady_step_time_median")


def olympic_mean(values: list[float]) -> float:
    ordered = sorted(values)
    kept = ordered[1:-1] if len(ordered) >= 3 else ordered
    return sum(kept) / len(kept)


def repeat_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with `repeats` and, per metric of REPEATED, `<metric>_olympic` and `<metric>_spread_pct` on every
    ok row of an experiment that ran more than once (empty elsewhere)."""
    if frame.empty or "experiment_id" not in frame.columns or "repeat" not in frame.columns:
        return frame
    frame = frame.copy()
    ok = frame["status"].eq(Status.OK) if "status" in frame.columns else pd.Series(True, index=frame.index)
    counts = frame[ok].groupby("experiment_id")["experiment_id"].transform("size")
    if counts.empty or counts.max() < 2:
        return frame
    frame["repeats"] = counts.reindex(frame.index)
    for metric in REPEATED:
        if metric not in frame.columns:
            continue
        values = pd.to_numeric(frame[metric], errors="coerce")
        for _, rows in frame[ok & values.notna()].groupby("experiment_id"):
            runs = values[rows.index].tolist()
            if len(runs) < 2:
                continue
            middle = olympic_mean(runs)
            frame.loc[rows.index, f"{metric}_olympic"] = middle
            frame.loc[rows.index, f"{metric}_spread_pct"] = 100 * (max(runs) - min(runs)) / middle if middle else None
    return frame
