"""Telemetry measured inside the training process, one kind per `memory_logging` mode: its callbacks, its columns.

A tracker prepares the Trainer's arguments, hands the Trainer its callbacks and, after training, gives its
columns. Adding a kind is one class and one line in TRACKERS. The harness-side kinds (the nvidia-smi / NVML
sidecar around the process) are in tunebench.telemetry.trackers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunebench.experiment.windows import StepWindows

logger = logging.getLogger(__name__)

KERNEL_ROWS = "kernels.csv.gz"  # per-kernel rows of the memory-scanned step, in the experiment folder


@dataclass
class RunFacts:
    """What a tracker may read after training: the Trainer's metrics and the row built so far."""

    train_metrics: dict[str, Any]
    row: dict[str, Any]


class ScannerTracker:
    """The scanner (scanner/): a step's memory and time by category, collectives, the attention kernel."""

    name = "scanner"

    def __init__(self, windows: StepWindows, results_dir: Path):
        from scanner import Scanner

        # The windows are already numbers (resolved once by the harness's plan): nothing is parsed again.
        # The kernel split (on a GPU: every kernel of the scanned step, its class and phase, in kernels.csv.gz) is
        # what a projection to another GPU starts from; on CPU it leaves only a note.
        self.scanner = Scanner(steps=windows.memory, time_steps=windows.timed or "off",
                               output=["stdout", str(results_dir / "scan.json")],
                               kernels=str(results_dir / KERNEL_ROWS))

    def prepare(self, sft_config) -> None:
        pass

    def callbacks(self) -> list:
        return [self.scanner]

    def columns(self, facts: RunFacts) -> dict[str, Any]:
        columns = gather_scan_metrics(self.scanner.flat_metrics())
        median = facts.row.get("steady_step_time_median")
        if median and columns.get("scan_time_source") == "time_window" and columns.get("scan_time_step"):
            # How representative the scanner's phase-timed step is of the run (an independent check).
            columns["scan_time_step_vs_median"] = columns["scan_time_step"] / median - 1
        return columns


class HuggingFaceMemoryTracker:
    """HF's TrainerMemoryTracker (`skip_memory_metrics=False`), as the reference tools report it."""

    name = "huggingface"

    def prepare(self, sft_config) -> None:
        sft_config.skip_memory_metrics = False

    def callbacks(self) -> list:
        return []

    def columns(self, facts: RunFacts) -> dict[str, Any]:
        return hf_memory_columns(facts.train_metrics)


TRACKERS = {ScannerTracker.name: ScannerTracker, HuggingFaceMemoryTracker.name: HuggingFaceMemoryTracker}


def make_trackers(modes: set[str], windows: StepWindows, results_dir: Path) -> list:
    """The in-process trackers of these `memory_logging` modes, in registry order (the scanner first: host
    work a scan does at a step end then belongs to the scanned step, not the step timer's next one)."""
    made = []
    for name, kind in TRACKERS.items():
        if name in modes:
            made.append(kind(windows, results_dir) if kind is ScannerTracker else kind())
    return made


def hf_memory_columns(metrics: dict[str, Any]) -> dict[str, int | None]:
    """The reference tool's columns from HF's TrainerMemoryTracker (skip_memory_metrics=False), in bytes:

    allocated at end of training = before_init + init_alloc_delta + train_alloc_delta
    peak during training         = that + train_peaked_delta   (HF's "peaked" is the peak above the end value)
    """
    keys = (
        "before_init_mem_gpu",
        "init_mem_gpu_alloc_delta",
        "train_mem_gpu_alloc_delta",
        "train_mem_gpu_peaked_delta",
    )
    if not all(k in metrics for k in keys):
        return {"mem_torch_mem_alloc_in_bytes": None, "mem_peak_torch_mem_alloc_in_bytes": None}
    allocated = metrics[keys[0]] + metrics[keys[1]] + metrics[keys[2]]
    return {"mem_torch_mem_alloc_in_bytes": int(allocated),
            "mem_peak_torch_mem_alloc_in_bytes": int(allocated + metrics[keys[3]])}


def gather_scan_metrics(local: dict[str, Any]) -> dict[str, Any]:
    """Every rank's scan metrics, merged on all ranks (max / min / mean per category, summed throughput)."""
    import torch.distributed as dist

    from tunebench.experiment.rank_merge import merge_rank_metrics

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return local
    per_rank: list[dict[str, Any]] = [{} for _ in range(dist.get_world_size())]
    dist.all_gather_object(per_rank, local)
    return merge_rank_metrics(per_rank)
