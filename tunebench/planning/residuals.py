"""Calibrated upper bounds of the memory prediction, from its measured residuals kept as data (residuals.csv).

Every GPU evidence run that planned and measured the same experiments adds its rows: per category, the
predicted and the measured bytes (docs/evidence/common/residual_rows.py). A category's bound ratio is the largest
under-prediction measured (measured / predicted − 1, never below 0), over the rows of the GPU kind and allocator
setting the plan targets when there are any, else of the GPU kind, else of every GPU. (The allocator setting
matters: without expandable segments the measured peak holds block tails no prediction has.)
`pred_mem_<category>_upper` = the prediction × (1 + that ratio), and `fits` judges the peak's bound (allocator_slack
measures its slack over the same bound). A prediction with no residual behind it yet is its own bound: the data says
nothing else, and a bound that grows only with evidence is the point.
"""

from __future__ import annotations

import functools
import logging
import math
from pathlib import Path
from typing import Any

from tunebench.vocabulary import Status

logger = logging.getLogger(__name__)

RESIDUAL_FILE = Path(__file__).with_name("residuals.csv")
COLUMNS = ["source", "gpu_name", "cuda_alloc_conf", "experiment", "category", "predicted", "measured"]
CATEGORIES = ("params", "grads", "optimizer", "activations", "temporaries", "peak")


def residual_rows(summary, source: str):
    """(source, GPU, allocator setting, experiment, category, predicted, measured) of every ok CUDA row of a results
    table whose prediction compares with its measurement (planning.prediction_errors leaves incomparable ones
    empty). A row without `cuda_alloc_conf` ran before the harness set it: PyTorch's default allocator ("")."""
    import pandas as pd

    from tunebench.planning.prediction_errors import ERROR_PAIRS, error_columns

    measured_of = dict(ERROR_PAIRS)
    rows = []
    for record in summary.to_dict("records"):
        gpu = record.get("gpu_name")
        if record.get("status") != Status.OK or not isinstance(gpu, str) or not gpu:
            continue
        errors = error_columns(record)
        for category in CATEGORIES:
            if errors.get(f"pred_error_{category}") is None:
                continue
            conf = record.get("cuda_alloc_conf")
            rows.append({"source": source, "gpu_name": gpu, "cuda_alloc_conf": conf if isinstance(conf, str) else "",
                         "experiment": record.get("experiment_id"),
                         "category": category, "predicted": int(record[f"pred_mem_{category}"]),
                         "measured": int(record[measured_of[category]])})
    return pd.DataFrame(rows, columns=COLUMNS)


@functools.lru_cache(maxsize=16)
def bound_ratios(gpu_name: str | None = None, alloc_conf: str | None = None) -> dict[str, float]:
    """category -> the largest measured under-prediction (≥ 0) for `gpu_name` and `alloc_conf` (the experiments'
    setting by default), widening to the GPU kind, then to every row, where there are none."""
    import pandas as pd

    from tunebench.telemetry.environment import cuda_alloc_conf

    try:
        data = pd.read_csv(RESIDUAL_FILE, keep_default_na=False)
    except (OSError, ValueError) as exc:
        logger.warning("residual data %s unreadable (%s): predictions are their own bounds", RESIDUAL_FILE, exc)
        return {}
    conf = cuda_alloc_conf() if alloc_conf is None else alloc_conf
    data = data[data["predicted"] > 0]
    gpu = data[data["gpu_name"] == gpu_name]
    both = gpu[gpu["cuda_alloc_conf"] == conf]
    data = both if not both.empty else gpu if not gpu.empty else data
    ratios = (data["measured"] / data["predicted"] - 1).groupby(data["category"]).max()
    return {category: max(0.0, float(ratio)) for category, ratio in ratios.items()}


def upper(predicted: int, category: str, gpu_name: str | None = None, alloc_conf: str | None = None) -> int:
    """The bound of one predicted category, rounded up to the allocator's 512 B blocks."""
    ratio = bound_ratios(gpu_name, alloc_conf).get(category, 0.0)
    return int(math.ceil(predicted * (1 + ratio) / 512) * 512) if ratio else int(predicted)


def upper_columns(prediction: dict[str, Any], gpu_name: str | None = None) -> dict[str, int]:
    """`pred_mem_<category>_upper` for every category the prediction holds; the peak's adds what a setting whose
    figure is not exact widens it by (`pred_mem_bound_extra`, planning.accelerations)."""
    out = {f"pred_mem_{c}_upper": upper(int(prediction[f"pred_mem_{c}"]), c, gpu_name)
           for c in CATEGORIES if isinstance(prediction.get(f"pred_mem_{c}"), (int, float))}
    extra = prediction.get("pred_mem_bound_extra")
    if "pred_mem_peak_upper" in out and isinstance(extra, int):
        out["pred_mem_peak_upper"] += extra
    return out
