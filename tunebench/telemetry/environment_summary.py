"""The environment of an experiment's steady window, from its environment.json: columns, warnings, and what moved.

`steady_environment_columns` reads the samples taken during the steady window (steps.json gives it) and names
what else used the experiment's GPUs and host; `explain` compares two groups of rows (a reference and a new
run, or two regimes of a history) and names what moved between them; `problems` names what was wrong in one
group by itself ("why unstable"). compare and history both use them. Column meanings: docs/reference/columns.md.
"""

from __future__ import annotations

import logging
import math
import statistics
from pathlib import Path
from typing import Any

from tunebench.readback import Unreadable, load_json
from tunebench.telemetry.gpu_environment import SAMPLES_FILE
from tunebench.telemetry.steady_energy import read_steps, steady_window

logger = logging.getLogger(__name__)

# Bits of nvidia-smi's clocks_event_reasons.active (nvml.h's nvmlClocksEventReason*). Idle and the application
# clock setting are the normal state of a GPU, not a cause.
REASON_BITS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal_slowdown",
               0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting"}
COLUMNS = ("gpu_other_processes", "gpu_other_process_names", "gpu_other_memory_mib", "gpu_processes_before",
           "gpu_memory_used_before_mib", "gpu_sm_clock_mhz", "gpu_sm_clock_max_mhz", "gpu_mem_clock_mhz",
           "gpu_clock_event_reasons", "gpu_temperature_max_c", "gpu_power_limit_w", "host_load_per_core",
           "cpu_governor", "environment_samples", "environment_note")
CLOCK_MOVE = 0.03  # a clock that moved more than 3 % between two groups is named
TEMPERATURE_MOVE_C = 10.0
LOAD_MOVE = 0.5  # load per core
# Memory in use on the GPU before an experiment starts: a few MiB on an idle GPU; another process's context and
# tensors are hundreds. It names a co-tenant where nvidia-smi lists no processes (some containers).
MEMORY_BEFORE_MOVE_MIB = 256.0


def decode_reasons(mask: str | None) -> set[str] | None:
    """'0x0000000000000024' -> {'sw_power_cap', 'sw_thermal_slowdown'}; None when not a mask."""
    try:
        value = int(str(mask).strip(), 16)
    except (TypeError, ValueError):
        return None
    return {name for bit, name in REASON_BITS.items() if value & bit}


def _in_window(samples: list[dict], window: tuple[float, float] | None, interval: float) -> list[dict]:
    """The samples inside the window; for a window shorter than the interval, the one nearest its middle."""
    if window is None:
        return samples
    start, end = window
    inside = [s for s in samples if start <= s.get("t", -1) <= end]
    if inside or not samples:
        return inside
    middle = (start + end) / 2
    nearest = min(samples, key=lambda s: abs(s.get("t", 0) - middle))
    return [nearest] if abs(nearest.get("t", 0) - middle) <= 2 * interval + (end - start) / 2 else []


def _others(apps: list[dict], uuids: list[str]) -> list[dict]:
    """The processes on the experiment's GPUs that are not its own. When none is recognised as its own, nvidia-smi's
    pids belong to another PID namespace (a container): each GPU then holds one process of the experiment, taken
    to be its largest, and the rest are others."""
    if any(a.get("own") for a in apps):
        return [a for a in apps if not a.get("own")]
    others = []
    for uuid in uuids:
        on_gpu = sorted((a for a in apps if a.get("gpu_uuid") == uuid), key=lambda a: -(a.get("used_mib") or 0))
        others += on_gpu[1:]
    return others


def _app_text(app: dict) -> str:
    mib = app.get("used_mib")
    size = f", {mib / 1024:.1f} GiB" if isinstance(mib, (int, float)) else ""
    return f"{Path(str(app.get('name') or '?')).name} (pid {app.get('pid')}{size})"


def _gpu_values(samples: list[dict], key: str) -> list[float]:
    return [g[key] for s in samples for g in (s.get("gpus") or []) if isinstance(g.get(key), (int, float))]


def _gpu_columns(samples: list[dict], before: dict | None, uuids: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with_apps = [s for s in samples if s.get("apps") is not None]
    if with_apps:
        per_sample = [_others(s["apps"], uuids) for s in with_apps]
        seen = {(a.get("pid"), a.get("name")): a for others in per_sample for a in others}
        out["gpu_other_processes"] = max(len(o) for o in per_sample)
        out["gpu_other_process_names"] = "; ".join(sorted(_app_text(a) for a in seen.values())) or None
        out["gpu_other_memory_mib"] = max(sum(a.get("used_mib") or 0 for a in o) for o in per_sample)
    if before and before.get("apps") is not None:
        out["gpu_processes_before"] = len(before["apps"])
    if before and before.get("gpus"):
        out["gpu_memory_used_before_mib"] = sum(g.get("memory_used_mib") or 0 for g in before["gpus"])
    for column, key, pick in (("gpu_sm_clock_mhz", "sm_clock_mhz", statistics.median),
                              ("gpu_sm_clock_max_mhz", "sm_clock_max_mhz", max),
                              ("gpu_mem_clock_mhz", "mem_clock_mhz", statistics.median),
                              ("gpu_temperature_max_c", "temperature_c", max),
                              ("gpu_power_limit_w", "power_limit_w", min)):
        values = _gpu_values(samples, key)
        if values:
            out[column] = pick(values)
    masks = [decode_reasons(g.get("clock_event_reasons")) for s in samples for g in (s.get("gpus") or [])]
    masks = [m for m in masks if m is not None]
    if masks:
        out["gpu_clock_event_reasons"] = "+".join(sorted(set().union(*masks))) or "none"
    return out


def summarize(payload: dict, window: tuple[float, float] | None) -> dict[str, Any]:
    """The columns of one experiment from its environment.json payload and its steady window (None: whole run)."""
    out: dict[str, Any] = dict.fromkeys(COLUMNS)
    samples = _in_window(payload.get("samples") or [], window, float(payload.get("interval_s") or 1.0))
    notes = list(payload.get("notes") or [])
    if window is None:
        notes.append("no steady window: the whole run's samples")
    out["environment_samples"] = len(samples)
    if payload.get("uuids"):
        out.update(_gpu_columns(samples, payload.get("before"), list(payload["uuids"])))
        out["gpu_uuids"] = "+".join(payload["uuids"])
    out["host_cpu_model"] = payload.get("cpu_model") or None
    loads = [s["load1"] for s in samples if isinstance(s.get("load1"), (int, float))]
    if loads:
        out["host_load_per_core"] = round(max(loads) / max(int(payload.get("cores") or 1), 1), 3)
    governors = sorted({s["governor"] for s in samples if s.get("governor")})
    out["cpu_governor"] = "+".join(governors) if governors else None
    if not governors:
        notes.append("CPU governor unreadable (no cpufreq here)")
    out["environment_note"] = "; ".join(notes) or None
    return out


def warnings_for(columns: dict[str, Any], device_type: str) -> list[str]:
    """Measurement warnings: a GPU shared with another process; a GPU run's host loaded beyond its cores."""
    found = []
    if columns.get("gpu_other_processes"):
        found.append(f"GPU shared with another process during the steady window: {columns['gpu_other_process_names']} "
                     "(its times are not comparable)")
    load = columns.get("host_load_per_core")
    if device_type == "cuda" and isinstance(load, (int, float)) and load > 1.0:
        found.append(f"host loaded: the 1-minute load average reached {load:.2f} per core during the steady window")
    return found


def steady_environment_columns(folder: Path, row: dict[str, Any]) -> dict[str, Any]:
    """The columns and warnings of the experiment in `folder` (empty columns, with the reason, when unreadable)."""
    try:
        payload = load_json(folder / SAMPLES_FILE, dict)
    except (OSError, Unreadable) as exc:
        return {**dict.fromkeys(COLUMNS), "environment_note": f"no {SAMPLES_FILE} ({exc})"}
    window = steady_window(read_steps(folder))
    columns = summarize(payload, window[:2] if window else None)
    found = warnings_for(columns, str(row.get("device_type") or ""))
    current = row.get("measurement_warning") or ""
    found = [w for w in found if w.split(":")[0] not in current]
    if found:
        columns["measurement_warning"] = "; ".join(w for w in (current, *found) if w)
    return columns


def _number(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def group_view(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One group's environment (a run's repeats, a regime's runs): the worst of each quantity over its rows."""
    def numbers(column):
        return [v for v in (_number(r.get(column)) for r in rows) if v is not None]

    def texts(column):
        return sorted({str(r[column]) for r in rows if isinstance(r.get(column), str) and r[column]})

    view: dict[str, Any] = {"rows": len(rows)}
    for column, pick in (("gpu_other_processes", max), ("gpu_memory_used_before_mib", max),
                         ("gpu_sm_clock_mhz", statistics.median),
                         ("gpu_mem_clock_mhz", statistics.median), ("gpu_temperature_max_c", max),
                         ("gpu_power_limit_w", min), ("host_load_per_core", max)):
        values = numbers(column)
        view[column] = pick(values) if values else None
    for column in ("gpu_other_process_names", "gpu_clock_event_reasons", "cpu_governor", "gpu_uuids",
                   "host_cpu_model"):
        view[column] = "; ".join(texts(column)) or None
    return view


def problems(view: dict[str, Any]) -> list[str]:
    """What was wrong in one group by itself: another process on its GPUs, a loaded host, clocks held back."""
    found = []
    if view.get("gpu_other_processes"):
        found.append(f"GPU shared with another process: {view.get('gpu_other_process_names')}")
    elif (view.get("gpu_memory_used_before_mib") or 0) > MEMORY_BEFORE_MOVE_MIB:
        found.append(f"GPU memory held before the start ({view['gpu_memory_used_before_mib']:.0f} MiB): another "
                     "process nvidia-smi does not list here?")
    if (view.get("host_load_per_core") or 0) > 1.0:
        found.append(f"host loaded ({view['host_load_per_core']:.2f} per core)")
    reasons = view.get("gpu_clock_event_reasons")
    if reasons and any(r in reasons for r in ("thermal", "hw_slowdown", "power_brake")):
        found.append(f"GPU clocks held back ({reasons})")
    return found


def _moved(a, b, fraction: float) -> bool:
    return a is not None and b is not None and abs(b - a) > fraction * max(abs(a), 1e-9)


def _reasons(text: str | None) -> set[str] | None:
    """The clock event reasons a group saw ("a+b; c" → {a, b, c}, "none" → ∅); None when not read."""
    if text is None:
        return None
    return {r.strip() for part in text.split(";") for r in part.split("+") if r.strip() and r.strip() != "none"}


def explain(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What moved in the environment from one group to another, each as 'quantity before → after'."""
    found = []
    others = [int(view.get("gpu_other_processes") or 0) for view in (before, after)]
    if others[0] != others[1]:
        found.append(f"other processes on the GPU {others[0]} → {others[1]}"
                     + (f" ({after['gpu_other_process_names']})" if after.get("gpu_other_process_names") else ""))
    m0, m1 = before.get("gpu_memory_used_before_mib"), after.get("gpu_memory_used_before_mib")
    if m0 is not None and m1 is not None and abs(m1 - m0) > MEMORY_BEFORE_MOVE_MIB:
        found.append(f"GPU memory in use before the start {m0:.0f} → {m1:.0f} MiB")
    for column, label in (("gpu_sm_clock_mhz", "SM clock"), ("gpu_mem_clock_mhz", "memory clock")):
        if _moved(before.get(column), after.get(column), CLOCK_MOVE):
            found.append(f"{label} {before[column]:.0f} → {after[column]:.0f} MHz")
    reasons = [_reasons(view.get("gpu_clock_event_reasons")) for view in (before, after)]
    # Only a reason the newer group shows and the older never did explains a move: one both saw (a power cap that
    # comes and goes on an idle H100) does not.
    if None not in reasons and reasons[1] - reasons[0]:
        found.append(f"clock event reasons {'+'.join(sorted(reasons[0])) or 'none'} → "
                     f"{'+'.join(sorted(reasons[1])) or 'none'}")
    t0, t1 = before.get("gpu_temperature_max_c"), after.get("gpu_temperature_max_c")
    if t0 is not None and t1 is not None and abs(t1 - t0) >= TEMPERATURE_MOVE_C:
        found.append(f"GPU temperature {t0:.0f} → {t1:.0f} °C")
    if _moved(before.get("gpu_power_limit_w"), after.get("gpu_power_limit_w"), 0.01):
        found.append(f"power cap {before['gpu_power_limit_w']:.0f} → {after['gpu_power_limit_w']:.0f} W")
    l0, l1 = before.get("host_load_per_core"), after.get("host_load_per_core")
    # A move of half a core per core, or from a host with cores to spare (below 0.8) to one loaded beyond them.
    if l0 is not None and l1 is not None and (abs(l1 - l0) > LOAD_MOVE or (min(l0, l1) < 0.8 < 1.0 < max(l0, l1))):
        found.append(f"host load {l0:.2f} → {l1:.2f} per core")
    governors = before.get("cpu_governor"), after.get("cpu_governor")
    if governors[0] != governors[1] and all(governors):
        found.append(f"CPU governor {before['cpu_governor']} → {after['cpu_governor']}")
    # Another machine of the same kind: a new physical GPU, or a host with another CPU (host-bound steps follow it)
    for column, label in (("gpu_uuids", "GPU"), ("host_cpu_model", "host CPU")):
        a, b = before.get(column), after.get(column)
        if a and b and not set(b.split("; ")) <= set(a.split("; ")):
            found.append(f"{label} {a} → {b}")
    return found


class SteadyEnvironmentTracker:
    """Always on: what else used the experiment's GPUs and host during its steady window (docs/reference/columns.md)."""

    name = "steady_environment"

    def around(self, device_type: str, gpu_ids: list[int], folder: Path):
        from tunebench.telemetry.gpu_environment import EnvironmentWatch

        uuids = None
        if device_type == "cuda":
            from tunebench.telemetry.gpus import query_gpus, resolve_visible_gpus

            try:
                uuids = [g.uuid for g in resolve_visible_gpus(",".join(map(str, gpu_ids)), query_gpus())] or None
            except ValueError as exc:
                logger.warning("GPU environment of %s not recorded: %s", folder.name, exc)
        return EnvironmentWatch(folder, uuids)

    def columns(self, watch, row: dict[str, Any], folder: Path) -> dict[str, Any]:
        try:
            return steady_environment_columns(folder, row)
        except Exception as exc:  # an observer: a bug here must not lose the row
            logger.warning("environment columns of %s failed: %s", folder.name, exc, exc_info=True)
            return {}
