"""The fit-map part of a report: the largest micro-batch that fits, as a batch × sequence-length map per model and
GPU, from the `fit_map.csv` that `benchmark.py plan --fit_map` wrote next to the results."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
from markupsafe import Markup

from tunebench.results.folder import FIT_MAP
from tunebench.results.report.html import beside, table
from tunebench.results.report.templates import render

logger = logging.getLogger(__name__)


def _cell(value) -> str:
    return "–" if value is None or pd.isna(value) else f"{int(value)}"


def section(results_csv: str | Path) -> Markup:
    """'' without a fit map beside the CSV; else, per GPU, one row per model × framework config × PEFT × GPUs and
    one column per sequence length, each cell the largest micro-batch predicted to fit (– : no prediction)."""
    fits, why = beside(results_csv, FIT_MAP, {"model_name_or_path", "framework_config", "peft_method",
                                               "max_seq_len", "num_gpus", "gpu", "max_micro_batch"})
    if fits is None:
        return why
    maps = []
    keys = ["model_name_or_path", "framework_config", "peft_method", "num_gpus"]
    for gpu, rows in fits.fillna({"gpu": "this host"}).groupby("gpu", sort=True):
        lengths = sorted(rows["max_seq_len"].dropna().unique())
        body = []
        for key, group in rows.groupby(keys, sort=True, dropna=False):
            by_length = dict(zip(group["max_seq_len"], group["max_micro_batch"], strict=True))
            body.append([f"{key[0]} · {key[1]} · {key[2]} · {key[3]} GPU(s)",
                         *(_cell(by_length.get(length)) for length in lengths)])
        headers = ["model · framework · PEFT · GPUs", *(f"{int(n)} tokens" for n in lengths)]
        maps.append((str(gpu), table(headers, body, numeric=set(range(1, len(lengths) + 1)), cls="fit-map")))
    return render("fit_map.html.j2", maps=maps)
