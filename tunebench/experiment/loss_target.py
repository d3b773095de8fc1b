"""Time to a target loss: the tokens, optimizer steps and seconds a run took to first reach it.

MLPerf's training benchmarks time to a target quality, not tokens per second: a faster step that learns less is
not faster. The target is a fraction (`loss_target_fraction`, default 0.2) of the way from the run's first-step
loss (the random-init or checkpoint loss on its first batch) to the data's entropy floor (the lowest loss any
model can reach: known for the synthetic corpora, tunebench.experiment.corpus), or a loss the user gives
(`loss_target_nats`), which is how a user's own data, whose floor nobody knows, gets the same columns.

Reached = the first optimizer step whose loss (the per-step loss of steps.json) is at or below the target.
Tokens are the non-padding tokens of steps 1..that step, all ranks. Seconds are the timed steps 1..that step
(compilation and warm-up included: they are part of getting there), except that a memory-scanned step counts
the steady median step instead of its own time, because its hooks are the harness's measuring, not training (a
compiled model is not scanned, so its row would otherwise be cheaper by the scan alone).
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)

COLUMNS = ("data_entropy_floor_nats", "data_entropy_floor_note", "loss_first_step", "loss_target",
           "loss_target_steps", "loss_target_tokens", "loss_target_seconds", "loss_target_note")


def target_loss(first_loss: float, floor: float | None, fraction: float, given: float) -> tuple[float | None, str]:
    """(the target, why there is none): `given` when positive, else `fraction` of the way to the floor."""
    if given > 0:
        return given, ""
    if floor is None:
        return None, "no target: the data's floor is unknown and loss_target_nats is not set"
    if first_loss <= floor:
        return None, f"no target: the first step's loss {first_loss:.4g} is already at the floor {floor:.4g}"
    return first_loss - fraction * (first_loss - floor), ""


def target_columns(losses: dict[int, float], seconds: dict[int, float], nonpad_tokens: dict[int, int],
                   floor: tuple[float | None, str], fraction: float, given: float,
                   scanned: set[int], steady_median: float | None) -> dict[str, Any]:
    """The columns above, from per-step losses, step seconds and tokens ({step: value}; steps from 1)."""
    floor_nats, floor_note = floor
    row: dict[str, Any] = {name: None for name in COLUMNS}
    row.update(data_entropy_floor_nats=floor_nats, data_entropy_floor_note=floor_note or None)
    if 1 not in losses:
        row["loss_target_note"] = "no loss was recorded for step 1"
        return row
    row["loss_first_step"] = losses[1]
    target, why = target_loss(losses[1], floor_nats, fraction, given)
    row["loss_target"] = target
    if target is None:
        row["loss_target_note"] = why
        return row
    reached = next((step for step in sorted(losses) if losses[step] <= target), None)
    if reached is None:
        last = max(losses)
        row["loss_target_note"] = (f"not reached in {last} steps (last loss {losses[last]:.4g} > target "
                                   f"{target:.4g})")
        return row
    steps = range(1, reached + 1)
    row["loss_target_steps"] = reached
    row["loss_target_tokens"] = sum(nonpad_tokens.get(s, 0) for s in steps) if nonpad_tokens else None
    timed = [steady_median if s in scanned and steady_median else seconds.get(s) for s in steps]
    row["loss_target_seconds"] = sum(timed) if all(t is not None for t in timed) else None
    return row
