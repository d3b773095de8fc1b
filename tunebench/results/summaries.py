"""Merge per-experiment results.json files into raw_summary.csv and benchmarks.csv (pandas, atomic writes)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pandas as pd

from tunebench.fileio import write_atomic

logger = logging.getLogger(__name__)

RESULTS_FILE = "results.json"
RAW_SUMMARY = "raw_summary.csv"
BENCHMARKS = "benchmarks.csv"

# Always in benchmarks.csv (when present), after the columns that vary across experiments.
KEY_COLUMNS = ["experiment_id", "scenario", "framework_config", "model_name_or_path", "num_gpus", "status"]
KEY_METRICS = [
    "train_loss", "train_runtime", "train_tokens_per_second", "train_nonpad_tokens_per_second",
    "train_nonpad_tokens_per_second_per_device", "mfu", "mem_peak_torch_mem_alloc_in_bytes",
    "mem_nvidia_mem_reserved", "scan_mem_peak_allocated", "scan_mem_activations", "scan_time_step",
    "energy_joules_per_nonpad_token", "error_messages",
]
# Columns that never count as "varying" configuration (metrics, environment, bookkeeping).
_NOT_CONFIG_PREFIXES = ("train_", "mem_", "scan_", "nvidia_", "energy_", "mfu", "error_", "status", "padding_",
                        "entry_", "trainable_", "total_", "num_processes", "experiment_id", "gpu_", "driver_",
                        "tunebench_git", "output_dir", "results_json")
_VERSION_SUFFIX = "_version"


def write_row(folder: Path, row: dict[str, Any]) -> None:
    write_atomic(folder / RESULTS_FILE, json.dumps(row, indent=2, sort_keys=True, default=str))


def read_row(folder: Path) -> dict[str, Any] | None:
    try:
        return json.loads((folder / RESULTS_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def flatten_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """Training arguments as CSV cells: lists joined by spaces, dicts as compact JSON."""
    flat = {}
    for key, value in arguments.items():
        if isinstance(value, (list, tuple)):
            value = " ".join(str(v) for v in value)
        elif isinstance(value, dict):
            value = json.dumps(value, sort_keys=True)
        flat[key] = value
    return flat


def collect(rows: list[dict[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    leading = [c for c in KEY_COLUMNS if c in frame.columns]
    return frame[leading + [c for c in frame.columns if c not in leading]]


def varying_config_columns(frame: pd.DataFrame) -> list[str]:
    columns = []
    for column in frame.columns:
        if column.startswith(_NOT_CONFIG_PREFIXES) or column.endswith(_VERSION_SUFFIX):
            continue
        if frame[column].astype(str).nunique(dropna=False) > 1:
            columns.append(column)
    return columns


def benchmarks_view(frame: pd.DataFrame) -> pd.DataFrame:
    columns = [c for c in KEY_COLUMNS if c in frame.columns]
    columns += [c for c in varying_config_columns(frame) if c not in columns]
    columns += [c for c in KEY_METRICS if c in frame.columns and c not in columns]
    return frame[columns]


def write_summaries(output_dir: Path, rows: list[dict[str, Any]]) -> pd.DataFrame:
    frame = collect(rows)
    write_atomic(output_dir / RAW_SUMMARY, frame.to_csv(index=False))
    write_atomic(output_dir / BENCHMARKS, benchmarks_view(frame).to_csv(index=False))
    return frame


def summary_table(frame: pd.DataFrame) -> str:
    """A readable end-of-run table: one line per experiment, human units."""
    if frame.empty:
        return "(no experiments)"
    view = pd.DataFrame({
        "scenario": frame.get("scenario"),
        "framework": frame.get("framework_config"),
        "model": frame.get("model_name_or_path"),
        "gpus": frame.get("num_gpus"),
        "bs×ga": frame.get("per_device_train_batch_size").astype(str) + "×"
        + frame.get("gradient_accumulation_steps").astype(str),
        "status": frame.get("status"),
    })
    def column(name: str, scale: float = 1.0, fmt: str = "{:.1f}") -> pd.Series:
        if name not in frame.columns:
            return pd.Series([""] * len(frame))
        values = pd.to_numeric(frame[name], errors="coerce") / scale
        return values.map(lambda v: "" if pd.isna(v) else fmt.format(v))

    view["tok/s"] = column("train_nonpad_tokens_per_second")
    view["mfu %"] = column("mfu", 0.01)
    view["gpu peak GiB"] = column("scan_mem_peak_allocated", 2**30, "{:.2f}")
    view["host RSS GiB"] = column("mem_peak_host_rss_bytes", 2**30, "{:.2f}")
    view["loss"] = column("train_loss", fmt="{:.3f}")
    return view.to_string(index=False)
