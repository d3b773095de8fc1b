"""Declarations of the columns that say where and beside what an experiment ran (read by
tunebench.results.columns.registry).

Plain tuples (name, unit, meaning), so that the registry module stays the one place that builds Column objects.
The steady-window columns come from tunebench.telemetry.environment_summary: the harness samples the experiment's
GPUs and host every second (`<experiment>/environment.json`) and summarises the samples inside its steady window.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

SECTION = "Environment during the steady window"

RUN_ENVIRONMENT = (
    ("cuda_version", "-", "CUDA version torch was built with (`torch.version.cuda`; empty for a CPU build)"),
    ("host_name", "-", "host name of the machine that ran the experiment"),
)

STEADY_ENVIRONMENT = (
    ("gpu_other_processes", "count", "most processes other than the experiment's own seen at once on its GPUs "
     "(`nvidia-smi --query-compute-apps`; its own: the harness's descendants). Above 0: a `GPU shared with another "
     "process` measurement warning"),
    ("gpu_other_process_names", "-", "those processes: `name (pid, GiB)`"),
    ("gpu_other_memory_mib", "MiB", "most GPU memory those processes held at once"),
    ("gpu_processes_before", "count", "processes on the experiment's GPUs just before it started"),
    ("gpu_memory_used_before_mib", "MiB", "memory in use on the experiment's GPUs just before it started"),
    ("gpu_sm_clock_mhz", "MHz", "median SM clock (`clocks.sm`)"),
    ("gpu_sm_clock_max_mhz", "MHz", "the GPU's maximum SM clock (`clocks.max.sm`)"),
    ("gpu_mem_clock_mhz", "MHz", "median memory clock (`clocks.mem`)"),
    ("gpu_clock_event_reasons", "-", "clock event (throttle) reasons active in any sample: `sw_power_cap`, "
     "`hw_slowdown`, `sw_thermal_slowdown`, `hw_thermal_slowdown`, `hw_power_brake_slowdown`, `sync_boost`, … "
     "(`none`; idle and application-clock settings are not causes and are left out)"),
    ("gpu_temperature_max_c", "°C", "highest GPU temperature"),
    ("gpu_power_limit_w", "W", "power cap (`power.limit`, else `enforced.power.limit`)"),
    ("host_load_per_core", "fraction", "highest 1-minute load average ÷ logical CPUs; above 1 on a GPU run: a `host "
     "loaded` measurement warning"),
    ("cpu_governor", "-", "CPU frequency governor(s) (`performance`, `powersave`, …; empty where cpufreq is hidden)"),
    ("gpu_uuids", "-", "the experiment's GPUs by UUID (nvidia-smi), `+`-joined: another physical GPU of the same kind "
     "is a cause `compare` and `history check` name"),
    ("host_cpu_model", "-", "the host's CPU (`/proc/cpuinfo` model name): hosts of one name (a VM's `vm`) told "
     "apart; a host-bound step's speed is the host's"),
    ("environment_samples", "count", "samples inside the steady window (one a second; the nearest one for a "
     "shorter window)"),
    ("environment_note", "-", "why a column above is empty (a field this nvidia-smi lacks, a query that failed or "
     "hung, no steady window)"),
)
