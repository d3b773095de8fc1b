"""A diverged run is an error row, never a number: any step whose loss is NaN or infinite fails the experiment.

Why here and not in the Trainer: transformers' `logging_nan_inf_filter` (false in defaults.yaml: it syncs the host
every micro-batch) replaces a non-finite step loss by the running mean of the finite ones, so a run whose every step
was NaN reports `train_loss` 0.0 (fms's GPTQ loader left LoRA uninitialised that way); without the filter the NaN
reaches the row. The per-step losses the harness keeps (BenchSFTTrainer.step_losses) are the raw ones, read once
after training: the check costs no step anything.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from tunebench.experiment.loss_target import COLUMNS as TARGET_COLUMNS
from tunebench.vocabulary import Status

logger = logging.getLogger(__name__)

# Every column that holds a loss, or a figure made from the losses.
LOSS_COLUMNS = ("train_loss", "train_loss_last_step", *TARGET_COLUMNS)
NONFINITE_CLASS = "nonfinite_loss"  # the failure's class, first in error_messages


def nonfinite_steps(losses: dict[int, float]) -> list[int]:
    """The steps whose loss is NaN or infinite, in order."""
    return sorted(step for step, value in losses.items() if not math.isfinite(value))


def guard(row: dict[str, Any], losses: dict[int, float], steps: int) -> dict[str, Any]:
    """The row unchanged when every recorded step loss is finite (and so is `train_loss`); else an error row: no loss
    figure, the first bad step and how many there were named. `steps`: the optimizer steps run."""
    bad = nonfinite_steps(losses)
    reported = row.get("train_loss")
    if not bad and (reported is None or math.isfinite(float(reported))):
        return row
    if bad:
        what = (f"step {bad[0]}'s loss is {losses[bad[0]]} ({len(bad)} of {steps} steps non-finite); "
                f"train_loss {reported} was {'filled in by transformers' if reported is not None else 'not'} reported")
    else:
        what = f"train_loss is {reported} while every step's loss was finite"
    message = f"{NONFINITE_CLASS}: the loss diverged: {what}. A run whose loss is not a number is not a result"
    logger.error(message)
    failed = {**row, **dict.fromkeys(LOSS_COLUMNS), "status": Status.ERROR}
    failed["error_messages"] = "; ".join(m for m in (row.get("error_messages"), message) if m)
    return failed
