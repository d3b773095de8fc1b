"""Energy of the steady window only: the sidecar's power samples integrated between the steady steps' ends.

`energy_joules` integrates the whole experiment (process start, model build, warm-up, the end); a figure per
token of training must not carry those. The training entry writes each step's wall-clock end (steps.json,
from CUDA events anchored at one sync); the window runs from the end of the step before the first steady
step to the end of the last steady step, and its non-padding tokens are those of every step inside it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from tunebench.readback import Unreadable, load_json

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
    """The step records of a folder's steps.json; [] (with a warning naming the file) when it is unusable."""
    path = folder / STEPS_FILE
    try:
        steps = load_json(path, list)
    except FileNotFoundError:
        return []
    except (OSError, Unreadable) as exc:
        logger.warning("%s: no steady energy for this experiment", exc)
        return []
    for i, step in enumerate(steps):
        bad = next((k for k in ("step", "end_unix", "seconds", "nonpad_tokens") if not isinstance(step, dict)
                    or not isinstance(step.get(k, 0), (int, float)) or isinstance(step.get(k), bool)), None)
        if bad:
            logger.warning("%s: [%d].%s: expected a number: no steady energy for this experiment", path, i, bad)
            return []
    return steps


def steady_energy_columns(sidecar, folder: Path) -> dict[str, float | None]:
    """`steady_energy_joules` and `steady_energy_joules_per_nonpad_token` (None when not measurable)."""
    empty = {"steady_energy_joules": None, "steady_energy_joules_per_nonpad_token": None}
    window = steady_window(read_steps(folder))
    if window is None:
        return empty
    start, end, nonpad = window
    joules = sidecar.summary(nonpad_tokens=nonpad, energy_window=(start, end)).get("energy_joules")
    if joules is None:
        logger.info(
            "%s: too few power samples in the steady window (%.2f s) for an energy figure", folder.name, end - start
        )
        return empty
    return {
        "steady_energy_joules": joules,
        "steady_energy_joules_per_nonpad_token": joules / nonpad if nonpad else None,
    }
