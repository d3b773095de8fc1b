"""One experiment, start to row: its folder, spec.json and command.sh, the launch, the sidecar, the row."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tunebench.execution.failures import classify
from tunebench.execution.launchers import Rendezvous, choose, command_script
from tunebench.execution.processes import run_process, stop_reason
from tunebench.experiment import acceleration
from tunebench.experiment.kernel_checks import attention_mismatch
from tunebench.experiment.spec import SPEC_FILE, ExperimentSpec
from tunebench.fileio import ensure_inside, write_atomic
from tunebench.readback import read_tail
from tunebench.results import summaries as results
from tunebench.results.prediction_errors import error_columns
from tunebench.telemetry.trackers import NvidiaSidecarTracker, SidecarSettings

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
    slurm_partition: str | None = None  # sbatch --partition (None: the cluster's default)
    slurm_account: str | None = None  # sbatch --account
    slurm_time_limit: float | None = None  # minutes per job (None: from timeout_seconds, with room to start)
    slurm_extra: dict[str, str] = field(default_factory=dict)  # further sbatch arguments, KEY → VALUE
    slurm_cluster: str = "slurm"  # submitit's cluster: slurm, or local (jobs on this machine: the tests' stand-in)
    # Set by a multi-node executor on each node of an experiment that spans machines: this node's part of it.
    node: Rendezvous | None = None
    predictions: dict[str, dict[str, Any]] = field(default_factory=dict)  # experiment_id → pred_* columns
    skip_predicted_oom: bool = False


def cpu_slots(options: RunOptions) -> int:
    """Process slots of a CPU matrix: --cpu_slots, else the machine's cores."""
    return options.cpu_slots or os.cpu_count() or 1


def skip_reason(experiment: ExperimentSpec, available_gpus: int | None, slots: int | None = None) -> str | None:
    """Why an experiment cannot run; `available_gpus` / `slots` None: the machine's size is not the limit (a
    cluster executor places it)."""
    fc = experiment.framework_config
    if experiment.device_type == "cpu" and slots is not None and experiment.num_gpus > slots:
        return (f"needs {experiment.num_gpus} processes, this machine has {slots} CPU slot(s) (--cpu_slots raises "
                "the count on purpose)")
    if experiment.num_gpus < fc.min_gpus:
        return f"framework config {fc.name!r} needs at least {fc.min_gpus} processes, experiment has {experiment.num_gpus}"
    if experiment.device_type == "cpu" and "fsdp" in experiment.arguments and experiment.arguments["fsdp"]:
        return "FSDP through accelerate needs GPUs (on CPU the Trainer would silently run DDP instead)"
    if experiment.device_type == "cuda" and available_gpus is not None and experiment.num_gpus > available_gpus:
        return f"needs {experiment.num_gpus} GPU(s), this machine has {available_gpus}"
    return acceleration.skip_reason(experiment.entry, experiment.model_name_or_path)


def time_limit(experiment: ExperimentSpec, options: RunOptions) -> float | None:
    """Seconds this experiment may run: its scenario's `timeout:`, else --timeout (None: no limit)."""
    return experiment.timeout if experiment.timeout is not None else options.timeout_seconds


def base_row(experiment: ExperimentSpec, options: RunOptions | None = None) -> dict[str, Any]:
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


def _harness_trackers(options: RunOptions) -> list:
    """The harness-side telemetry the options ask for (tunebench.telemetry.trackers)."""
    from tunebench.telemetry.environment_summary import SteadyEnvironmentTracker
    from tunebench.telemetry.host_load import HostLoadTracker

    # always: what else ran on the host and its GPUs is part of every measurement
    trackers: list = [HostLoadTracker(), SteadyEnvironmentTracker()]
    if options.log_nvidia_smi:
        trackers.append(NvidiaSidecarTracker(SidecarSettings(options.nvidia_smi_backend, options.nvidia_smi_loop_ms)))
    return trackers


def node_folder(experiment_folder: Path, node_rank: int) -> Path:
    """Where node `node_rank` of an experiment spanning machines keeps its spec, command, logs and ranks' files:
    node 0 (global rank 0, which writes results.json) the experiment folder, every other node a folder of its own
    inside it, so that nodes writing into one shared folder never overwrite each other's logs."""
    return experiment_folder if node_rank == 0 else experiment_folder / "nodes" / str(node_rank)


def run_one(experiment: ExperimentSpec, gpu_ids: list[int], options: RunOptions) -> dict[str, Any]:
    """Prepare the folder, launch, wait, and return the row; the caller (the runner) writes it, once. With
    `options.node`, this node's part of an experiment that spans machines."""
    node = options.node
    folder = node_folder(options.output_dir / experiment.folder_name, node.node_rank if node else 0)
    # Only global rank 0 writes results.json: the other nodes succeed by their processes exiting 0.
    follower = node is not None and node.node_rank > 0
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
    launcher = choose(experiment, options.preload, options.accelerate_config_path, node)
    command = launcher.command(experiment, folder / SPEC_FILE, gpu_ids, options.extra_env)
    experiment.write(folder, command.argv)
    write_atomic(folder / "command.sh", command_script(command))
    (folder / "command.sh").chmod(0o755)
    if options.dry_run:
        return {**row, "status": "dry_run"}
    _clear_previous_attempt(folder)
    with contextlib.ExitStack() as stack:
        watching = [(tracker, stack.enter_context(tracker.around(experiment.device_type, gpu_ids, folder)))
                    for tracker in _harness_trackers(options)]
        outcome = run_process(launcher, command, folder / "stdout.log", folder / "stderr.log",
                              time_limit(experiment, options))
    produced = results.read_row(folder, required=())  # the entry's row: the identity is the harness's to add
    stopped_by = stop_reason()
    if outcome.returncode == 0 and produced and produced.get("status") == "ok" and not outcome.timed_out:
        row.update(produced)
    elif follower and outcome.returncode == 0 and not outcome.timed_out and not stopped_by:
        row["status"] = "ok"
    elif stopped_by:
        row["status"] = "error"
        row["error_messages"] = (f"interrupted: tunebench was stopped by {stopped_by} while this experiment ran "
                                 "(its process group was killed); it runs again on resume")
    else:
        stderr_text = read_tail(folder / "stderr.log")  # the cause is at the end; the log may be huge
        row["status"], row["error_messages"] = classify(outcome.returncode, outcome.timed_out, stderr_text, folder)
    row["experiment_wall_seconds"] = round(outcome.wall_seconds, 3)
    row["experiment_start_unix"] = outcome.started_unix
    row["experiment_end_unix"] = outcome.started_unix + outcome.wall_seconds
    # a forked entry that had to start a new interpreter (the server held CUDA) says so in its own row
    row["startup_preloaded"] = launcher.name == "forkserver" and row.get("startup_preloaded") is not False
    if row.get("process_start_unix"):
        # launcher (accelerate/torchrun) start-up before the training entry's own process began
        row["startup_launcher_seconds"] = max(0.0, row["process_start_unix"] - outcome.started_unix)
    for tracker, handle in watching:
        row.update(tracker.columns(handle, row, folder))
    if row.get("pred_mem_peak") is not None:
        row.update(error_columns(row))
        mismatch = attention_mismatch(row.get("pred_attention"), row.get("scan_attention_backend"))
        if mismatch:
            row["measurement_warning"] = "; ".join(w for w in (row.get("measurement_warning"), mismatch) if w)
    return row
