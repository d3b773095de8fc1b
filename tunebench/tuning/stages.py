"""How each stage of the search measures, and whether a run measured as steadily as its stage asks."""

from __future__ import annotations

import logging
import math
from typing import Any

from tunebench.experiment.steady import SteadyPolicy
from tunebench.vocabulary import Status

logger = logging.getLogger(__name__)

SCREEN, CONFIRM, GRID = "screen", "confirm", "grid"
# How each stage measures (docs/guides/tune.md). Screening: a short auto run, enough to rank (±2 % at 95 %);
# confirming: the harness's standard window, to ±1 %.
STAGE_ARGUMENTS: dict[str, dict[str, Any]] = {
    "space": {},
    GRID: {},  # --grid: the harness's standard measurement (defaults.yaml: 30 fixed steps, 25 steady)
    SCREEN: {"steady_state": "auto", "steady_warmup_steps": 3, "steady_min_steps": 8,
             "steady_target_ci_pct": 2.0, "max_steps": 24},
    CONFIRM: {"steady_state": "auto", "steady_warmup_steps": 5, "steady_min_steps": 10,
              "steady_target_ci_pct": 1.0, "max_steps": 60},
}
# The step-time spread a run may have (the experiment's own measurement_warning judges the same limit; it is
# judged here too for rows written before that column existed).
MAX_SPREAD = SteadyPolicy().max_cv


def finite_number(value: Any) -> float | None:
    """A row's cell as a finite float, else None (absent, empty, text, NaN, inf)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def noise(row: dict[str, Any] | None, stage: str) -> str:
    """'' when an ok run's figures are as steady as its stage asks; else why not, in one line: the run's own
    measurement warning, a step-time spread beyond the limit, or a 95 % interval wider than the stage's target."""
    if not row or row.get("status") != Status.OK:
        return ""
    reasons = []
    warning = row.get("measurement_warning")
    if isinstance(warning, str) and warning.strip():
        reasons.append(f"measurement warning: {warning.strip()}")
    spread = finite_number(row.get("steady_step_time_robust_cv"))
    if spread is not None and spread > MAX_SPREAD and not reasons:
        reasons.append(f"step-time spread {spread:.1%} beyond {MAX_SPREAD:.0%}")
    ci = finite_number(row.get("steady_step_time_ci_pct"))
    target = STAGE_ARGUMENTS.get(stage, {}).get("steady_target_ci_pct")
    if ci is None:
        reasons.append("no 95 % interval of the step time (too few steady steps)")
    elif target is not None and ci > target:
        reasons.append(f"95 % interval ±{ci:.1f} % beyond the {stage} target ±{target:g} %")
    return "; ".join(reasons)
