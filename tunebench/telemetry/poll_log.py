"""The sidecar's poll log: parsing nvidia-smi/NVML sample lines and summarising memory, utilisation and energy."""

from __future__ import annotations

import csv
import logging
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

from tunebench.telemetry.gpus import float_or_nan

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
# The summary columns (MiB, %, J); `_gpu<i>` columns are added per experiment GPU.
MEM_MEAN_COL = "mem_nvidia_mem_reserved"
MEM_MAX_COL = "mem_nvidia_mem_reserved_max"
MEM_GPU_COL = "mem_nvidia_mem_reserved_gpu{}"
UTIL_COL = "nvidia_gpu_util_mean"
ENERGY_COL = "energy_joules"
ENERGY_PER_TOKEN_COL = "energy_joules_per_nonpad_token"
MALFORMED_COL = "nvidia_smi_malformed_lines"
SAMPLES_COL = "nvidia_smi_samples"


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
        frame[col] = frame[col].map(float_or_nan).astype(float)
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
        found = _one_gpu(poll_csv, frame[frame["uuid"] == uuid], uuid, i, baseline_mib.get(uuid), energy_window)
        if found is None:
            peaks.append(None)
            utils.append(None)
            energies.append(None)
            continue
        summary[MEM_GPU_COL.format(i)] = found[0]
        peaks.append(found[0])
        utils.append(found[1])
        energies.append(found[2])

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


def _one_gpu(poll_csv: Path, samples: pd.DataFrame, uuid: str, index: int, baseline: float | None,
             energy_window: tuple[float, float] | None) -> tuple[float, float | None, float | None] | None:
    """(calibrated peak MiB, mean utilisation, energy J) of one GPU's samples; None when it has none."""
    if samples.empty:
        logger.warning("%s: no samples for GPU %s (cuda:%d)", poll_csv, uuid, index)
        return None
    if baseline is None:
        logger.warning("%s: no baseline for GPU %s: its peak is not calibrated", poll_csv, uuid)
        baseline = 0.0
    peak = float(samples["memory.used"].max()) - float(baseline)
    if peak < 0:
        # Another process released memory during the run; the experiment cannot have used < 0.
        logger.warning("%s: GPU %s peak is below its baseline by %.0f MiB; reporting 0", poll_csv, uuid, -peak)
        peak = 0.0
    util = samples["utilization.gpu"].mean()
    return peak, None if math.isnan(util) else float(util), _energy_joules(samples, energy_window)
