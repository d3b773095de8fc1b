"""Keeping a chart's text inside its PNG: titles wrapped to the figure, legends in as many columns as fit."""

from __future__ import annotations

import logging
import textwrap

from matplotlib.figure import Figure

logger = logging.getLogger(__name__)


def wrapped(text: str, width_inches: float, fontsize: float) -> str:
    """`text` broken into lines that fit `width_inches` at `fontsize`: matplotlib never wraps a title, and one
    wider than its figure is cut off at the PNG's edge. DejaVu Sans averages ~0.0072 in per character per point;
    0.0085 leaves room for wide glyphs."""
    return "\n".join(textwrap.wrap(text, max(12, int(width_inches / (0.0085 * fontsize))))) or text


def fitted_legend(fig: Figure, handles: list, names: list[str], max_columns: int, fontsize: float = 8):
    """A legend under the axes, in as many columns (up to `max_columns`) as fit the figure's width.

    constrained layout makes room below the axes for a figure legend but never narrows it: with long series
    names (one per family of experiments) a three-column legend ran past both edges of the PNG. The legend is
    measured and rebuilt with fewer columns until it fits; names too long for one column are wrapped.
    """
    renderer = fig.canvas.get_renderer()
    limit = fig.get_figwidth() * fig.dpi * 0.98
    for ncol in range(min(max_columns, len(names)), 0, -1):
        legend = fig.legend(handles, names, loc="outside lower center", ncol=ncol, fontsize=fontsize, frameon=False)
        if legend.get_window_extent(renderer).width <= limit or ncol == 1:
            break
        legend.remove()
    if legend.get_window_extent(renderer).width > limit:
        legend.remove()
        names = [wrapped(n, fig.get_figwidth() * 0.9, fontsize) for n in names]
        legend = fig.legend(handles, names, loc="outside lower center", ncol=1, fontsize=fontsize, frameon=False)
    return legend
