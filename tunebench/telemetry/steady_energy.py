"""Energy of the steady window only: the sidecar's power samples integrated between the steady steps' ends.

`energy_joules` integrates the whole experiment (process start, model build, warm-up, the end); a figure per
token of training must not carry those. The training entry writes each step's wall-clock end (steps.json,
from CUDA events anchored at one sync); the window runs from the end of the step before the first steady
step to the end of the last steady step, and its non-padding tokens are those of every step inside it.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

STEPS_FILE = "steps.json"


def steady_window(steps: list[dict[str, Any]]) -> tuple[float, float, int] | None:
    """(start_unix, end_unix, nonpad tokens inside) of the span of steady steps; None without steady steps."""
    steady = [s for s in steps if s.get("steady")]
    if not steady:
        return None
    first, last = steady[0], steady[-1]
    start = first["end_unix"] - first["seconds"]
    inside = [s for s in steps if first["step"] <= s["step"] <= last["step"]]
    return start, last["end_unix"], sum(int(s.get("nonpad_tokens", 0)) for s in inside)


def read_steps(folder: Path) -> list[dict[str, Any]]:
    try:
        return json.loads((folder / STEPS_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return []


def steady_energy_columns(sidecar, folder: Path) -> dict[str, float | None]:
    """`steady_energy_joules` and `steady_energy_joules_per_nonpad_token` (None when not measurable)."""
    empty = {"steady_energy_joules": None, "steady_energy_joules_per_nonpad_token": None}
    window = steady_window(read_steps(folder))
    if window is None:
        return empty
    start, end, nonpad = window
    joules = sidecar.summary(nonpad_tokens=nonpad, energy_window=(start, end)).get("energy_joules")
    if joules is None:
        logger.info("%s: too few power samples in the steady window (%.2f s) for an energy figure", folder.name, end - start)
        return empty
    return {"steady_energy_joules": joules, "steady_energy_joules_per_nonpad_token": joules / nonpad if nonpad else None}
