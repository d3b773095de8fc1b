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
import dataclasses
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tunebench.api.checks import argument_problem, checked_field, field_problems, raise_problems, short
from tunebench.api.matrix import Matrix, MatrixOptions
from tunebench.api.planning import plan_device_problem
from tunebench.api.words import api_words
from tunebench.bounds import SECONDS, Range
from tunebench.errors import InputError, InputProblem
from tunebench.execution.executors import EXECUTORS
from tunebench.execution.experiment_run import RunOptions
from tunebench.execution.launchers import LAUNCHERS
from tunebench.execution.processes import RunSession
from tunebench.execution.progress import shown_to_stderr
from tunebench.execution.runner import run_matrix
from tunebench.fileio import write_atomic
from tunebench.lifetime.stop_signals import stop_on_signals
from tunebench.results import folder as results_folder
from tunebench.results import summaries
from tunebench.results.folder import results_lock
from tunebench.telemetry.trackers import TRACKERS
from tunebench.vocabulary import Executor

logger = logging.getLogger(__name__)


@dataclass
class RunSettings:
    """How to run a matrix: the results folder, what to reuse, the executor and trackers (each plugin's own
    settings in `plugin_settings`, e.g. LocalSettings(max_concurrent=2), RaySettings(address="auto"),
    SidecarSettings(loop_ms=50)). Each field's type, range and choices are checked by `problems` when a run
    starts (the command line checks the same)."""

    # the results folder: new, empty, or one tunebench wrote
    results_output_path: str | os.PathLike = checked_field("--results_output_path", default="results",
                                                           example="'results'")
    # first remove what earlier runs wrote in the folder (only what tunebench wrote)
    overwrite: bool = checked_field("--overwrite", default=False)
    dry_run: bool = checked_field("--dry_run", default=False)  # write spec.json and command.sh, run nothing
    resume: bool = checked_field(default=True)  # reuse experiments already completed in the folder
    # seconds per experiment (a scenario's `timeout:` wins); None: no limit
    timeout: float | None = checked_field("--timeout", SECONDS, default=3600.0, example="600")
    plan: bool = checked_field("--plan", default=False)  # predict each experiment's memory: the pred_* columns
    # a GPU name or a size to judge `fits` against (default: the GPUs here)
    plan_device: str | None = checked_field("--plan_device", default=None, example="'80GiB'")
    # skip experiments predicted not to fit (implies plan)
    skip_predicted_oom: bool = checked_field("--skip_predicted_oom", default=False)
    # a YAML of GPUs added to, or overriding, the GPU table plan_device resolves in
    gpu_table: str | None = checked_field("--gpu_table", default=None, example="'my-gpus.yaml'")
    # by name: tunebench.execution.executors.EXECUTORS
    executor: str = checked_field("--executor", choices=EXECUTORS.names, default=Executor.LOCAL, example="'local'")
    # by name, where it fits an experiment: tunebench.execution.launchers.LAUNCHERS
    launcher: str | None = checked_field("--launcher", choices=LAUNCHERS.names, default=None, example="'python'")
    # harness trackers by name besides the always-on ones (telemetry.trackers)
    trackers: tuple[str, ...] = checked_field("--trackers", choices=TRACKERS.names, default=(),
                                              example="('nvidia',)")
    # the executors' and trackers' typed settings
    plugin_settings: tuple = checked_field(default=(), example="(LocalSettings(max_concurrent=2),)")
    cpu_slots: int = checked_field("--cpu_slots", Range(0, 4096), default=0, example="4")  # CPU slots (0: cores)
    exclusive_timing: bool = checked_field("--exclusive_timing", default=False)  # every experiment alone
    preload: bool = checked_field(default=True)  # fork one-process experiments from the preload server
    # load every model's config and tokenizer before the matrix
    preload_models: bool = checked_field("--preload_models", default=False)
    # False: reuse the preprocessed-data cache (a missing entry is an InputError)
    data_processing: bool = checked_field(default=True)
    extra_env: dict[str, str] = checked_field(default_factory=dict, example="{'HF_HUB_OFFLINE': '1'}")

    def problems(self) -> list[InputProblem]:
        """Every field of the wrong type, out of its range or naming no plugin, and every plugin settings object's
        own fields, each named `RunSettings: field` (`<its class>: field`)."""
        problems = field_problems(self)
        if any(p.key == "plugin_settings" for p in problems):
            return problems
        for settings in self.plugin_settings:
            if not dataclasses.is_dataclass(settings) or isinstance(settings, type):
                problems.append(InputProblem("RunSettings", "plugin_settings", f"{short(settings)} is no plugin's "
                                             "settings", "give instances of the plugins' Settings classes, e.g. "
                                             "LocalSettings(max_concurrent=2)"))
            else:
                problems += field_problems(settings)
        if not any(p.key == "plan_device" for p in problems) and (why := plan_device_problem(
                self.plan_device, gpu_table=self.gpu_table if isinstance(self.gpu_table, str) else None)):
            problems.append(InputProblem("RunSettings", "plan_device", why, "e.g. plan_device='80GiB'"))
        if not any(p.key == "extra_env" for p in problems):  # what an environment can hold (os.execve's rules)
            bad = [k for k, v in self.extra_env.items() if not k or "=" in k or "\0" in k or "\0" in v]
            if bad:
                problems.append(InputProblem("RunSettings", "extra_env", f"{short(bad[0])} cannot be an environment "
                                             "variable (empty, or holding '=' or a NUL)", "e.g. extra_env={'HF_HUB_"
                                             "OFFLINE': '1'}"))
        return problems


@dataclass
class RunResult:
    """What a run wrote: every experiment of the folder (`frame`, as raw_summary.csv; the key columns and metrics
    always there, empty where no row has them), this run's own rows in matrix order (`rows`), and the files
    (`paths`: folder, raw_summary, benchmarks)."""

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
        available_gpus=list(matrix.gpu_slots),  # CUDA ordinals under CUDA_DEVICE_ORDER=PCI_BUS_ID
        cpu_slots=settings.cpu_slots, exclusive_timing=settings.exclusive_timing, extra_env=extra_env,
        preload=settings.preload, launcher=settings.launcher, executor=settings.executor,
        settings=tuple(settings.plugin_settings), trackers=tuple(dict.fromkeys(trackers)), predictions=predictions,
        skip_predicted_oom=settings.skip_predicted_oom, session=session)


def run(matrix: Matrix, settings: RunSettings | None = None, session: RunSession | None = None,
        say: Callable[[str], None] | None = None) -> RunResult:
    """Run the matrix into `settings.results_output_path` and return what is on disk there. Claims and locks the
    folder; however the run ends, the CSVs hold every experiment on disk. `say` hears what the run is about to do
    (the CLI prints it; default: the log). What is wrong with the arguments is one InputError in their names."""
    raise_problems([argument_problem("run", "matrix", matrix, Matrix, "build it with tunebench.Matrix.from_yaml(...) "
                                     "or tunebench.Matrix.from_scenarios(...)"),
                    argument_problem("run", "settings", settings, RunSettings | None,
                                     "e.g. tunebench.run(matrix, tunebench.RunSettings(results_output_path='out'))")])
    settings = settings or RunSettings()
    raise_problems(settings.problems())
    with api_words((MatrixOptions, "MatrixOptions"), (RunSettings, "RunSettings")), shown_to_stderr():
        return run_checked(matrix, settings, session, say)


def run_checked(matrix: Matrix, settings: RunSettings, session: RunSession | None = None,
                say: Callable[[str], None] | None = None) -> RunResult:
    """`run` once its arguments are checked, its problems in the command line's words (the CLI's)."""
    raise_problems(results_folder.check(str(settings.results_output_path)) + executor_problems(settings))
    predictions = prepare(matrix, settings)
    return run_prepared(matrix, settings, predictions, session or RunSession(), say)


def executor_problems(settings: RunSettings) -> list[InputProblem]:
    """The executor and the plugins named, loaded (one that raises or exits while imported is named) and, unless
    it is a dry run, the executor's optional dependencies installed."""
    from tunebench.execution.executors import executor_class, make_executor

    try:
        for name in settings.trackers:
            TRACKERS.load(name)
        if settings.launcher:
            LAUNCHERS.load(settings.launcher)
        make_executor(settings.executor) if not settings.dry_run else executor_class(settings.executor)
    except InputError as exc:
        return list(exc.problems)
    return []


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
    return RunResult(summaries.with_key_columns(frame), rows, paths)


@contextlib.contextmanager
def _guarded(output_dir: Path):
    """SIGTERM/SIGHUP as HarnessStopped (the Ctrl-C path) and the folder claimed and locked for the run."""
    with stop_on_signals(), results_lock(output_dir):
        yield


def _run_keeping_csvs(experiments: list, options: RunOptions, dry_run: bool) -> tuple[list[dict[str, Any]], Any]:
    """(this run's rows, every row on disk): run_matrix, with the CSVs rebuilt from disk however it ends (Ctrl-C,
    SIGTERM/SIGHUP, an executor error: the interrupted experiments as error rows); a failure to write them never hides
    the cause."""
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
