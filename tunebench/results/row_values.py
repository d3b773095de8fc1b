"""The values of a results row checked where a results folder (or its CSV) is read: one checker for every reader.

A row the harness wrote holds finite numbers in their column's range, keys spelt as tunebench spells them and nested
arguments of the shape the Trainer takes. A row edited by hand, or damaged, may hold anything: a rate of -100
tokens/s projects to a negative rate, a one-GPU twin at 0 tokens/s divides a scaling efficiency by zero, a start time
of 1e300 overflows every clock, and two keys differing only in case are one column to DuckDB and to a reader.
Projection, scaling, history and the report read rows through `row_problems` (results.summaries.newest_rows) so that
such a value is named (file, key, fix) before any of them computes with it.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any

from tunebench.errors import InputProblem
from tunebench.experiment.nested import nested_problems
from tunebench.results.columns.lookup import lookup
from tunebench.results.columns.types import OUTCOME
from tunebench.vocabulary import Status

logger = logging.getLogger(__name__)

# Units of quantities that are never below zero (a time, a size, a count, a rate, an energy, a loss in nats).
NONNEGATIVE_UNITS = frozenset({"s", "bytes", "MiB", "tokens/s", "tokens", "count", "samples", "samples/s", "steps/s",
                               "J", "J/token", "FLOP", "%", "MHz", "W", "USD/Mtoken", "nats", "nats/token"})
# What a figure of each unit is, for the messages.
_WHAT = {"s": "a time", "bytes": "a size", "MiB": "a size", "tokens/s": "a rate", "samples/s": "a rate",
         "steps/s": "a rate", "tokens": "a count of tokens", "count": "a count", "samples": "a count of rows",
         "J": "an energy", "J/token": "an energy per token", "FLOP": "a count of operations", "%": "a percentage",
         "MHz": "a clock", "W": "a power", "USD/Mtoken": "a price", "nats": "a loss", "nats/token": "a loss"}
# A finished (ok) run moved tokens: its rates are above zero (a twin's rate divides scaling_efficiency).
RATE_UNITS = frozenset({"tokens/s", "samples/s", "steps/s"})
# Declared with a non-negative unit but signed by meaning: the margin of a plan that does not fit is negative.
SIGNED = frozenset({"pred_fit_margin_bytes"})
# Times of day as Unix seconds: between 1970 and the last second every clock and datetime can show (year 9999).
LAST_TIME = 253_402_300_799.0
# What the identity's sizes count: at least one of each (a run of 0 GPUs or a batch of 0 rows is no run).
AT_LEAST_ONE = frozenset({"num_gpus", "per_device_train_batch_size", "gradient_accumulation_steps",
                          "effective_batch_size", "max_seq_len", "repeat", "repeats"})
FIX = "correct the value (or remove the experiment's folder to run it again)"
MAX_PROBLEMS = 50  # per file: past that it is not a row the harness wrote, and more lines say nothing new


def _shown(value: Any) -> str:
    """A value as a message shows it, cut to 40 characters while it is built (a 5 000-digit number of a JSON file is
    past what Python turns into text)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        beyond = "a number below -1e308" if value < 0 else "a number past 1e308"
        return f"{float(value):g}" if abs(value) < 10**308 else beyond
    text = json.dumps(value, default=str) if not isinstance(value, float) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _number_problem(key: str, value: Any, unit: str, ok_row: bool) -> str | None:
    """Why `value` cannot be the number column `key` (of `unit`) holds; None when it can (None: empty)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"expected a number, got {_shown(value)}"
    if isinstance(value, float) and not math.isfinite(value):  # an int is finite (a 400-digit one too)
        return f"{_shown(value)} is not a finite number"
    if key.endswith("_unix"):
        return None if 0 <= value <= LAST_TIME else f"{_shown(value)} is no time (Unix seconds between 1970 and 9999)"
    if key in AT_LEAST_ONE and (value < 1 or value != int(value)):
        return f"{_shown(value)} is not a whole number >= 1"
    if unit in NONNEGATIVE_UNITS and key not in SIGNED and value < 0:
        return f"{_shown(value)} is negative: {_WHAT.get(unit, 'this figure')} ({unit}) is never below 0"
    if ok_row and unit in RATE_UNITS and value == 0:
        return f"0 {unit} in a finished (ok) row: a run that trained moved tokens"
    return None


def _case_problems(row: dict[str, Any], source: str) -> list[InputProblem]:
    """Keys spelt otherwise than tunebench spells them: a declared column in other case, or two keys of the row
    differing only in case (one column to DuckDB, to pandas' readers and to a human)."""
    groups: dict[str, list[str]] = {}
    for key in row:
        if isinstance(key, str):
            groups.setdefault(key.lower(), []).append(key)
    problems = []
    for lower, keys in groups.items():
        kept = lower if lower in keys else keys[0]  # tunebench's spelling is lower case
        for key in keys:
            if key != kept:
                problems.append(InputProblem(source, key, f"differs from the key {kept!r} only in case",
                                             f"keep one of them, spelt {lower!r}"))
            elif key != lower and lookup(key) is None and lookup(lower) is not None:
                problems.append(InputProblem(source, key, f"tunebench's column is spelt {lower!r}",
                                             f"rename it {lower!r}"))
    return problems


def row_problems(row: dict[str, Any], source: str) -> list[InputProblem]:
    """Every value of a results row (`source`: its file, for the messages) that no run can have produced: numbers
    of declared columns that are text, NaN, infinite or out of their unit's range, keys differing from tunebench's
    spelling only in case, and nested arguments (fsdp_config) of the wrong shape."""
    ok_row = str(row.get("status", "")).lower() == Status.OK
    problems = _case_problems(row, source)
    for key, value in row.items():
        column = lookup(key) if isinstance(key, str) else None
        if column is None or column.unit in ("-", "bool") or column.kind == OUTCOME:
            continue
        if why := _number_problem(key, value, column.unit, ok_row):
            problems.append(InputProblem(source, key, why, FIX))
    problems += [InputProblem(source, key, message, fix)
                 for key, message, fix in nested_problems(row, installed_here=False)]
    return problems[:MAX_PROBLEMS]


def without_problems(row: dict[str, Any], problems: list[InputProblem]) -> dict[str, Any]:
    """`row` with every value a problem names left empty (a key in other case dropped): what the CSVs keep of it."""
    named = {p.key for p in problems}
    spelt = {p.key for p in problems if "case" in p.message or "spelt" in p.message}
    return {k: (None if k in named else v) for k, v in row.items() if k not in spelt}


def frame_problems(frame, source: str, limit: int = MAX_PROBLEMS) -> list[InputProblem]:
    """The same check over a results CSV read back (`frame`, pandas; `source`: its file), column by column: a
    report of a CSV edited by hand names the cells no run produces (`column (row <experiment_id>)`) before it
    charts them. An empty cell is an absent value, as the CSV writer leaves it."""
    import numpy as np
    import pandas as pd

    problems = _case_problems(dict.fromkeys(map(str, frame.columns)), source)
    ids = frame["experiment_id"].astype(str).to_numpy() if "experiment_id" in frame.columns else \
        frame.index.astype(str).to_numpy()
    ok_rows = (frame["status"].astype(str).str.lower() == Status.OK).to_numpy() if "status" in frame.columns \
        else np.zeros(len(frame), dtype=bool)
    for name in frame.columns:
        column = lookup(str(name))
        if column is None or column.unit in ("-", "bool") or column.kind == OUTCOME:
            continue
        raw = frame[name]
        values = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
        text = np.zeros(len(values), dtype=bool) if pd.api.types.is_numeric_dtype(raw) else \
            np.isnan(values) & raw.notna().to_numpy() & (raw.astype(str).str.strip() != "").to_numpy()
        for position in np.flatnonzero(text | _suspect(str(name), values, column.unit, ok_rows)):
            value = raw.iloc[position] if text[position] else float(values[position])
            if why := _number_problem(str(name), value, column.unit, bool(ok_rows[position])):
                problems.append(InputProblem(source, f"{name} (row {ids[position]})", why,
                                             "correct the cell, or rebuild the CSV from the results folder "
                                             "(benchmark.py --results_output_path <it> reuses every finished run)"))
            if len(problems) >= limit:
                return problems
    return problems


def _suspect(name: str, values, unit: str, ok_rows):
    """The cells of one numeric column (a float array, NaN where empty) that `_number_problem` may refuse,
    vectorised: a CSV of thousands of rows is checked in a moment, and each suspect is then judged as a row's
    value is."""
    import numpy as np

    present = ~np.isnan(values)
    with np.errstate(invalid="ignore"):
        suspect = present & ~np.isfinite(values)
        if name.endswith("_unix"):
            return suspect | (present & ((values < 0) | (values > LAST_TIME)))
        if name in AT_LEAST_ONE:
            suspect |= present & ((values < 1) | (values != np.round(values)))
        if unit in NONNEGATIVE_UNITS and name not in SIGNED:
            suspect |= present & (values < 0)
        if unit in RATE_UNITS:
            suspect |= ok_rows & (values == 0)
    return suspect
