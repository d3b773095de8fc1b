"""Merge the scanner's per-rank metrics into one CSV row: the max decides OOM, the spread shows imbalance."""

from __future__ import annotations

from typing import Any

from scanner import merge_reports

# Throughput is global: summed over ranks, never a per-rank mean labelled global.
_SUMMED = ("scan_tokens_per_second", "scan_nonpad_tokens_per_second", "scan_tokens", "scan_nonpad_tokens")


def merge_rank_metrics(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    """One row from every rank's flat `scan_*` metrics (rank order). A single rank passes through."""
    if len(per_rank) <= 1:
        return dict(per_rank[0]) if per_rank else {}
    spread = merge_reports(per_rank)
    row: dict[str, Any] = {}
    for key, value in per_rank[0].items():
        if key in _SUMMED and f"{key}_max" in spread:
            row[key] = sum(r[key] for r in per_rank)
            row[f"{key}_per_device"] = spread[f"{key}_mean"]
        elif f"{key}_max" in spread:
            row[key] = spread[f"{key}_max"]
            if key.startswith(("scan_mem_", "scan_time_")):
                row[f"{key}_min"] = spread[f"{key}_min"]
                row[f"{key}_mean"] = spread[f"{key}_mean"]
        else:
            row[key] = value
    peaks = [r.get("scan_mem_peak_allocated") for r in per_rank]
    if all(isinstance(p, (int, float)) and p > 0 for p in peaks):
        row["scan_mem_imbalance"] = max(peaks) / (sum(peaks) / len(peaks)) - 1
    row["scan_ranks"] = len(per_rank)
    row.pop("scan_rank", None)
    return row
