"""HTML building blocks of the report: tables (with per-row notes), embedded images, marks, from the templates."""

from __future__ import annotations

import base64
import logging
from collections.abc import Sequence

from markupsafe import Markup

from tunebench.results.report.templates import macros, render

logger = logging.getLogger(__name__)


def warn_mark() -> Markup:
    return macros("macros.html.j2").warn_mark()


def img(png: bytes, alt: str) -> Markup:
    return macros("macros.html.j2").img(alt, base64.b64encode(png).decode())


def table(headers: list[str], rows: list[list[object]], numeric: set[int] = frozenset(), cls: str = "",
          notes: Sequence[str | None] | None = None) -> Markup:
    """`notes[i]`, when given, is a full-width line right under row i (e.g. that row's measurement warning).
    Rendered from templates/table.html.j2: every header, cell and note escaped unless it is Markup."""
    paired = [(row, notes[i] if notes is not None else None) for i, row in enumerate(rows)]
    return render("table.html.j2", headers=headers, rows=paired, numeric=numeric, cls=cls)


def omitted(reason: str) -> Markup:
    return macros("macros.html.j2").omitted(reason)


def warn_summary(text: str) -> Markup:
    """A line the reader must not miss (a file beside the CSV that could not be read), `text` escaped."""
    return macros("macros.html.j2").warn_summary(text)


def beside(results_csv, name: str, needed: set[str]):
    """(the CSV `name` next to the results CSV, '') or (None, why not: '' when absent, else a warning line)."""
    from pathlib import Path

    import pandas as pd

    from tunebench.user_files import MAX_CSV_BYTES, size_problem

    path = Path(results_csv).parent / name
    if not path.is_file():
        return None, Markup()
    if too_large := size_problem(path, MAX_CSV_BYTES, "CSV tunebench writes"):
        return None, warn_summary(f"{name} was not read: {too_large.message}")
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        return None, warn_summary(f"{name} could not be read: {exc}")
    if not needed <= set(frame.columns):
        return None, warn_summary(f"{name} lacks {', '.join(sorted(needed - set(frame.columns)))}.")
    return frame, Markup()
