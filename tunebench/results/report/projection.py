"""The projection part of a report: measured tokens/s beside their projections onto other GPU kinds, one chart,
from the `projection.csv` that `benchmark.py plan --project_from` wrote next to the results."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
from markupsafe import Markup

from tunebench.results.charts.figures import to_png
from tunebench.results.folder import PROJECTION
from tunebench.results.report.html import beside, img, table
from tunebench.results.report.templates import render

logger = logging.getLogger(__name__)

NEEDED = {"scenario", "framework_config", "proj_device", "proj_source_device", "proj_num_gpus",
          "steady_tokens_per_second", "proj_steady_tokens_per_second"}


def comparison(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per experiment, one column per GPU kind (`<n>× <GPU>`): measured on its own GPU, projected on the
    others; rows the projection could not make are left out."""
    done = frame[frame["proj_steady_tokens_per_second"].notna()].copy()
    done["experiment"] = done["scenario"].astype(str) + " · " + done["framework_config"].astype(str)
    measured = done.drop_duplicates("experiment").set_index("experiment")
    columns = {f"1× {source} (measured)": measured.loc[measured["proj_source_device"] == source,
                                                        "steady_tokens_per_second"]
               for source in sorted(measured["proj_source_device"].dropna().unique())}
    for (device, n), rows in done.groupby(["proj_device", "proj_num_gpus"], sort=True):
        columns[f"{int(n)}× {device}"] = rows.set_index("experiment")["proj_steady_tokens_per_second"]
    return pd.DataFrame(columns)


def chart(table_frame: pd.DataFrame) -> bytes:
    """Grouped horizontal bars: tokens/s per experiment, one bar per GPU kind."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    kinds, rows = list(table_frame.columns), list(table_frame.index)
    fig = Figure(figsize=(9, 0.45 * len(rows) * max(1, len(kinds)) / 2 + 1.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    height = 0.8 / max(1, len(kinds))
    for i, kind in enumerate(kinds):
        ax.barh([r + i * height for r in range(len(rows))], table_frame[kind].fillna(0), height=height, label=kind)
    ax.set_yticks([r + height * (len(kinds) - 1) / 2 for r in range(len(rows))], rows, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("steady tokens/s (all GPUs)")
    ax.legend(fontsize=8, loc="lower right")
    return to_png(fig)


def section(results_csv: str | Path) -> Markup:
    """'' without a projection beside the CSV; else the chart and the table of tokens/s by GPU kind."""
    frame, why = beside(results_csv, PROJECTION, NEEDED)
    if frame is None:
        return why
    by_kind = comparison(frame)
    if by_kind.empty:
        return render("projection.html.j2", csv=PROJECTION, table=None)
    body = [[name, *("–" if pd.isna(v) else f"{v:,.0f}" for v in values)] for name, values in by_kind.iterrows()]
    return render("projection.html.j2", chart=img(chart(by_kind), "tokens/s by GPU kind"),
                  table=table(["experiment", *by_kind.columns], body, numeric=set(range(1, len(by_kind.columns) + 1)),
                              cls="projection"))
