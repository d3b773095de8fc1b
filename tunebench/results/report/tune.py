"""The tune part of a report: the winner of the `benchmark.py tune` that wrote the folder, and how sure it is."""

from __future__ import annotations

import html
import logging
from pathlib import Path

import pandas as pd

from tunebench.results.compare.rules import plain_number
from tunebench.results.report.html import warn_mark
from tunebench.user_files import MAX_CSV_BYTES, size_problem

logger = logging.getLogger(__name__)

TUNE_TABLE = "tune.csv"  # written by tunebench.tuning.output (a layer above: the name is repeated, not imported)


def _cell(row: pd.Series, column: str) -> str:
    value = row.get(column)
    return "" if value is None or (isinstance(value, float) and value != value) else str(value).strip()


def section(results_csv: str | Path) -> str:
    """'' when no tune wrote next to this CSV; else the winner's point, objective and confidence (a noisy or
    unconfirmed winner with the warning mark), or why there is none."""
    path = Path(results_csv).parent / TUNE_TABLE
    if not path.is_file():
        return ""
    if too_large := size_problem(path, MAX_CSV_BYTES, "tune table"):
        return f'<p class="warn-summary">tune.csv was not read: {html.escape(too_large.message)}</p>'
    try:
        table = pd.read_csv(path)
    except (OSError, ValueError) as exc:  # pandas' parser errors are ValueErrors
        return f'<p class="warn-summary">tune.csv could not be read: {html.escape(str(exc))}</p>'
    if "rank" not in table.columns or "point" not in table.columns:
        return '<p class="warn-summary">tune.csv has no <code>rank</code> and <code>point</code> columns.</p>'
    marked = table[table["winner_confidence"].notna()] if "winner_confidence" in table.columns else table.iloc[0:0]
    winner = marked.iloc[0] if len(marked) else None
    if winner is None and "winner_confidence" not in table.columns:
        ranked = table[table["rank"] == 1]
        winner = ranked.iloc[0] if len(ranked) else None  # a tune.csv from before the confidence column
    if winner is None:
        return "<h2>Tune</h2><p>No point of the search ran to a measurement: no winner (see tune.csv).</p>"
    objective = next((c for c in table.columns if c.startswith("objective_")), None)
    value = pd.to_numeric(_cell(winner, objective) if objective else "", errors="coerce")
    shown = f"{plain_number(value, 6)} {objective.removeprefix('objective_')}" if pd.notna(value) else \
        "no measurement"
    confidence = _cell(winner, "winner_confidence") or "confidence not recorded (a tune.csv from an older tunebench)"
    doubtful = confidence.startswith("unconfirmed") or bool(_cell(winner, "noise"))
    line = (f"<b>Winner of the tune search</b>: <code>{html.escape(_cell(winner, 'point'))}</code> "
            f"({html.escape(_cell(winner, 'state'))}): {html.escape(shown)}. {html.escape(confidence)}.")
    if doubtful:
        return f'<h2>Tune</h2><p class="warn-summary">{warn_mark()}{line}</p>'
    return f"<h2>Tune</h2><p>{line} The ranked space is in tune.csv.</p>"
