"""Throughput columns of a run: the steady-state figures from per-step times and tokens, MFU and HFU.

What the steady figures cover: the optimizer steps after `steady_warmup_steps`, minus the memory-scanned step(s)
and the step after them (see windows.py); tokens are global (all ranks) and per step. Tokens per second are
the mean tokens of a steady step divided by the median steady step time; MFU divides the mean model FLOPs of
a steady step the same way; HFU adds the FLOPs that gradient checkpointing recomputes.
"""

from __future__ import annotations

import logging
import statistics
from typing import Any

from tunebench.experiment.flops import mfu, recompute_flops, training_flops, utilisation_problem
from tunebench.experiment.steady import SteadyPolicy, summarize
from tunebench.experiment.step_timer import StepTime

logger = logging.getLogger(__name__)


def steady_columns(step_times: list[StepTime], token_steps: list[dict[str, int]], model, world: int,
                   device_name: str | None, policy: SteadyPolicy, excluded: set[int]) -> dict[str, Any]:
    """The `steady_*` columns, `measurement_warning` and `first_step_seconds`."""
    seconds = [s.seconds for s in step_times]
    summary = summarize(seconds, policy, excluded)
    row: dict[str, Any] = {
        "total_steps": len(seconds),
        "first_step_seconds": seconds[0] if seconds else None,
        "steady_warmup_steps": policy.warmup_steps,
        "steady_steps": summary.count,
        "steady_step_time_median": summary.median,
        "steady_step_time_p10": summary.p10,
        "steady_step_time_p90": summary.p90,
        "steady_step_time_cv": summary.cv,
        "steady_step_time_robust_cv": summary.robust_cv,
        "steady_step_time_ci_pct": summary.ci_pct,
    }
    median = summary.median
    if median and len(token_steps) >= len(seconds) and summary.steps:
        steady = [token_steps[s - 1] for s in summary.steps]
        padded = statistics.fmean(t["padded_tokens"] for t in steady)
        nonpad = statistics.fmean(t["nonpad_tokens"] for t in steady)
        sum_sq = statistics.fmean(t["sum_squared_lengths"] for t in steady)
        model_flops = training_flops(model, nonpad, sum_sq)
        hardware_flops = model_flops + recompute_flops(model, nonpad, sum_sq)
        row.update({
            "steady_tokens_per_second": padded / median,
            "steady_nonpad_tokens_per_second": nonpad / median,
            "steady_nonpad_tokens_per_second_per_device": nonpad / median / world,
            "steady_padding_fraction": 1 - nonpad / padded if padded else None,
            "steady_mfu": mfu(model_flops, median, world, device_name),
            "steady_hfu": mfu(hardware_flops, median, world, device_name),
        })
    warnings = list(summary.warnings)
    impossible = utilisation_problem(row.get("steady_mfu"), row.get("steady_hfu"))
    if impossible:  # never print an impossible figure as if it were measured
        warnings.append(impossible)
        row["steady_mfu"] = row["steady_hfu"] = None
    row["measurement_warning"] = "; ".join(warnings)
    return row


def steps_record(step_times: list[StepTime], token_steps: list[dict[str, int]], steady: set[int],
                 losses: dict[int, float] | None = None) -> list[dict]:
    """steps.json: one entry per optimizer step (time, wall-clock end, tokens, whether it is steady, its loss)."""
    out = []
    losses = losses or {}
    for i, timing in enumerate(step_times):
        tokens = token_steps[i] if i < len(token_steps) else {}
        out.append({"step": timing.step, "seconds": timing.seconds, "end_unix": timing.end_unix,
                    "steady": timing.step in steady, "loss": losses.get(timing.step), **tokens})
    return out
