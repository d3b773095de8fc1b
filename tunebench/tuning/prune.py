"""Pruning before launch: a point runs only if its predicted peak, with a margin learned from measured errors, fits."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from tunebench.planning.predict import memory_text, reserved_bytes, usable_bytes

logger = logging.getLogger(__name__)

# A taught margin is set this far past what the evidence demands: the OOMed point itself is then pruned.
_TAUGHT_EXTRA = 0.005


@dataclass(frozen=True)
class Margin:
    """Predicted peak × (1 + fraction) must stay within the usable capacity; `source` says where it came from."""

    fraction: float
    source: str


def measured_margin(rows: list[dict[str, Any]], floor_pct: float) -> Margin:
    """The least margin covering every under-prediction measured in the folder (pred_error_peak < 0), never
    below `floor_pct`; a prediction error of e = predicted / measured − 1 needs a margin of 1 / (1 + e) − 1."""
    floor = Margin(floor_pct / 100, f"--margin_pct {floor_pct:g}")
    errors = [r.get("pred_error_peak") for r in rows]
    errors = [e for e in errors if isinstance(e, (int, float)) and math.isfinite(e) and e > -1]
    if not errors:
        return floor
    needed = max(1 / (1 + e) - 1 for e in errors)
    if needed <= floor.fraction:
        return Margin(floor.fraction, f"{floor.source} (covers the {len(errors)} measured prediction error(s), "
                      f"worst {min(errors):+.2%})")
    return Margin(needed, f"the worst measured under-prediction of the peak ({min(errors):+.2%}, of "
                  f"{len(errors)} run(s))")


def verdict(prediction: dict[str, Any], margin: Margin) -> tuple[bool, str]:
    """(runs, why): runs when peak × (1 + margin) fits, or when there is nothing to judge with."""
    peak, usable = prediction.get("pred_mem_peak"), usable_bytes(prediction)
    if not isinstance(peak, (int, float)):
        return True, "no memory prediction for this model: it runs, its run decides"
    if usable is None:
        return True, "no capacity to judge against (no GPU and no --plan_device)"
    slack = reserved_bytes(prediction) - peak  # the allocator's, at the edge (planning.allocator_slack)
    needed = peak * (1 + margin.fraction) + slack
    also = f" + {memory_text(slack)} allocator slack" if slack > 0 else ""
    if needed <= usable:
        return True, (f"fits: {memory_text(peak)} predicted (+{margin.fraction:.1%}){also} of "
                      f"{memory_text(usable)} usable")
    return False, (f"predicted peak {memory_text(peak)} + {margin.fraction:.1%} margin{also} = "
                   f"{memory_text(needed)} > {memory_text(usable)} usable (margin: {margin.source})")


def taught_by_oom(margin: Margin, label: str, prediction: dict[str, Any]) -> Margin:
    """An OOM of a point predicted to fit: its real peak passed the usable capacity, so the prediction was at least
    usable / predicted − 1 short. The margin grows to cover that (never shrinks)."""
    peak, usable = prediction.get("pred_mem_peak"), usable_bytes(prediction)
    if not isinstance(peak, (int, float)) or not usable or peak <= 0:
        return margin
    usable -= reserved_bytes(prediction) - peak  # what the peak itself could use beside the allocator's slack
    needed = usable / peak - 1 + _TAUGHT_EXTRA
    if needed <= margin.fraction:
        return margin
    logger.warning("tune: %s ran out of memory at a predicted %s of %s usable: margin %.1f%% -> %.1f%%",
                   label, memory_text(peak), memory_text(usable), 100 * margin.fraction, 100 * needed)
    return Margin(needed, f"raised by the OOM of {label} (predicted {memory_text(peak)}, {memory_text(usable)} "
                  "usable)")
