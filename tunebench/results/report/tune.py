"""The tune part of a report: the winner of the `benchmark.py tune` that wrote the folder, and how sure it is."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
from markupsafe import Markup

from tunebench.results.compare.rules import plain_number
from tunebench.results.report.html import warn_summary
from tunebench.results.report.templates import macros
from tunebench.user_files import MAX_CSV_BYTES, size_problem

logger = logging.getLogger(__name__)

TUNE_TABLE = "tune.csv"  # written by tunebench.tuning.output (a layer above: the name is repeated, not imported)


def _cell(row: pd.Series, column: str) -> str:
    value = row.get(column)
    return "" if value is None or (isinstance(value, float) and value != value) else str(value).strip()


def section(results_csv: str | Path) -> Markup:
    """'' when no tune wrote next to this CSV; else the winner's point, objective and confidence (a noisy or
    unconfirmed winner with the warning mark), or why there is none."""
    path = Path(results_csv).parent / TUNE_TABLE
    if not path.is_file():
        return Markup()
    if too_large := size_problem(path, MAX_CSV_BYTES, "tune table"):
        return warn_summary(f"tune.csv was not read: {too_large.message}")
    try:
        table = pd.read_csv(path)
    except (OSError, ValueError) as exc:  # pandas' parser errors are ValueErrors
        return warn_summary(f"tune.csv could not be read: {exc}")
    if "rank" not in table.columns or "point" not in table.columns:
        return macros("tune.html.j2").no_columns()
    marked = table[table["winner_confidence"].notna()] if "winner_confidence" in table.columns else table.iloc[0:0]
    winner = marked.iloc[0] if len(marked) else None
    if winner is None and "winner_confidence" not in table.columns:
        ranked = table[table["rank"] == 1]
        winner = ranked.iloc[0] if len(ranked) else None  # a tune.csv from before the confidence column
    if winner is None:
        return macros("tune.html.j2").no_winner()
    objective = next((c for c in table.columns if c.startswith("objective_")), None)
    value = pd.to_numeric(_cell(winner, objective) if objective else "", errors="coerce")
    shown = f"{plain_number(value, 6)} {objective.removeprefix('objective_')}" if pd.notna(value) else \
        "no measurement"
    confidence = _cell(winner, "winner_confidence") or "confidence not recorded (a tune.csv from an older tunebench)"
    doubtful = confidence.startswith("unconfirmed") or bool(_cell(winner, "noise"))
    return macros("tune.html.j2").winner(_cell(winner, "point"), _cell(winner, "state"), shown, confidence, doubtful)
