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


# Categories that scale with the tokens of the scanned micro-batch (the others are set by the model and optimizer)
TOKEN_BOUND = ("activations", "temporaries")


def error_columns(row: dict[str, Any]) -> dict[str, float | None | str]:
    """`pred_error_<category>` = predicted / measured − 1, where both exist; `pred_note` says why one is empty."""
    out: dict[str, float | None | str] = {}
    unlike = _unlike_tokens(row)
    for name, measured in ERROR_PAIRS:
        predicted, actual = row.get(f"pred_mem_{name}"), row.get(measured)
        ok = isinstance(predicted, (int, float)) and isinstance(actual, (int, float)) and actual
        out[f"pred_error_{name}"] = predicted / actual - 1 if ok and not (unlike and name in TOKEN_BOUND) else None
    if unlike:  # beside what the prediction itself noted
        out["pred_note"] = "; ".join(n for n in (row.get("pred_note"), unlike) if isinstance(n, str) and n)
    return out


def _unlike_tokens(row: dict[str, Any]) -> str | None:
    """Packed (padding-free) rows hold as many tokens as their sequences fill, different at every step; the
    prediction is for full rows, the most a micro-batch can hold. Only a scanned step that was full compares."""
    if not (_true(row.get("packing")) and _true(row.get("padding_free"))):
        return None
    try:
        full = int(row["per_device_train_batch_size"]) * int(row["max_seq_len"])
        scanned = int(row["scan_tokens"]) // max(1, int(row.get("scan_micro_batches") or 1))
    except (KeyError, TypeError, ValueError):
        return None
    if scanned == full:
        return None
    return (f"packed rows: predicted for full rows ({full} tokens a micro-batch, the most it can hold); the scanned"
            f" step held {scanned}, so its activations and temporaries do not compare")


def _true(value: Any) -> bool:
    return value is True or str(value).strip().lower() == "true"
