"""How far a row's memory prediction was from what its run measured: the `pred_error_*` columns."""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)

ERROR_PAIRS = (  # prediction column -> measured column
    ("params", "scan_mem_params"), ("grads", "scan_mem_grads"), ("optimizer", "scan_mem_optimizer"),
    ("activations", "scan_mem_activations"), ("temporaries", "scan_mem_temporaries"),
    ("peak", "mem_peak_torch_max_allocated_bytes"),
)


def error_columns(row: dict[str, Any]) -> dict[str, float | None]:
    """`pred_error_<category>` = predicted / measured − 1, where both exist."""
    out = {}
    for name, measured in ERROR_PAIRS:
        predicted, actual = row.get(f"pred_mem_{name}"), row.get(measured)
        ok = isinstance(predicted, (int, float)) and isinstance(actual, (int, float)) and actual
        out[f"pred_error_{name}"] = predicted / actual - 1 if ok else None
    return out
