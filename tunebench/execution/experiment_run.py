"""One experiment, start to row: its folder, command.sh and config.json, the launch, the sidecar, the row."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tunebench.execution.failures import classify
from tunebench.execution.launch import build_launch, command_script, run_process, stop_reason
from tunebench.fileio import ensure_inside, write_atomic
from tunebench.matrix.expansion import Experiment
from tunebench.results import summaries as results
from tunebench.telemetry.steady_energy import steady_energy_columns

logger = logging.getLogger(__name__)


@dataclass
class RunOptions:
    output_dir: Path
    accelerate_config_path: str | None = None
    timeout_seconds: float | None = 3600.0
    dry_run: bool = False
    resume: bool = True
    available_gpus: list[int] = field(default_factory=list)
    log_nvidia_smi: bool = False
    nvidia_smi_loop_ms: int = 100
    nvidia_smi_backend: str = "nvidia-smi"
    extra_env: dict[str, str] = field(default_factory=dict)
    preload: bool = True  # fork single-process experiments from the preload server (execution/preload.py)
    executor: str = "local"  # local | ray
    max_concurrent: int = 1  # local executor: experiments side by side on disjoint GPU/slot sets
    cpu_slots: int = 0  # CPU: process slots to pack onto (0 = the machine's cores)
    exclusive_timing: bool = False  # every experiment alone on the machine
    ray_address: str | None = None
    ray_connect_timeout: float = 30.0  # seconds to wait for the cluster at ray_address
    ray_transfer: str = "object"  # object (folders come back through Ray) | shared (a shared filesystem)
    predictions: dict[str, dict[str, Any]] = field(default_factory=dict)  # experiment_id → pred_* columns
    skip_predicted_oom: bool = False


def cpu_slots(options: RunOptions) -> int:
    """Process slots of a CPU matrix: --cpu_slots, else the machine's cores."""
    return options.cpu_slots or os.cpu_count() or 1


def skip_reason(experiment: Experiment, available_gpus: int, slots: int | None = None) -> str | None:
    fc = experiment.framework_config
    if experiment.device_type == "cpu" and slots is not None and experiment.num_gpus > slots:
        return (f"needs {experiment.num_gpus} processes, this machine has {slots} CPU slot(s) (--cpu_slots raises "
                "the count on purpose)")
    if experiment.num_gpus < fc.min_gpus:
        return f"framework config {fc.name!r} needs at least {fc.min_gpus} processes, experiment has {experiment.num_gpus}"
    if experiment.device_type == "cpu" and "fsdp" in experiment.arguments and experiment.arguments["fsdp"]:
        return "FSDP through accelerate needs GPUs (on CPU the Trainer would silently run DDP instead)"
    if experiment.device_type == "cuda" and experiment.num_gpus > available_gpus:
        return f"needs {experiment.num_gpus} GPU(s), this machine has {available_gpus}"
    return None


def base_row(experiment: Experiment, options: RunOptions | None = None) -> dict[str, Any]:
    """Arguments, identity and (when planned) the memory prediction: what every row has, failed ones too."""
    predicted = options.predictions.get(experiment.experiment_id, {}) if options is not None else {}
    return {**results.flatten_arguments(experiment.arguments), **predicted, **experiment.describe()}


def reusable_row(folder: Path, experiment_id: str) -> dict[str, Any] | None:
    row = results.read_row(folder)
    if row and row.get("status") == "ok" and row.get("experiment_id") == experiment_id:
        return row
    return None


def _clear_previous_attempt(folder: Path) -> None:
    """Only files this harness writes, inside the experiment's own folder, are removed. The logs go too: they are
    opened for writing next, and a link planted in their place would be written through."""
    for pattern in ("results.json", "steps.json", "error_rank*.json", "scan*.json", "nvidia_smi*.csv",
                    "nvidia_smi.csv.partial", "stdout.log", "stderr.log"):
        for path in folder.glob(pattern):
            path.unlink()
    shutil.rmtree(folder / "trainer_output", ignore_errors=True)


def _sidecar(experiment: Experiment, gpu_ids: list[int], folder: Path, options: RunOptions):
    if not (options.log_nvidia_smi and experiment.device_type == "cuda"):
        return contextlib.nullcontext(None)
    from tunebench.telemetry.gpus import query_gpus, resolve_visible_gpus
    from tunebench.telemetry.sidecar import NvidiaSmiSidecar

    try:
        gpus = resolve_visible_gpus(",".join(map(str, gpu_ids)), query_gpus())
    except ValueError as exc:  # the sidecar is an observer: it never stops the matrix
        logger.warning("nvidia-smi sidecar disabled for %s: %s", folder.name, exc)
        return contextlib.nullcontext(None)
    return NvidiaSmiSidecar(gpus, folder, loop_ms=options.nvidia_smi_loop_ms, backend=options.nvidia_smi_backend)


def run_one(experiment: Experiment, gpu_ids: list[int], options: RunOptions) -> dict[str, Any]:
    folder = options.output_dir / experiment.folder_name
    row = base_row(experiment, options)
    try:
        ensure_inside(options.output_dir, folder)
    except ValueError as exc:  # a link planted in the results folder: nothing is written through it
        return {**row, "status": "error", "error_messages": f"not run: its folder {exc}"}
    if options.dry_run and (folder / results.RESULTS_FILE).exists():
        # A finished (or failed) experiment's files describe the run that produced them: a dry run never
        # rewrites them (its command.sh may name another interpreter).
        return {**row, "status": "dry_run", "error_messages": "already run: its files were left as they are"}
    folder.mkdir(parents=True, exist_ok=True)
    spec = build_launch(experiment, folder, gpu_ids, options.accelerate_config_path, options.extra_env)
    write_atomic(folder / "command.sh", command_script(spec))
    (folder / "command.sh").chmod(0o755)
    write_atomic(folder / "config.json", json.dumps({
        **experiment.describe(), "framework_config_arguments": experiment.framework_config.arguments,
        "arguments": experiment.arguments, "argv": spec.argv}, indent=2, default=str))
    if options.dry_run:
        return {**row, "status": "dry_run"}
    _clear_previous_attempt(folder)
    with _sidecar(experiment, gpu_ids, folder, options) as sidecar:
        outcome = run_process(spec, folder / "stdout.log", folder / "stderr.log", options.timeout_seconds,
                              preload=options.preload)
    produced = results.read_row(folder)
    stopped_by = stop_reason()
    if outcome.returncode == 0 and produced and produced.get("status") == "ok" and not outcome.timed_out:
        row.update(produced)
    elif stopped_by:
        row["status"] = "error"
        row["error_messages"] = (f"interrupted: tunebench was stopped by {stopped_by} while this experiment ran "
                                 "(its process group was killed); it runs again on resume")
    else:
        stderr_text = (folder / "stderr.log").read_text(errors="replace")
        row["status"], row["error_messages"] = classify(outcome.returncode, outcome.timed_out, stderr_text, folder)
    row["experiment_wall_seconds"] = round(outcome.wall_seconds, 3)
    row["experiment_start_unix"] = outcome.started_unix
    row["experiment_end_unix"] = outcome.started_unix + outcome.wall_seconds
    row["startup_preloaded"] = bool(options.preload and spec.entry_argv is not None)
    if row.get("process_start_unix"):
        # launcher (accelerate/torchrun) start-up before the training entry's own process began
        row["startup_launcher_seconds"] = max(0.0, row["process_start_unix"] - outcome.started_unix)
    if sidecar is not None:
        row.update(sidecar.summary(nonpad_tokens=row.get("train_nonpad_tokens")))
        row.update(steady_energy_columns(sidecar, folder))
    if row.get("pred_mem_peak") is not None:
        from tunebench.planning.predict import error_columns

        row.update(error_columns(row))
    row.update(experiment.describe())  # identity columns win over anything the child wrote
    results.write_row(folder, row, root=options.output_dir)
    return row
