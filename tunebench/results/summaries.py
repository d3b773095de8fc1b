"""raw_summary.csv and benchmarks.csv, rebuilt from every experiment folder on disk (pandas, atomic writes)."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import pandas as pd

from tunebench.errors import InputProblem
from tunebench.fileio import ensure_inside, write_atomic
from tunebench.readback import Unreadable, load_experiment_file
from tunebench.results.columns.lookup import kind_of
from tunebench.results.columns.types import ARGUMENT, IDENTITY
from tunebench.results.folder import (
    BENCHMARKS,
    RAW_SUMMARY,
    REPEAT_SUFFIX,
    damaged_experiment_folders,
    experiment_folders,
)
from tunebench.results.parity.verdicts import parity_columns
from tunebench.results.repeats import repeat_columns
from tunebench.results.row_values import row_problems, without_problems
from tunebench.results.scaling import scaling_columns
from tunebench.vocabulary import Status

logger = logging.getLogger(__name__)

RESULTS_FILE = "results.json"
SPEC_FILES = ("spec.json", "config.json")  # config.json: experiment folders of earlier versions
FINISHED_ROW_KEYS = ("experiment_id", "status")  # what a row the harness completed always holds

# Always in benchmarks.csv (when present), after the columns that vary across experiments: the steady-state
# figures lead; the whole-run (Hugging Face-compatible) ones follow for comparison with other tools.
KEY_COLUMNS = ["experiment_id", "scenario", "framework_config", "model_name_or_path", "num_gpus", "status"]
KEY_METRICS = [
    "steady_nonpad_tokens_per_second", "steady_nonpad_tokens_per_second_per_device", "scaling_efficiency",
    "steady_mfu", "steady_hfu",
    "steady_step_time_median", "steady_step_time_cv", "steady_steps", "steady_padding_fraction",
    "scan_attention_backend", "measurement_warning", "scan_mem_peak_allocated", "scan_mem_activations",
    "mem_nvidia_mem_reserved", "steady_energy_joules_per_nonpad_token", "startup_seconds", "train_loss",
    "train_runtime", "train_nonpad_tokens_per_second", "train_tokens_per_second",
    "train_tokens_per_second_per_device", "mfu", "mem_peak_torch_mem_alloc_in_bytes", "repeats",
    "quantization", "loss_parity_max_rel_diff", "loss_parity_final_rel_diff", "compile_seconds",
    "steady_nonpad_tokens_per_second_olympic", "steady_nonpad_tokens_per_second_spread_pct", "error_messages",
]
_WARNED: set[str] = set()
# Never "varying configuration" even though they are arguments: where the harness put the run's files.
_BOOKKEEPING_ARGUMENTS = {"output_dir", "results_json"}


def write_row(folder: Path, row: dict[str, Any], root: Path | None = None) -> None:
    """results.json of one experiment; with `root`, only when the folder resolves inside it."""
    if root is not None:
        ensure_inside(root, folder)
    write_atomic(folder / RESULTS_FILE, json.dumps(row, indent=2, sort_keys=True, default=str))


def _read_row(folder: Path, required: tuple[str, ...] = FINISHED_ROW_KEYS) -> tuple[dict[str, Any] | None, str | None]:
    """(the row in a folder's results.json, None) or (None, why it is unusable); (None, None) when there is none."""
    path = folder / RESULTS_FILE
    try:
        return load_experiment_file(path, required), None
    except FileNotFoundError:
        return None, None
    except Unreadable as exc:
        logger.warning("%s: treated as not done (it runs again on resume)", exc)
        return None, str(exc)


def read_row(folder: Path, required: tuple[str, ...] = FINISHED_ROW_KEYS) -> dict[str, Any] | None:
    """The row in a folder's results.json; None when there is none or it is unusable (not a JSON object, an
    identity key missing or of the wrong type: treated as not done, the experiment runs again). The training
    entry's row, before the harness completes it, has no identity yet (`required=()`)."""
    return _read_row(folder, required)[0]


def _incomplete_row(folder: Path, reason: str | None = None) -> dict[str, Any] | None:
    """A launched experiment that left no usable row (its harness was killed, or its results.json is damaged): an
    error row from its spec.json."""
    if not (folder / "stdout.log").exists():
        return None  # planned by a dry run, never launched
    config = None
    for name in SPEC_FILES:
        try:
            config = load_experiment_file(folder / name)
            break
        except (OSError, Unreadable):
            continue
    if not isinstance(config, dict):
        return None
    arguments = config.get("arguments") if isinstance(config.get("arguments"), dict) else {}
    identity = {k: v for k, v in config.items() if not isinstance(v, (dict, list))}
    identity.pop("spec_version", None)
    message = f"{reason}; it runs again on resume" if reason else \
        "no results.json: the run was stopped before this experiment finished (the harness was killed); it runs " \
        "again on resume"
    return {**flatten_arguments(arguments), **identity, "status": Status.ERROR, "error_messages": message}


def _damaged_row(folder: Path, reason: str) -> dict[str, Any]:
    """An error row for a folder named as an experiment's whose own files cannot say which one it is."""
    scenario, _, experiment_id = REPEAT_SUFFIX.sub("", folder.name).rpartition("_")
    repeat = REPEAT_SUFFIX.search(folder.name)
    return {"experiment_id": experiment_id, "scenario": scenario, "repeat": int(repeat.group(0)[2:]) if repeat else 1,
            "status": Status.ERROR, "error_messages": f"{reason} (fix: remove that folder to run the experiment "
                                                 "again)"}


def newest_rows(output_dir: Path, order: list[str] | None = None, incomplete: bool = True,
                problems: list[InputProblem] | None = None) -> list[tuple[Path, dict[str, Any]]]:
    """(folder, row) per experiment found in `output_dir`: its results.json (the newest, when several folders hold
    the same experiment), or with `incomplete` an error row for a launched experiment that wrote none (or whose
    files cannot say which experiment it is). The one
    reader of a results folder's rows: every row's values are checked (results.row_values) before anyone uses
    them; a value no run can produce is left empty, and named in `problems` when given (the caller refuses the
    folder: projection, history), else in a warning (the CSVs of a run).

    Rows of the folders named in `order` (the current matrix) come first, in that order; the rest by start
    time. Nothing here depends on the run that asks: the CSVs can always be rebuilt from the folders alone.
    """
    found: dict[tuple, tuple[float, Path, dict[str, Any]]] = {}
    damaged = damaged_experiment_folders(output_dir) if incomplete else {}
    for folder in [*experiment_folders(output_dir), *damaged]:
        row, reason = _read_row(folder)
        stamp_file = folder / RESULTS_FILE
        if folder in damaged:
            row, stamp_file = _damaged_row(folder, damaged[folder]), folder
        elif row is None:
            row = _incomplete_row(folder, reason) if incomplete else None
            stamp_file = folder / "stdout.log"
        if row is None or not row.get("experiment_id"):
            continue
        try:
            stamp = stamp_file.stat().st_mtime
        except OSError:
            stamp = 0.0
        key = (row["experiment_id"], row.get("repeat") or 1)  # repeats of one experiment are rows of their own
        previous = found.get(key)
        if previous is None or stamp > previous[0]:
            found[key] = (stamp, folder, row)
    position = {name: i for i, name in enumerate(order or [])}

    def sort_key(item: tuple[float, Path, dict[str, Any]]):
        stamp, folder, row = item
        start = row.get("experiment_start_unix")
        start = start if isinstance(start, (int, float)) and math.isfinite(start) else stamp
        return (position.get(folder.name, len(position)), start, folder.name)

    return [(folder, _checked(folder, row, problems)) for _, folder, row in sorted(found.values(), key=sort_key)]


def _checked(folder: Path, row: dict[str, Any], problems: list[InputProblem] | None) -> dict[str, Any]:
    """The row with the values no run can produce left empty; those named in `problems`, or warned about."""
    found = row_problems(row, str(folder / RESULTS_FILE))
    if problems is not None:
        problems += found
    for problem in found if problems is None else ():
        if str(problem) not in _WARNED:  # the CSVs are rebuilt after every experiment: said once
            _WARNED.add(str(problem))
            logger.warning("%s: left empty in the CSVs", problem)
    return without_problems(row, found) if found else row


def rows_on_disk(output_dir: Path, order: list[str] | None = None, incomplete: bool = True,
                 problems: list[InputProblem] | None = None) -> list[dict[str, Any]]:
    """One row per experiment found in `output_dir`, checked (see `newest_rows`)."""
    return [row for _, row in newest_rows(output_dir, order, incomplete, problems)]


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


def with_key_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with every key column and key metric, empty where no row holds it: a matrix whose experiments all
    failed (or a dry run) has the columns of one that ran, so a script that reads them gets NaN, not a KeyError."""
    missing = [c for c in KEY_COLUMNS + KEY_METRICS if c not in frame.columns]
    return frame.reindex(columns=[*frame.columns, *missing]) if missing else frame


def varying_config_columns(frame: pd.DataFrame) -> list[str]:
    """Argument and identity columns whose value differs between experiments (the column registry decides)."""
    configuration = (ARGUMENT, IDENTITY)
    return [c for c in frame.columns
            if kind_of(c) in configuration and c not in _BOOKKEEPING_ARGUMENTS and c != "experiment_id"
            and frame[c].astype(str).nunique(dropna=False) > 1]


def benchmarks_view(frame: pd.DataFrame) -> pd.DataFrame:
    selected = [c for c in KEY_COLUMNS if c in frame.columns]
    selected += [c for c in varying_config_columns(frame) if c not in selected]
    selected += [c for c in KEY_METRICS if c in frame.columns and c not in selected]
    return frame[selected]


def write_summaries(output_dir: Path, order: list[str] | None = None, incomplete: bool = True) -> pd.DataFrame:
    """Rebuild raw_summary.csv and benchmarks.csv from every experiment folder in `output_dir`, atomically
    (see `rows_on_disk`). With no experiment on disk, no CSV is written and an empty frame is returned."""
    rows = rows_on_disk(output_dir, order, incomplete)
    frame = scaling_columns(output_dir, parity_columns(output_dir, repeat_columns(collect(rows))))
    if rows:
        write_atomic(output_dir / RAW_SUMMARY, frame.to_csv(index=False))
        write_atomic(output_dir / BENCHMARKS, benchmarks_view(frame).to_csv(index=False))
    return frame


def summary_table(frame: pd.DataFrame) -> str:
    """A readable end-of-run table: one line per experiment, human units."""
    if frame.empty:
        return "(no experiments)"
    frame = frame.reset_index(drop=True)
    blank = pd.Series([""] * len(frame))
    view = pd.DataFrame({
        "scenario": frame.get("scenario"),
        "framework": frame.get("framework_config"),
        "model": frame.get("model_name_or_path"),
        "gpus": frame.get("num_gpus"),
        "bs×ga": frame.get("per_device_train_batch_size", blank).astype(str) + "×"
        + frame.get("gradient_accumulation_steps", blank).astype(str),
        "status": frame.get("status"),
    })
    def column(name: str, scale: float = 1.0, fmt: str = "{:.1f}") -> pd.Series:
        if name not in frame.columns:
            return blank
        values = pd.to_numeric(frame[name], errors="coerce") / scale
        return values.map(lambda v: "" if pd.isna(v) else fmt.format(v))

    view["steady tok/s"] = column("steady_nonpad_tokens_per_second")
    view["step s"] = column("steady_step_time_median", fmt="{:.4f}")
    # the spread the measurement warning judges (steady.robust_cv): one figure in the table and in its warning
    view["robust cv %"] = column("steady_step_time_robust_cv", 0.01)
    view["mfu %"] = column("steady_mfu", 0.01)
    view["attn"] = frame.get("scan_attention_backend", blank).fillna("")
    view["gpu peak GiB"] = column("scan_mem_peak_allocated", 2**30, "{:.2f}")
    view["host RSS GiB"] = column("mem_peak_host_rss_bytes", 2**30, "{:.2f}")
    view["start s"] = column("startup_seconds")
    view["loss"] = column("train_loss", fmt="{:.3f}")
    table = view.to_string(index=False)
    # One line per row, keyed by what tells the rows of a matrix apart: scenario/framework alone repeats for
    # every GPU count and batch size of a scenario, and the id finds the row's folder and CSV line.
    notes = [f"  ! {_row_key(row)}: {row['measurement_warning']}" for _, row in frame.iterrows()
             if isinstance(row.get("measurement_warning"), str) and row["measurement_warning"].strip()]
    return table + ("\nmeasurement warnings:\n" + "\n".join(notes) if notes else "")


def _row_key(row: pd.Series) -> str:
    """`<experiment_id> <scenario>/<framework> gpus=<n> bs=<per device>×<accumulation>` (absent parts left out)."""
    def text(name: str) -> str:
        value = row.get(name)
        if value is None or (not isinstance(value, str) and pd.isna(value)):
            return ""
        return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)

    parts = [text("experiment_id"), "/".join(p for p in (text("scenario"), text("framework_config")) if p)]
    if text("num_gpus"):
        parts.append(f"gpus={text('num_gpus')}")
    if text("per_device_train_batch_size"):
        parts.append(f"bs={text('per_device_train_batch_size')}×{text('gradient_accumulation_steps') or 1}")
    return " ".join(p for p in parts if p)
