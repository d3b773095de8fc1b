"""Measurement warnings in the report: which rows' steady figures are qualified, their marks and the summary."""

from __future__ import annotations

import logging

import pandas as pd
from markupsafe import Markup

from tunebench.results.report.templates import macros

logger = logging.getLogger(__name__)

WARNING_COLUMN = "measurement_warning"
STEADY_PREFIX = "steady_"
# Steady-window columns that are counts, not timings: a scattered or short window leaves them exact.
NOT_QUALIFIED = frozenset({"steady_padding_fraction", "steady_steps"})


def warning_texts(df: pd.DataFrame) -> pd.Series:
    """Each row's measurement warning, '' for none (the column may be absent in older CSVs)."""
    if WARNING_COLUMN not in df.columns:
        return pd.Series("", index=df.index, dtype=object)
    return df[WARNING_COLUMN].map(lambda v: v.strip() if isinstance(v, str) else "")


def is_steady(column: str) -> bool:
    """A steady-window figure that rests on step times: the columns a measurement warning qualifies."""
    return column.startswith(STEADY_PREFIX) and column not in NOT_QUALIFIED


def _macros():
    return macros("measurement_warnings.html.j2")


def marked(text: str, warning: str) -> str | Markup:
    """A steady figure as shown in a table: with the warning badge in front when its row carries a warning."""
    if not warning or not text or text == "–":
        return text
    return _macros().marked(text)


def row_note(warning: str) -> Markup | None:
    """The full-width line under a table row: the badge and the warning's own words."""
    if not warning:
        return None
    return _macros().row_note(warning)


def elsewhere_note(warnings: pd.Series | list[str], where: str = "Experiments") -> Markup:
    """Under a table other than the experiments one: its badges point to the reasons, printed once per row (under
    the row in `where`), not again under every table that shows the row (3 times a row, before)."""
    warned = sum(1 for w in warnings if w)
    return _macros().elsewhere_note(warned, where) if warned else Markup()


def summary(df: pd.DataFrame) -> Markup:
    """The line at the top of the page: how many rows carry a warning, and what that means for their figures
    (nothing for a CSV with neither the warning column nor steady figures)."""
    has_column = WARNING_COLUMN in df.columns
    if not has_column and not any(is_steady(c) for c in df.columns):
        return Markup()
    return _macros().summary(has_column, int((warning_texts(df) != "").sum()), len(df))


def chart_note(labels: pd.Series, warnings: pd.Series, index: pd.Index, what: str) -> Markup:
    """Under a chart of steady figures: which of its points come from rows with a warning (their reasons are in
    Experiments, once)."""
    rows = [str(labels[i]) for i in index if warnings[i]]
    return _macros().chart_note(rows, len(index), what) if rows else Markup()
