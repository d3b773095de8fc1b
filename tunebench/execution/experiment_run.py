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
from tunebench.execution.launchers import LAUNCHERS, Rendezvous, choose, chosen, command_script
from tunebench.execution.processes import RunSession, run_process
from tunebench.experiment import acceleration
from tunebench.experiment.kernel_checks import attention_mismatch
from tunebench.experiment.sharding import fsdp_of
from tunebench.experiment.spec import SPEC_FILE, ExperimentSpec
from tunebench.fileio import ensure_inside, write_atomic
from tunebench.planning.prediction_errors import error_columns
from tunebench.readback import read_tail
from tunebench.results import summaries as results
from tunebench.telemetry.trackers import TRACKERS, harness_trackers
from tunebench.vocabulary import Executor, Status

logger = logging.getLogger(__name__)


@dataclass
class RunOptions:
    """What the runner and the executors take: the run's own settings, the executor chosen by name with its typed
    settings (each plugin owns its options: LocalSettings, RaySettings, SlurmSettings), the harness trackers by
    name with theirs, and the session that knows the run's processes."""

    output_dir: Path
    accelerate_config_path: str | None = None
    timeout_seconds: float | None = 3600.0
    dry_run: bool = False
    resume: bool = True
    available_gpus: list[int | str] = field(default_factory=list)  # CUDA_VISIBLE_DEVICES entries
    cpu_slots: int = 0  # CPU: process slots to pack onto (0 = the machine's cores)
    exclusive_timing: bool = False  # every experiment alone on its machine
    extra_env: dict[str, str] = field(default_factory=dict)
    preload: bool = True  # fork single-process experiments from the preload server (execution/preload.py)
    launcher: str | None = None  # a launcher by name (execution.launchers.LAUNCHERS); None: chosen per experiment
    executor: str = Executor.LOCAL  # by name (execution.executors.EXECUTORS)
    # The executors' and trackers' own settings, by type (LocalSettings(max_concurrent=2), SidecarSettings(...));
    # a plugin whose settings are not here runs with its defaults.
    settings: tuple = ()
    trackers: tuple[str, ...] = ()  # harness trackers by name (telemetry.trackers.TRACKERS) besides the always-on
    # Set by a multi-node executor on each node of an experiment that spans machines: this node's part of it.
    node: Rendezvous | None = None
    predictions: dict[str, dict[str, Any]] = field(default_factory=dict)  # experiment_id → pred_* columns
    skip_predicted_oom: bool = False
    session: RunSession = field(default_factory=RunSession, repr=False, compare=False)

    def settings_of(self, settings_class: type):
        """This run's settings of that type, else its defaults."""
        return next((s for s in self.settings if isinstance(s, settings_class)), None) or settings_class()

    def __getstate__(self) -> dict:
        # Ray and Slurm ship the options to other processes: the session (locks, live processes) stays here.
        return {**self.__dict__, "session": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update({**state, "session": RunSession()})


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
        return (
            f"framework config {fc.name!r} needs at least {fc.min_gpus} processes, experiment has {experiment.num_gpus}"
        )
    if experiment.device_type == "cpu" and fsdp_of(experiment.entry.get("training", {})) is not None:
        return "FSDP through accelerate needs GPUs (on CPU the Trainer would silently run DDP instead)"
    if experiment.device_type == "cuda" and available_gpus is not None and experiment.num_gpus > available_gpus:
        return f"needs {experiment.num_gpus} GPU(s), this machine has {available_gpus}"
    return acceleration.skip_reason(experiment.entry, experiment.model_name_or_path, experiment.device_type)


def time_limit(experiment: ExperimentSpec, options: RunOptions) -> float | None:
    """Seconds this experiment may run: its scenario's `timeout:`, else --timeout (None: no limit)."""
    return experiment.timeout if experiment.timeout is not None else options.timeout_seconds


def base_row(experiment: ExperimentSpec, options: RunOptions | None = None) -> dict[str, Any]:
    """Arguments, identity and (when planned) the memory prediction: what every row has, failed ones too."""
    predicted = options.predictions.get(experiment.experiment_id, {}) if options is not None else {}
    return {**results.flatten_arguments(experiment.arguments), **predicted, **experiment.describe()}


def reusable_row(folder: Path, experiment_id: str) -> dict[str, Any] | None:
    row = results.read_row(folder)
    if row and row.get("status") == Status.OK and row.get("experiment_id") == experiment_id:
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


def node_folder(experiment_folder: Path, node_rank: int) -> Path:
    """Where node `node_rank` of an experiment spanning machines keeps its spec, command, logs and ranks' files:
    node 0 (global rank 0, which writes results.json) the experiment folder, every other node a folder of its own
    inside it, so that nodes writing into one shared folder never overwrite each other's logs."""
    return experiment_folder if node_rank == 0 else experiment_folder / "nodes" / str(node_rank)


# A dry run's note on an experiment whose folder already holds a run: its files (command.sh too) left as they are.
ALREADY_RUN = "already run: its files were left as they are"


def _launch_watched(experiment: ExperimentSpec, launcher: tuple[str, Any], command, gpu_ids: list[int],
                    folder: Path, options: RunOptions):
    """(the process's outcome, [(tracker name, tracker, its handle)]): the experiment launched and waited for,
    its harness trackers around it; a plugin that fails in any of this is a PluginError naming it."""
    name, made = launcher
    with contextlib.ExitStack() as stack:
        watching = [(tracker_name, tracker, stack.enter_context(TRACKERS.entered(
            tracker_name, "around an experiment", tracker.around(experiment.device_type, gpu_ids, folder))))
            for tracker_name, tracker in harness_trackers(options.trackers, options.settings_of)]
        outcome = run_process(made, command, folder / "stdout.log", folder / "stderr.log",
                              time_limit(experiment, options), options.session,
                              LAUNCHERS.blame(name, "to start an experiment"))
    return outcome, watching


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
        return {**row, "status": Status.ERROR, "error_messages": f"not run: its folder {exc}"}
    if options.dry_run and (folder / results.RESULTS_FILE).exists():
        # A finished (or failed) experiment's files describe the run that produced them: a dry run never
        # rewrites them (its command.sh may name another interpreter).
        return {**row, "status": Status.DRY_RUN, "error_messages": ALREADY_RUN}
    folder.mkdir(parents=True, exist_ok=True)
    launcher_name = chosen(experiment, options, node)
    launcher = choose(experiment, options, node)
    with LAUNCHERS.blame(launcher_name, "to prepare an experiment's command"):
        command = launcher.command(experiment, folder / SPEC_FILE, gpu_ids, options.extra_env)
    experiment.write(folder, command.argv)
    write_atomic(folder / "command.sh", command_script(command))
    (folder / "command.sh").chmod(0o755)
    if options.dry_run:
        return {**row, "status": Status.DRY_RUN}
    _clear_previous_attempt(folder)
    outcome, watching = _launch_watched(experiment, (launcher_name, launcher), command, gpu_ids, folder, options)
    produced = results.read_row(folder, required=())  # the entry's row: the identity is the harness's to add
    stopped_by = options.session.stop_reason
    if outcome.returncode == 0 and produced and produced.get("status") in (Status.OK, Status.ERROR) \
            and not outcome.timed_out:
        row.update(produced)  # an ERROR here is the entry's own verdict on a run that finished (a diverged loss)
    elif follower and outcome.returncode == 0 and not outcome.timed_out and not stopped_by:
        row["status"] = Status.OK
    elif stopped_by:
        row["status"] = Status.ERROR
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
    for name, tracker, handle in watching:
        with TRACKERS.blame(name, "to give its columns"):
            row.update(tracker.columns(handle, row, folder))
    if row.get("pred_mem_peak") is not None:
        row.update(error_columns(row))
        mismatch = attention_mismatch(row.get("pred_attention"), row.get("scan_attention_backend"))
        if mismatch:
            row["measurement_warning"] = "; ".join(w for w in (row.get("measurement_warning"), mismatch) if w)
    return row
