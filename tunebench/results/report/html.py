"""HTML building blocks of the report: the page style, tables (with per-row notes), embedded images."""

from __future__ import annotations

import base64
import html
import logging
from collections.abc import Sequence

from tunebench.results.report.templates import render

logger = logging.getLogger(__name__)

# Long labels, values and error lines wrap inside their cells (overflow-wrap:anywhere lets a table shrink below
# its longest word) so no table pushes the page sideways. Headers break only between words (a column is never
# narrower than its header's longest word) and numbers never wrap, so columns stay readable. Below 1150 px the
# tables get a smaller font: the 13 columns of the experiments table need about 1050 px at the normal size.
CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;max-width:1200px;color:#222;
padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em} h2{font-size:1.25em;border-bottom:1px solid #ddd;padding-bottom:.2em;
margin-top:1.6em} .meta{color:#666;font-size:.9em} .omitted{color:#8a6d3b;background:#fcf8e3;padding:.4em .7em;
border-radius:4px} table{border-collapse:collapse;font-size:.85em;margin:.5em 0;max-width:100%}
th,td{border:1px solid #ddd;padding:.3em .45em;text-align:left;vertical-align:top} td{overflow-wrap:anywhere}
table.experiments td:nth-child(2),table.failures td:nth-child(2){overflow-wrap:normal}
th{background:#f4f4f4} td.num{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
img{max-width:100%;border:1px solid #eee;margin:.4em 0}
.status-ok{color:#2b7a2b} .status-bad{color:#b22222;font-weight:600} .pill{display:inline-block;
padding:.1em .6em;border-radius:1em;background:#eee;margin-right:.4em}
.warn-mark{display:inline-block;min-width:1.1em;text-align:center;border-radius:50%;background:#c0392b;color:#fff;
font-weight:700;font-size:.8em;line-height:1.1em;margin-right:.3em}
tr.warning td{background:#fdf2e9;color:#7a3b10;font-size:.95em;border-top:none}
.warn-summary{background:#fdf2e9;border-left:4px solid #c0392b;padding:.5em .8em;margin:.8em 0}
.note{color:#555;font-size:.9em}
@media (max-width:1150px){table{font-size:.75em} th,td{padding:.25em .3em}}
"""
# Text that stands for a warning where no HTML can go (chart annotations, legends): the same glyph as the badge.
WARN_GLYPH = "!"


class Html(str):
    """Markup already escaped: a table cell holding it is written as is (`__html__`: jinja2's mark of markup)."""

    def __html__(self) -> str:
        return str(self)


def escape(value: object) -> str:
    return value if isinstance(value, Html) else html.escape(str(value))


def warn_mark() -> Html:
    # Coloured text, not emoji: headless/CI browsers often lack an emoji font and show boxes.
    return Html(f'<span class="warn-mark" title="measurement warning">{WARN_GLYPH}</span>')


def img(png: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def table(headers: list[str], rows: list[list[object]], numeric: set[int] = frozenset(), cls: str = "",
          notes: Sequence[str | None] | None = None) -> str:
    """`notes[i]`, when given, is a full-width line right under row i (e.g. that row's measurement warning).
    Rendered from templates/table.html.j2: every header, cell and note escaped unless it is Html."""
    paired = [(row, notes[i] if notes is not None else None) for i, row in enumerate(rows)]
    return render("table.html.j2", headers=headers, rows=paired, numeric=numeric, cls=cls)


def omitted(reason: str) -> str:
    return f'<p class="omitted">Omitted: {html.escape(reason)}</p>'


def beside(results_csv, name: str, needed: set[str]):
    """(the CSV `name` next to the results CSV, '') or (None, why not: '' when absent, else a warning line)."""
    from pathlib import Path

    import pandas as pd

    from tunebench.user_files import MAX_CSV_BYTES, size_problem

    path = Path(results_csv).parent / name
    if not path.is_file():
        return None, ""
    if too_large := size_problem(path, MAX_CSV_BYTES, "CSV tunebench writes"):
        return None, f'<p class="warn-summary">{name} was not read: {html.escape(too_large.message)}</p>'
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        return None, f'<p class="warn-summary">{name} could not be read: {html.escape(str(exc))}</p>'
    if not needed <= set(frame.columns):
        return None, f'<p class="warn-summary">{name} lacks {", ".join(sorted(needed - set(frame.columns)))}.</p>'
    return frame, ""
