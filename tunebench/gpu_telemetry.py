"""GPU identity via nvidia-smi, CUDA_VISIBLE_DEVICES mapping, and poll-log summaries (memory, util, energy)."""

from __future__ import annotations

import csv
import logging
import math
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

logger = logging.getLogger(__name__)

# What the sidecar polls, in this order. `nvidia_smi.csv` carries these names as its header line.
POLL_FIELDS: tuple[str, ...] = (
    "timestamp",
    "index",
    "uuid",
    "pci.bus_id",
    "memory.used",
    "memory.total",
    "utilization.gpu",
    "power.draw",
)
# nvidia-smi prints local wall-clock time with millisecond resolution, e.g. "2024/05/01 12:00:00.123".
NVIDIA_SMI_TIME_FORMAT = "%Y/%m/%d %H:%M:%S.%f"
# `name` goes last so that a GPU name containing a comma cannot shift the other fields.
IDENTITY_FIELDS: tuple[str, ...] = ("index", "uuid", "pci.bus_id", "memory.total", "driver_version", "name")
QUERY_TIMEOUT_S = 10.0

# The summary columns (MiB, %, J); `_gpu<i>` columns are added per experiment GPU.
MEM_MEAN_COL = "mem_nvidia_mem_reserved"
MEM_MAX_COL = "mem_nvidia_mem_reserved_max"
MEM_GPU_COL = "mem_nvidia_mem_reserved_gpu{}"
UTIL_COL = "nvidia_gpu_util_mean"
ENERGY_COL = "energy_joules"
ENERGY_PER_TOKEN_COL = "energy_joules_per_nonpad_token"
MALFORMED_COL = "nvidia_smi_malformed_lines"
SAMPLES_COL = "nvidia_smi_samples"


@dataclass(frozen=True)
class GpuInfo:
    """One physical GPU as nvidia-smi reports it."""

    index: int  # nvidia-smi's index (NVML enumeration order; not guaranteed to be CUDA's order)
    uuid: str  # "GPU-xxxxxxxx-...", stable across reboots and orderings
    pci_bus_id: str  # "00000000:07:00.0"
    name: str
    memory_total_mib: float
    driver_version: str
    mig_uuids: tuple[str, ...] = ()  # MIG instances carved out of this GPU (from `nvidia-smi -L`)


def nvidia_smi_path() -> str | None:
    """The nvidia-smi executable on PATH, or None."""
    return shutil.which("nvidia-smi")


def run_nvidia_smi(args: list[str], timeout_s: float = QUERY_TIMEOUT_S) -> str | None:
    """Run a one-shot nvidia-smi command; its stdout, or None (warning logged) if missing/failing/hanging."""
    exe = nvidia_smi_path()
    if exe is None:
        logger.warning("nvidia-smi not found on PATH: GPU memory/power columns will be empty")
        return None
    try:
        # subprocess.run kills the child on timeout and on any exception (KeyboardInterrupt included).
        proc = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        logger.warning("nvidia-smi %s hung for more than %.0f s and was killed", " ".join(args), timeout_s)
        return None
    except OSError as exc:
        logger.warning("nvidia-smi could not be started: %s", exc)
        return None
    if proc.returncode != 0:
        message = (proc.stderr or proc.stdout).strip().splitlines()
        logger.warning(
            "nvidia-smi %s failed (exit %d): %s",
            " ".join(args),
            proc.returncode,
            message[-1] if message else "",
        )
        return None
    return proc.stdout


def _float_or_nan(value: str) -> float:
    # nvidia-smi writes "[N/A]", "[Not Supported]", "[Unknown Error]" for values it cannot read.
    try:
        return float(value)
    except ValueError:
        return math.nan


_MIG_LINE = re.compile(r"^\s+MIG .*\(UUID: (MIG-[^)\s]+)\)")
_GPU_LINE = re.compile(r"^GPU \d+: .*\(UUID: (GPU-[^)\s]+)\)")


def _mig_uuids_by_gpu(listing: str) -> dict[str, tuple[str, ...]]:
    """Parse `nvidia-smi -L`: MIG lines are indented under the GPU that hosts them."""
    result: dict[str, list[str]] = {}
    current: str | None = None
    for line in listing.splitlines():
        if match := _GPU_LINE.match(line):
            current = match.group(1)
            result[current] = []
        elif (match := _MIG_LINE.match(line)) and current is not None:
            result[current].append(match.group(1))
    return {uuid: tuple(migs) for uuid, migs in result.items()}


def query_gpus(timeout_s: float = QUERY_TIMEOUT_S) -> list[GpuInfo]:
    """All GPUs nvidia-smi sees; [] (warning logged) if nvidia-smi is missing or fails."""
    out = run_nvidia_smi(
        [f"--query-gpu={','.join(IDENTITY_FIELDS)}", "--format=csv,noheader,nounits"], timeout_s=timeout_s
    )
    if out is None:
        return []
    listing = run_nvidia_smi(["-L"], timeout_s=timeout_s) or ""
    migs = _mig_uuids_by_gpu(listing)
    gpus = []
    for text_line in filter(str.strip, out.splitlines()):
        # Split at most 5 times: whatever follows the 5th comma is the name, commas included.
        row = [field.strip() for field in text_line.split(",", len(IDENTITY_FIELDS) - 1)]
        if len(row) != len(IDENTITY_FIELDS):
            logger.warning("ignoring unparseable nvidia-smi identity line: %s", text_line)
            continue
        index, uuid, bus_id, mem_total, driver, name = row
        try:
            gpus.append(
                GpuInfo(
                    index=int(index),
                    uuid=uuid,
                    pci_bus_id=bus_id,
                    name=name,
                    memory_total_mib=_float_or_nan(mem_total),
                    driver_version=driver,
                    mig_uuids=migs.get(uuid, ()),
                )
            )
        except ValueError:
            logger.warning("ignoring unparseable nvidia-smi identity line: %s", text_line)
    return gpus


def _pci_sort_key(bus_id: str) -> tuple[int, ...]:
    # "00000000:07:00.0" → (domain, bus, device, function), compared numerically (hex).
    parts = re.split(r"[:.]", bus_id)
    try:
        return tuple(int(p, 16) for p in parts)
    except ValueError:
        return (1 << 62,)


def _match_uuid_entry(entry: str, gpus: list[GpuInfo]) -> GpuInfo:
    if entry.startswith("MIG-GPU-"):  # pre-R470 form "MIG-GPU-<gpu uuid>/<gi>/<ci>"
        entry = entry[len("MIG-") :].split("/")[0]
    if entry.startswith("MIG-"):
        hosts = [g for g in gpus if entry in g.mig_uuids]
        if len(hosts) != 1:
            raise ValueError(
                f"CUDA_VISIBLE_DEVICES entry {entry!r} is not a MIG instance listed by `nvidia-smi -L`; "
                "use a UUID exactly as `nvidia-smi -L` prints it"
            )
        logger.warning(
            "%s is a MIG instance: nvidia-smi reports memory/power of the whole GPU %s (all its instances)",
            entry,
            hosts[0].uuid,
        )
        return hosts[0]
    # CUDA accepts any unique prefix of a GPU UUID.
    matches = [g for g in gpus if g.uuid.startswith(entry)]
    if len(matches) != 1:
        found = "matches several GPUs" if matches else "matches no GPU"
        raise ValueError(
            f"CUDA_VISIBLE_DEVICES entry {entry!r} {found} of {[g.uuid for g in gpus]}; "
            "set it to GPU indices or full UUIDs from `nvidia-smi -L`"
        )
    return matches[0]


def resolve_visible_gpus(
    cuda_visible_devices: str | None,
    gpus: list[GpuInfo],
    *,
    cuda_device_order: str | None = "PCI_BUS_ID",
) -> list[GpuInfo]:
    """Map a CUDA_VISIBLE_DEVICES value to nvidia-smi GPUs, in CUDA device order (cuda:0, cuda:1, ...).

    Why PCI order: integer entries are CUDA ordinals, and CUDA's default order (FASTEST_FIRST) may differ
    from nvidia-smi's. With CUDA_DEVICE_ORDER=PCI_BUS_ID (which the harness sets for every experiment) CUDA
    numbers GPUs by ascending PCI bus id, so we sort nvidia-smi's GPUs by bus id rather than trusting
    nvidia-smi's own index (NVML documents its enumeration order as not guaranteed). UUID entries
    ("GPU-...", unique prefixes, "MIG-...") are matched directly and need no ordering assumption.
    Returns [] when `gpus` is empty (nvidia-smi unavailable) or CUDA_VISIBLE_DEVICES is "".
    """
    if not gpus:
        return []
    by_pci = sorted(gpus, key=lambda g: _pci_sort_key(g.pci_bus_id))
    if cuda_visible_devices is None:
        return by_pci
    selected: list[GpuInfo] = []
    for raw in cuda_visible_devices.split(","):
        entry = raw.strip()
        if not entry:
            continue
        if re.fullmatch(r"-?\d+", entry):
            ordinal = int(entry)
            if ordinal < 0:  # CUDA semantics: a negative ordinal hides it and every later entry
                break
            if cuda_device_order not in (None, "PCI_BUS_ID") and len(gpus) > 1:
                raise ValueError(
                    f"CUDA_VISIBLE_DEVICES={cuda_visible_devices!r} uses indices under "
                    f"CUDA_DEVICE_ORDER={cuda_device_order}, whose order nvidia-smi cannot reproduce; "
                    "set CUDA_DEVICE_ORDER=PCI_BUS_ID or use GPU UUIDs"
                )
            if ordinal >= len(by_pci):
                raise ValueError(
                    f"CUDA_VISIBLE_DEVICES entry {entry!r} is out of range: nvidia-smi lists {len(by_pci)} "
                    f"GPU(s) (0..{len(by_pci) - 1})"
                )
            gpu = by_pci[ordinal]
        else:
            gpu = _match_uuid_entry(entry, gpus)
        if gpu in selected:
            raise ValueError(
                f"CUDA_VISIBLE_DEVICES={cuda_visible_devices!r} names GPU {gpu.uuid} twice; list each GPU once"
            )
        selected.append(gpu)
    return selected


@dataclass
class PollLog:
    """Parsed poll log: one row per valid (GPU, sample) line, plus how many lines were rejected."""

    frame: pd.DataFrame  # columns: POLL_FIELDS with timestamp as datetime64 and numeric columns as float
    malformed_lines: int


def parse_poll_text(text: str) -> PollLog:
    """Parse `--query-gpu=<POLL_FIELDS> --format=csv,noheader,nounits` output (header line optional)."""
    lines = text.split("\n")
    # A last line without its newline was cut mid-write when the poller was stopped: its final field may
    # be truncated ("250.12" → "25") yet still numeric, so it is rejected rather than trusted.
    partial_tail = bool(lines[-1].strip())
    candidates = [line for line in lines[:-1] if line.strip()]
    malformed = int(partial_tail)
    rows = []
    for line in candidates:
        if line.startswith(POLL_FIELDS[0]):  # header line written by the sidecar
            continue
        fields = next(csv.reader([line], skipinitialspace=True))
        if len(fields) != len(POLL_FIELDS):
            malformed += 1
            continue
        rows.append([f.strip() for f in fields])
    frame = pd.DataFrame(rows, columns=list(POLL_FIELDS), dtype=object)
    frame["timestamp"] = pd.to_datetime(frame["timestamp"], format=NVIDIA_SMI_TIME_FORMAT, errors="coerce")
    for col in POLL_FIELDS[4:]:
        frame[col] = frame[col].map(_float_or_nan).astype(float)
    frame["index"] = pd.to_numeric(frame["index"], errors="coerce")
    # Power/utilisation may legitimately be "[N/A]"; a line without time, GPU identity or memory is junk.
    valid = (
        frame["timestamp"].notna()
        & frame["index"].notna()
        & frame["uuid"].str.startswith("GPU-")
        & frame["memory.used"].notna()
    )
    malformed += int((~valid).sum())
    return PollLog(frame=frame[valid].reset_index(drop=True), malformed_lines=malformed)


def parse_poll_log(poll_csv: Path) -> PollLog:
    """Parse a poll log file written by the sidecar."""
    return parse_poll_text(Path(poll_csv).read_text(encoding="utf-8", errors="replace"))


def empty_summary(num_gpus: int) -> dict[str, float | int | None]:
    """All sidecar columns set to None (nvidia-smi missing or failed)."""
    keys = [MEM_MEAN_COL, MEM_MAX_COL, *(MEM_GPU_COL.format(i) for i in range(num_gpus))]
    keys += [UTIL_COL, ENERGY_COL, ENERGY_PER_TOKEN_COL, MALFORMED_COL, SAMPLES_COL]
    return dict.fromkeys(keys)


def _energy_joules(samples: pd.DataFrame, window: tuple[float, float] | None) -> float | None:
    """∫ power dt by the trapezoid rule on the timestamps nvidia-smi printed; None if < 2 power samples."""
    samples = samples[samples["power.draw"].notna()].sort_values("timestamp", kind="stable")
    if window is not None:
        # nvidia-smi timestamps are naive local time: compare against the window in the same clock.
        start, end = (pd.Timestamp(datetime.fromtimestamp(t)) for t in window)
        samples = samples[(samples["timestamp"] >= start) & (samples["timestamp"] <= end)]
    if len(samples) < 2:
        return None
    seconds = (samples["timestamp"] - samples["timestamp"].iloc[0]).dt.total_seconds().to_numpy()
    watts = samples["power.draw"].to_numpy()
    return float(np.sum((watts[1:] + watts[:-1]) / 2.0 * np.diff(seconds)))


def summarize_poll_log(
    poll_csv: Path,
    baseline_mib: dict[str, float],
    nonpad_tokens: int | None,
    *,
    gpu_uuids: list[str] | None = None,
    energy_window: tuple[float, float] | None = None,
) -> dict[str, float | int | None]:
    """The sidecar's CSV columns from a poll log.

    `gpu_uuids` lists the experiment's GPUs in CUDA order (default: the keys of `baseline_mib`, in
    insertion order); `mem_nvidia_mem_reserved_gpu<i>` is for gpu_uuids[i], i.e. the process's cuda:i.
    Calibrated peak per GPU = max(memory.used) − baseline (MiB, clipped at 0); `mem_nvidia_mem_reserved` is
    their mean (fms-acceleration's meaning), `_max` their max. Energy = Σ_GPUs ∫ power dt [J], optionally
    restricted to `energy_window` (unix seconds, e.g. the training loop). An aggregate is None when any of
    the experiment's GPUs lacks the data for it, so a mean is never silently over a subset.
    """
    uuids = list(baseline_mib) if gpu_uuids is None else list(gpu_uuids)
    poll = parse_poll_log(poll_csv)
    frame = poll.frame
    foreign = ~frame["uuid"].isin(uuids)
    if foreign.any():
        logger.warning(
            "%s: ignoring %d line(s) for GPUs outside the experiment", poll_csv, int(foreign.sum())
        )
        frame = frame[~foreign]
    summary = empty_summary(len(uuids))
    summary[MALFORMED_COL] = poll.malformed_lines
    summary[SAMPLES_COL] = len(frame)
    if poll.malformed_lines:
        logger.warning("%s: skipped %d malformed nvidia-smi line(s)", poll_csv, poll.malformed_lines)

    peaks: list[float | None] = []
    utils: list[float | None] = []
    energies: list[float | None] = []
    for i, uuid in enumerate(uuids):
        samples = frame[frame["uuid"] == uuid]
        if samples.empty:
            logger.warning("%s: no samples for GPU %s (cuda:%d)", poll_csv, uuid, i)
            peaks.append(None)
            utils.append(None)
            energies.append(None)
            continue
        baseline = baseline_mib.get(uuid)
        if baseline is None:
            logger.warning("%s: no baseline for GPU %s: its peak is not calibrated", poll_csv, uuid)
            baseline = 0.0
        peak = float(samples["memory.used"].max()) - float(baseline)
        if peak < 0:
            # Another process released memory during the run; the experiment cannot have used < 0.
            logger.warning(
                "%s: GPU %s peak is below its baseline by %.0f MiB; reporting 0", poll_csv, uuid, -peak
            )
            peak = 0.0
        summary[MEM_GPU_COL.format(i)] = peak
        peaks.append(peak)
        util = samples["utilization.gpu"].mean()
        utils.append(None if math.isnan(util) else float(util))
        energies.append(_energy_joules(samples, energy_window))

    if peaks and None not in peaks:
        summary[MEM_MEAN_COL] = float(np.mean(peaks))
        summary[MEM_MAX_COL] = float(np.max(peaks))
    if utils and None not in utils:
        summary[UTIL_COL] = float(np.mean(utils))
    if energies and None not in energies:
        summary[ENERGY_COL] = float(np.sum(energies))
        if nonpad_tokens:
            summary[ENERGY_PER_TOKEN_COL] = summary[ENERGY_COL] / nonpad_tokens
    return summary


def visible_gpus_from_env(gpus: list[GpuInfo] | None = None) -> list[GpuInfo]:
    """Convenience: the GPUs this process's CUDA_VISIBLE_DEVICES/CUDA_DEVICE_ORDER select."""
    return resolve_visible_gpus(
        os.environ.get("CUDA_VISIBLE_DEVICES"),
        query_gpus() if gpus is None else gpus,
        cuda_device_order=os.environ.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST"),
    )
