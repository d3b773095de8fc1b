"""Measurement warnings in the report: which rows' steady figures are qualified, their marks and the summary."""

from __future__ import annotations

import html
import logging

import pandas as pd

from tunebench.results.report.html import Html, warn_mark

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


def marked(text: str, warning: str) -> str:
    """A steady figure as shown in a table: with the warning badge in front when its row carries a warning."""
    if not warning or not text or text == "–":
        return text
    return Html(f"{warn_mark()}{html.escape(text)}")


def row_note(warning: str) -> Html | None:
    """The full-width line under a table row: the badge and the warning's own words."""
    if not warning:
        return None
    return Html(f"{warn_mark()}measurement warning: {html.escape(warning)}")


def elsewhere_note(warnings: pd.Series | list[str], where: str = "Experiments") -> str:
    """Under a table other than the experiments one: its badges point to the reasons, printed once per row (under
    the row in `where`), not again under every table that shows the row (3 times a row, before)."""
    warned = sum(1 for w in warnings if w)
    if not warned:
        return ""
    return (f'<p class="note">{warn_mark()}marks the steady figures of {warned} row(s) with a measurement warning; '
            f"each row's reason is printed once, under it in {html.escape(where)}.</p>")


def summary(df: pd.DataFrame) -> str:
    """The line at the top of the page: how many rows carry a warning, and what that means for their figures."""
    texts = warning_texts(df)
    has_steady = any(is_steady(c) for c in df.columns)
    if WARNING_COLUMN not in df.columns:
        if not has_steady:
            return ""
        return ('<p class="warn-summary">This CSV has no <code>measurement_warning</code> column: whether its '
                "steady figures were stable was not recorded.</p>")
    warned = int((texts != "").sum())
    if not warned:
        return f'<p class="note">No row carries a measurement warning ({len(df)} rows).</p>'
    return (f'<p class="warn-summary">{warn_mark()}<b>{warned} of {len(df)} rows carry a measurement warning</b>: '
            "their steady figures (marked with the badge wherever they appear) come from step times that were "
            "not stable or too few. Each row's reason is printed once, under its numbers in Experiments. Re-run "
            "them on a quiet machine, exclusive, or with more steps before relying on them.</p>")


def chart_note(labels: pd.Series, warnings: pd.Series, index: pd.Index, what: str) -> str:
    """Under a chart of steady figures: which of its points come from rows with a warning (their reasons are in
    Experiments, once)."""
    rows = [labels[i] for i in index if warnings[i]]
    if not rows:
        return ""
    items = ", ".join(html.escape(str(label)) for label in rows)
    return (f'<div class="warn-summary">{warn_mark()}{len(rows)} of the {len(index)} rows plotted in '
            f'{html.escape(what)} carry a measurement warning (their points are ringed and marked !; each reason '
            f"is under its row in Experiments): {items}</div>")
