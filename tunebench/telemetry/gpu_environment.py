"""What else shared an experiment's GPUs and host while it ran: sampled by the harness every second into
environment.json.

Each sample holds, for the experiment's GPUs, the processes on them (`nvidia-smi --query-compute-apps`: the
experiment's own processes are the harness's descendants), SM and memory clocks, the active clock event
(throttle) reasons, temperature and power cap; and the host's 1-minute load average and CPU frequency governor.
The summary over the steady window is tunebench.telemetry.environment_summary.

An observer that never stops or slows an experiment: the sampling runs in a daemon thread of the harness, every
nvidia-smi call has a time limit, a field this driver does not know is dropped once (its column stays empty, the
reason is in `environment_note`), and a query that fails or hangs twice in a row is given up for the run.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from tunebench.fileio import write_atomic

logger = logging.getLogger(__name__)

SAMPLES_FILE = "environment.json"
INTERVAL_S = 1.0
QUERY_TIMEOUT_S = 5.0
MAX_FAILURES = 2  # consecutive failures or hangs of one query before it is given up for the run
# Each quantity with the nvidia-smi fields that give it, preferred first (drivers rename fields: R535 renamed
# clocks_throttle_reasons to clocks_event_reasons).
GPU_FIELDS: dict[str, tuple[str, ...]] = {
    "uuid": ("uuid",),
    "memory_used_mib": ("memory.used",),
    "utilization_pct": ("utilization.gpu",),
    "sm_clock_mhz": ("clocks.sm",),
    "sm_clock_max_mhz": ("clocks.max.sm",),
    "mem_clock_mhz": ("clocks.mem",),
    "clock_event_reasons": ("clocks_event_reasons.active", "clocks_throttle_reasons.active"),
    "temperature_c": ("temperature.gpu",),
    "power_limit_w": ("power.limit", "enforced.power.limit"),
}
APP_FIELDS = ("pid", "gpu_uuid", "used_memory", "process_name")  # the name last: it may hold commas
GOVERNOR_GLOB = "/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor"


def nvidia_smi(args: list[str], timeout_s: float | None = None) -> tuple[str | None, str]:
    """(stdout, '') of one nvidia-smi call, or (None, why it gave nothing)."""
    from tunebench.telemetry.gpus import nvidia_smi_path

    timeout_s = QUERY_TIMEOUT_S if timeout_s is None else timeout_s
    exe = nvidia_smi_path()
    if exe is None:
        return None, "nvidia-smi not found on PATH"
    try:
        proc = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout_s, check=False,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, f"nvidia-smi {args[0]} hung for more than {timeout_s:g} s"
    except OSError as exc:
        return None, f"nvidia-smi could not start ({exc})"
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        return None, f"nvidia-smi {args[0]} exited {proc.returncode}: {lines[-1] if lines else ''}"
    return proc.stdout, ""


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:  # "[N/A]", "[Not Supported]", hex masks are read where they are expected
        return None


def own_processes(root: int) -> set[int]:
    """`root` and every live process below it (the harness: its experiments, their ranks and launchers)."""
    children: dict[int, list[int]] = {}
    for process in psutil.process_iter():
        try:
            children.setdefault(process.ppid(), []).append(process.pid)
        except psutil.Error:  # gone since the listing
            continue
    found, pending = {root}, [root]
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in found:
                found.add(child)
                pending.append(child)
    return found


def _process_exists(pid: int) -> bool:
    return psutil.pid_exists(pid)


def cpu_governors() -> str | None:
    """The CPU frequency governors in use ('performance', or 'performance+powersave' when mixed); None when
    unreadable (containers and VMs often hide cpufreq)."""
    import glob

    found = set()
    for path in glob.glob(GOVERNOR_GLOB):
        try:
            found.add(Path(path).read_text().strip())
        except OSError:
            continue
    return "+".join(sorted(found)) if found else None


def cpu_model() -> str | None:
    """The host's CPU model name (/proc/cpuinfo); None where unreadable (not Linux). Read by hand: psutil has no
    CPU model name."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return " ".join(value.split())
    except OSError:
        return None
    return None


class GpuQuery:
    """The nvidia-smi queries of one experiment's GPUs, with the field names this driver accepts."""

    def __init__(self, uuids: list[str]):
        self.uuids = list(uuids)
        self.fields: dict[str, str] = {}  # quantity -> the field used
        self.notes: list[str] = []
        self.failures = {"gpu": 0, "apps": 0}

    def probe(self) -> bool:
        """Choose the fields: all preferred ones at once, else each quantity alone. False: nvidia-smi unusable."""
        preferred = {q: names[0] for q, names in GPU_FIELDS.items()}
        out, why = self._query(list(preferred.values()))
        if out is not None:
            self.fields = preferred
            return True
        if "hung" in why or "not found" in why or "could not start" in why:
            self.notes.append(why)
            return False
        for quantity, names in GPU_FIELDS.items():
            usable = next((name for name in names if self._query([name])[0] is not None), None)
            if usable is None:
                self.notes.append(f"no {quantity} ({' / '.join(names)} not supported by this nvidia-smi)")
            else:
                self.fields[quantity] = usable
        return "uuid" in self.fields

    def _argv(self, fields: list[str]) -> list[str]:
        return [f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits", "-i", ",".join(self.uuids)]

    def _query(self, fields: list[str]) -> tuple[str | None, str]:
        return nvidia_smi(self._argv(fields))

    def _give_up(self, kind: str, why: str) -> None:
        self.failures[kind] += 1
        if self.failures[kind] == MAX_FAILURES:
            self.notes.append(f"{why} ({MAX_FAILURES} times in a row: given up for this run)")

    def _lines(self, kind: str, argv: list[str], width: int) -> list[list[str]] | None:
        """The cells of each CSV line nvidia-smi answers `argv` with (lines of another width left out); None when
        it does not answer (MAX_FAILURES times in a row: given up for this kind of query)."""
        if self.failures[kind] >= MAX_FAILURES:
            return None
        out, why = nvidia_smi(argv)
        if out is None:
            self._give_up(kind, why)
            return None
        self.failures[kind] = 0
        cells = ([c.strip() for c in line.split(",", width - 1)] for line in filter(str.strip, out.splitlines()))
        return [row for row in cells if len(row) == width]

    def gpus(self) -> list[dict[str, Any]] | None:
        if not self.fields:
            return None
        names = list(self.fields)
        lines = self._lines("gpu", self._argv([self.fields[q] for q in names]), len(names))
        if lines is None:
            return None
        return [{quantity: cell if quantity in ("uuid", "clock_event_reasons") else _number(cell)
                 for quantity, cell in zip(names, cells, strict=True)} for cells in lines]

    def apps(self) -> list[dict[str, Any]] | None:
        argv = [f"--query-compute-apps={','.join(APP_FIELDS)}", "--format=csv,noheader,nounits"]
        lines = self._lines("apps", argv, len(APP_FIELDS))
        if lines is None:
            return None
        apps = []
        for cells in lines:
            if cells[1] not in self.uuids:
                continue  # another GPU's process
            pid = _number(cells[0])
            apps.append({"pid": int(pid) if pid is not None else None, "gpu_uuid": cells[1],
                         "used_mib": _number(cells[2]), "name": cells[3]})
        return apps


class EnvironmentWatch:
    """Context manager: a snapshot before the experiment, then a sample every INTERVAL_S until it ends; the
    samples go to `<folder>/environment.json` (always written, with the reasons for anything missing)."""

    def __init__(self, folder: Path, uuids: list[str] | None, interval_s: float = INTERVAL_S):
        self.folder, self.interval_s = Path(folder), interval_s
        self.query = GpuQuery(uuids) if uuids else None
        self.samples: list[dict[str, Any]] = []
        self.before: dict[str, Any] | None = None
        self.cores = os.cpu_count() or 1
        self.harness_pid = os.getpid()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="environment-watch", daemon=True)

    def _sample(self) -> dict[str, Any]:
        sample: dict[str, Any] = {"t": time.time()}
        try:
            sample["load1"] = os.getloadavg()[0]
        except OSError:
            sample["load1"] = None
        sample["governor"] = cpu_governors()
        if self.query is not None:
            sample["gpus"] = self.query.gpus()
            apps = self.query.apps()
            if apps is not None:
                own = own_processes(self.harness_pid)
                for app in apps:  # None: a pid of another PID namespace (a container), neither ours nor known
                    pid = app["pid"]
                    app["own"] = True if pid in own else (False if pid is not None and _process_exists(pid) else None)
            sample["apps"] = apps
        return sample

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.samples.append(self._sample())
            except Exception as exc:  # an observer: a bug here must never reach the experiment
                logger.warning("environment sample failed: %s", exc, exc_info=True)

    def __enter__(self) -> EnvironmentWatch:
        try:
            if self.query is not None and not self.query.probe():
                self.query.notes.append("GPU fields unavailable: GPU environment columns are empty")
                self.query.fields = {}
            self.before = self._sample()
        except Exception as exc:
            logger.warning("environment snapshot failed: %s", exc, exc_info=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=2 * QUERY_TIMEOUT_S + self.interval_s)
        try:
            self.samples.append(self._sample())
        except Exception as exc:
            logger.warning("environment sample failed: %s", exc, exc_info=True)
        self.write()

    def notes(self) -> list[str]:
        return list(self.query.notes) if self.query is not None else []

    def write(self) -> None:
        import json

        payload = {"version": 1, "cores": self.cores, "cpu_model": cpu_model(), "harness_pid": self.harness_pid,
                   "interval_s": self.interval_s,
                   "uuids": self.query.uuids if self.query else [], "fields": self.query.fields if self.query else {},
                   "notes": self.notes(), "before": self.before, "samples": list(self.samples)}
        try:
            write_atomic(self.folder / SAMPLES_FILE, json.dumps(payload, default=str))
        except OSError as exc:
            logger.warning("could not write %s: %s", self.folder / SAMPLES_FILE, exc)
