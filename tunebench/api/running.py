"""Running a matrix from Python: `tunebench.run(matrix, RunSettings(...))` is `benchmark.py`'s run, a DataFrame out.

    result = tunebench.run(matrix, tunebench.RunSettings(results_output_path="out"))
    result.frame            # every experiment of the folder, as raw_summary.csv holds them
    result.paths["raw_summary"]

The results folder is claimed and locked for the run (one harness per folder), the rows are rebuilt from the
experiment folders on disk however the run ends (an interrupted experiment as its error row), and bad input is one
InputError before anything runs. The CLI is a thin client of this module.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tunebench.api.matrix import Matrix
from tunebench.errors import InputError
from tunebench.execution.experiment_run import RunOptions
from tunebench.execution.guard import results_lock, stop_on_signals
from tunebench.execution.processes import RunSession
from tunebench.execution.runner import run_matrix
from tunebench.fileio import write_atomic
from tunebench.results import folder as results_folder
from tunebench.results import summaries
from tunebench.vocabulary import Executor

logger = logging.getLogger(__name__)


@dataclass
class RunSettings:
    """How to run a matrix: the results folder, what to reuse, the executor and trackers (each plugin's own
    settings in `plugin_settings`, e.g. LocalSettings(max_concurrent=2), RaySettings(address="auto"),
    SidecarSettings(loop_ms=50))."""

    results_output_path: str = "results"
    overwrite: bool = False  # first remove what earlier runs wrote in the folder (only what tunebench wrote)
    dry_run: bool = False  # write spec.json and command.sh per experiment, run nothing
    resume: bool = True  # reuse experiments already completed in the folder
    timeout: float | None = 3600.0  # seconds per experiment (a scenario's `timeout:` wins)
    plan: bool = False  # predict each experiment's memory and join the pred_* columns to its row
    plan_device: str | None = None  # GPU name or size to judge `fits` against (default the GPUs here)
    skip_predicted_oom: bool = False  # skip experiments predicted not to fit (implies plan)
    gpu_table: str | None = None  # a YAML of GPUs added to, or overriding, the GPU table plan_device resolves in
    executor: str = Executor.LOCAL  # by name: tunebench.execution.executors.EXECUTORS
    launcher: str | None = None  # by name, where it fits an experiment: tunebench.execution.launchers.LAUNCHERS
    trackers: tuple[str, ...] = ()  # harness trackers by name besides the always-on ones (telemetry.trackers)
    plugin_settings: tuple = ()  # the executors' and trackers' typed settings
    cpu_slots: int = 0  # CPU process slots (0: the cores)
    exclusive_timing: bool = False  # every experiment alone on its machine
    preload: bool = True  # fork one-process experiments from the preload server
    preload_models: bool = False  # load every model's config and tokenizer before the matrix
    data_processing: bool = True  # False: reuse the preprocessed-data cache (a missing entry is an InputError)
    extra_env: dict[str, str] = field(default_factory=dict)


@dataclass
class RunResult:
    """What a run wrote: every experiment of the folder (`frame`, as raw_summary.csv), this run's own rows in matrix
    order (`rows`), and the files (`paths`: folder, raw_summary, benchmarks)."""

    frame: Any  # pandas.DataFrame
    rows: list[dict[str, Any]]
    paths: dict[str, Path]


def prepare(matrix: Matrix, settings: RunSettings) -> dict[str, dict[str, Any]]:
    """Before anything launches: models and hub data resolve, data is preprocessed once, and (with plan or
    skip_predicted_oom) every experiment's prediction; InputError when something does not."""
    from tunebench.execution.hub_access import matrix_problems
    from tunebench.execution.preparation import preload_models, preprocess_data

    if not settings.dry_run or settings.preload_models or settings.plan or settings.skip_predicted_oom:
        if problems := matrix_problems(matrix.experiments, data=not (settings.dry_run or not settings.data_processing)):
            raise InputError(problems)
    if settings.preload_models:
        preload_models(matrix.experiments)
    if not settings.dry_run:
        preprocess_data(matrix.experiments, build=settings.data_processing)
    if not (settings.plan or settings.skip_predicted_oom):
        return {}
    from tunebench.api.planning import predictions

    return predictions(matrix, settings.plan_device, settings.gpu_table)


def run_options(matrix: Matrix, settings: RunSettings, predictions: dict, session: RunSession) -> RunOptions:
    """What the runner and the executors take."""
    trackers = (*settings.trackers, *(("nvidia",) if "nvidia" in matrix.options.memory_logging else ()))
    extra_env = {**settings.extra_env, **({} if settings.data_processing else {"TUNEBENCH_REQUIRE_DATA_CACHE": "1"})}
    return RunOptions(
        output_dir=Path(settings.results_output_path), accelerate_config_path=matrix.options.accelerate_config,
        timeout_seconds=settings.timeout, dry_run=settings.dry_run, resume=settings.resume,
        available_gpus=list(range(len(matrix.gpus))),  # CUDA ordinals under CUDA_DEVICE_ORDER=PCI_BUS_ID
        cpu_slots=settings.cpu_slots, exclusive_timing=settings.exclusive_timing, extra_env=extra_env,
        preload=settings.preload, launcher=settings.launcher, executor=settings.executor,
        settings=tuple(settings.plugin_settings), trackers=tuple(dict.fromkeys(trackers)), predictions=predictions,
        skip_predicted_oom=settings.skip_predicted_oom, session=session)


def run(matrix: Matrix, settings: RunSettings | None = None, session: RunSession | None = None,
        say: Callable[[str], None] | None = None) -> RunResult:
    """Run the matrix into `settings.results_output_path` and return what is on disk there. Claims and locks the
    folder; however the run ends, the CSVs hold every experiment on disk. `say` hears what the run is about to do
    (the CLI prints it; default: the log)."""
    settings = settings or RunSettings()
    predictions = prepare(matrix, settings)
    return run_prepared(matrix, settings, predictions, session or RunSession(), say)


def run_prepared(matrix: Matrix, settings: RunSettings, predictions: dict, session: RunSession,
                 say: Callable[[str], None] | None = None, locked: bool = False) -> RunResult:
    """`run` once `prepare` is done (tune prepares its batches itself and keeps one session for all of them).
    `locked`: the caller already holds the results folder's lock and turns SIGTERM/SIGHUP into HarnessStopped."""
    say = say or logger.info
    output_dir = Path(settings.results_output_path)
    experiments = matrix.experiments
    if matrix.options.repeats > 1:  # interleaved: a slow spell of the machine touches one run of many experiments
        experiments = [replace(e, repeat=k) for k in range(1, matrix.options.repeats + 1) for e in experiments]
    options = run_options(matrix, settings, predictions, session)
    if matrix.device_type == "cpu":  # before the preload server starts: its forks keep the OpenMP pool it makes
        from tunebench.execution.launchers.base import CPU_WAIT_POLICY

        os.environ.setdefault("OMP_WAIT_POLICY", CPU_WAIT_POLICY)
    guard = contextlib.nullcontext() if locked else _guarded(output_dir)
    with guard:
        if settings.overwrite and not settings.dry_run:
            removed = results_folder.remove_previous_results(output_dir)
            say(f"--overwrite: removed {removed} earlier experiment folder(s) from {output_dir}/")
        if not settings.dry_run:
            _write_pip_freeze(output_dir)
        say(f"{len(experiments)} experiment(s) on {matrix.device_type} -> {output_dir}/")
        rows, frame = _run_keeping_csvs(experiments, options, settings.dry_run)
    paths = {"folder": output_dir, "raw_summary": output_dir / results_folder.RAW_SUMMARY,
             "benchmarks": output_dir / results_folder.BENCHMARKS}
    return RunResult(frame, rows, paths)


@contextlib.contextmanager
def _guarded(output_dir: Path):
    """SIGTERM/SIGHUP as HarnessStopped (the Ctrl-C path) and the folder claimed and locked for the run."""
    with stop_on_signals(), results_lock(output_dir):
        yield


def _run_keeping_csvs(experiments: list, options: RunOptions, dry_run: bool) -> tuple[list[dict[str, Any]], Any]:
    """(this run's rows, every row on disk): run_matrix, with the CSVs rebuilt from disk however it ends (Ctrl-C, SIGTERM/SIGHUP, an executor error:
    the interrupted experiments as error rows); a failure to write them never hides the cause."""
    order = [e.folder_name for e in experiments]
    try:
        rows = run_matrix(experiments, options)
    except BaseException:
        if not dry_run:
            try:
                summaries.write_summaries(options.output_dir, order)
            except OSError as exc:
                logger.error("could not rebuild the CSVs in %s: %s", options.output_dir, exc)
        raise
    if dry_run:
        return rows, summaries.collect(rows)
    return rows, summaries.write_summaries(options.output_dir, order)


def _write_pip_freeze(output_dir: Path) -> None:
    """The installed distributions, as `pip freeze` lists them (read from metadata: no subprocess)."""
    from importlib.metadata import distributions

    names = sorted({f"{d.metadata['Name']}=={d.version}" for d in distributions() if d.metadata["Name"]},
                   key=str.lower)
    write_atomic(output_dir / "pip-freeze.txt", "\n".join(names) + "\n")
