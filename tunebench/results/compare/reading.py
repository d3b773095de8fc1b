"""Reading the CSVs a comparison needs: the results CSV of a directory, a harness CSV, its metric columns as floats."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pandas as pd

from tunebench.results.columns import lookup
from tunebench.user_files import MAX_CSV_BYTES, shown

logger = logging.getLogger(__name__)


class CompareInputError(ValueError):
    """Bad input (missing file, malformed CSV, no common key...): the message names the file and the fix."""


def resolve_results_csv(path: str | os.PathLike, role: str = "results") -> Path:
    """A results directory means ``<dir>/raw_summary.csv``; a file is used as is (for --results and --reference)."""
    p = Path(path)
    if p.is_dir():
        p = p / "raw_summary.csv"
        if not p.is_file():
            raise CompareInputError(
                f"{role} {p}: no raw_summary.csv in the results directory; run the benchmark first or pass the CSV "
                "path"
            )
    return p


def load_csv(path: str | os.PathLike, role: str) -> pd.DataFrame:
    """Read one harness CSV, raising CompareInputError with the file name and the fix on any problem."""
    p = Path(path)
    if not p.is_file():
        raise CompareInputError(f"{role} {p}: file not found; check the path (--{role} expects a CSV or a "
                                "results directory)")
    size = p.stat().st_size
    if size > MAX_CSV_BYTES:  # checked before pandas builds a frame of it
        raise CompareInputError(f"{role} {p}: {size:,} bytes, more than the {MAX_CSV_BYTES:,} a results CSV holds; "
                                "give the raw_summary.csv or reference tunebench wrote")
    try:
        # Read back through the column registry's types: experiment_id is a hex hash, one that happens to be all
        # digits must not become a number (and lose its leading zeros), or its step samples would not be found.
        df = pd.read_csv(p, dtype=dict.fromkeys(lookup.text_columns(), str))
    except pd.errors.EmptyDataError:
        raise CompareInputError(f"{role} {p}: the file is empty; regenerate it with the benchmark") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise CompareInputError(
            f"{role} {p}: malformed CSV ({str(exc)[:200]}); regenerate it with the benchmark"
        ) from None
    if not isinstance(df.index, pd.RangeIndex):
        # pandas silently turns surplus leading fields into an index when every row is too long.
        raise CompareInputError(
            f"{role} {p}: malformed CSV (rows have more fields than the header); regenerate it"
        )
    if df.empty:
        raise CompareInputError(f"{role} {p}: the CSV has a header but no rows; nothing to compare")
    if df.columns.duplicated().any():
        dup = sorted(set(df.columns[df.columns.duplicated()]))
        raise CompareInputError(f"{role} {p}: duplicate column(s) {dup}; fix the header")
    df.attrs["path"] = str(p)
    return from_fms(df) if is_fms_csv(df) else df


# fms-acceleration's benchmark CSV (scripts/benchmarks/refs/*.csv, its benchmarks.csv): no experiment_id or status,
# Hugging Face's per-device `train_tokens_per_second`, hub ids for models, and full fine-tuning with a blank
# peft_method. Read into tunebench's words, so that it joins with tunebench's rows on the same keys.
FMS_RENAMES = {"train_tokens_per_second": "train_tokens_per_second_per_device"}


def is_fms_csv(df: pd.DataFrame) -> bool:
    return {"framework_config", "train_tokens_per_second"} <= set(df.columns) and "experiment_id" not in df.columns


def from_fms(df: pd.DataFrame) -> pd.DataFrame:
    """An fms benchmark CSV in tunebench's words; `attrs["notes"]` says what was translated."""
    from tunebench.experiment.models import preset_for_hub_id

    out = df.rename(columns=FMS_RENAMES)
    if "peft_method" in out.columns:
        out["peft_method"] = out["peft_method"].where(out["peft_method"].notna() & (out["peft_method"] != ""), "none")
    mapped = []
    if "model_name_or_path" in out.columns:
        presets = out["model_name_or_path"].map(lambda m: preset_for_hub_id(m) if isinstance(m, str) else None)
        pairs = zip(out["model_name_or_path"], presets, strict=True)
        mapped = sorted({f"{model} → {preset}" for model, preset in pairs if isinstance(preset, str)})
        out["model_name_or_path"] = presets.where(presets.notna(), out["model_name_or_path"])
    if "status" not in out.columns:  # fms's checked-in CSVs keep the runs that finished
        out["status"] = "ok"
    out.attrs = {**df.attrs, "notes": [
        f"{df.attrs.get('path', 'the CSV')} is fms-acceleration's benchmark CSV: its train_tokens_per_second "
        "(per device, padded) is compared as train_tokens_per_second_per_device, a blank peft_method is `none`"
        + (f", models as presets: {'; '.join(mapped)}" if mapped else "")]}
    return out


def numeric_metrics(df: pd.DataFrame, columns: list[str], role: str) -> pd.DataFrame:
    """Coerce metric columns to float; a non-numeric cell is an input error, never silently NaN."""
    df = df.copy()
    for col in columns:
        values = pd.to_numeric(df[col], errors="coerce")
        bad = values.isna() & df[col].notna() & (df[col].astype(str).str.strip() != "")
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise CompareInputError(
                f"{role} {df.attrs.get('path', '?')}: column {col!r} row {row + 2} holds non-numeric "
                f"{shown(df[col].iloc[row])}; metric cells must be numbers or empty"
            )
        df[col] = values.astype(float)
    return df
