"""Command line of benchmark.py: read the options into the Python API's typed settings, call it, print, exit.

The command line is a thin client of tunebench.api: the options become a MatrixOptions and a RunSettings (each
plugin's options its own Settings), and the API plans, runs and writes. What is wrong with the input is one
InputError, printed a line per problem with exit code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from pathlib import Path

from tunebench.api.matrix import Matrix, MatrixOptions, build
from tunebench.api.projecting import ProjectionOptions, projection_frame
from tunebench.api.running import RunResult, RunSettings, executor_problems, run_checked
from tunebench.api.words import in_cli_words, unnamed_broken_plugins
from tunebench.cli.options import OPTION_RANGES, booleans, build_parser, numbers, split
from tunebench.cli.plugin_options import read_plugin_settings
from tunebench.command_line import option_problems
from tunebench.errors import InputError, InputProblem
from tunebench.execution.guard import HarnessStopped, results_lock
from tunebench.execution.guardian import Guardian
from tunebench.experiment.arguments import parse_memory_logging
from tunebench.fileio import write_atomic
from tunebench.plugins import PluginError
from tunebench.results import folder as results_folder
from tunebench.results import summaries as results
from tunebench.vocabulary import Executor

logger = logging.getLogger(__name__)

# Subcommands and the module whose main() runs each (imported only when used: start-up stays short).
SUBCOMMANDS = {"compare": "tunebench.cli.compare", "report": "tunebench.results.report.page",
               "tune": "tunebench.cli.tune_command", "verify": "tunebench.verify.command",
               "history": "tunebench.history.command", "bisect": "tunebench.history.bisect_command"}


def matrix_options(options: argparse.Namespace, problems: list[InputProblem]) -> MatrixOptions:
    """The matrix the command line asks for; what is wrong with its options is appended to `problems`."""
    try:
        memory_logging = parse_memory_logging(options.memory_logging)
    except ValueError as exc:
        problems.append(InputProblem("command line", "--memory_logging (or MEMORY_LOGGING)", str(exc),
                                     "e.g. --memory_logging scanner,nvidia"))
        memory_logging = set()
    memory_logging |= {"nvidia"} if options.log_nvidia_smi else set()
    memory_logging |= {"huggingface"} if options.log_memory_hf else set()
    return MatrixOptions(
        scenarios=options.scenarios_config_path, defaults=options.defaults_config_path,
        framework_configs=options.framework_configs_path, accelerate_config=options.accelerate_config,
        device=options.device, run_only_scenarios=split(options.run_only_scenarios) if options.run_only_scenarios
        else None, include_slow=options.include_slow, memory_logging=frozenset(memory_logging),
        repeats=options.repeats,
        num_gpus=numbers(options.num_gpus_matrix, "--num_gpus_matrix", problems) or [1],
        effective_batch_size=numbers(options.effective_batch_size_matrix, "--effective_batch_size_matrix", problems),
        max_seq_len=numbers(options.max_seq_len_matrix, "--max_seq_len_matrix", problems),
        packing=booleans(options.packing_matrix, problems),
        attn_implementation=split(options.attn_implementation_matrix) if options.attn_implementation_matrix else None)


def run_settings(options: argparse.Namespace, problems: list[InputProblem]) -> RunSettings:
    """How the command line asks the matrix to run, every plugin's options read into its own Settings."""
    return RunSettings(
        results_output_path=options.results_output_path, overwrite=options.overwrite, dry_run=options.dry_run,
        resume=not options.no_resume, timeout=options.timeout, plan=options.plan, plan_device=options.plan_device,
        skip_predicted_oom=options.skip_predicted_oom, gpu_table=options.gpu_table, executor=options.executor, launcher=options.launcher,
        trackers=tuple(options.trackers or ()), plugin_settings=read_plugin_settings(options, problems),
        cpu_slots=options.cpu_slots, exclusive_timing=options.exclusive_timing, preload=not options.no_preload,
        preload_models=options.preload_models, data_processing=not options.no_data_processing)


def read_command_line(options: argparse.Namespace, planning_only: bool = False) -> tuple[Matrix, RunSettings]:
    """The matrix and how to run it; InputError with every problem of the options and the files at once. A GPU
    named as --plan_device builds the matrix for CUDA where nothing runs here (`plan`, a dry run)."""
    from tunebench.api.planning import device_to_plan

    problems: list[InputProblem] = []
    matrix_settings = matrix_options(options, problems)
    try:
        matrix_settings.device = device_to_plan(matrix_settings.device, options.plan_device,
                                                not (planning_only or options.dry_run), options.gpu_table)
    except InputError as exc:
        problems += exc.problems
    settings = run_settings(options, problems)
    for broken in unnamed_broken_plugins({settings.executor, settings.launcher, *settings.trackers}):
        logger.warning("%s; its options are absent", broken)
    problems += results_folder.check(options.results_output_path)
    problems += option_problems(options, OPTION_RANGES)
    named = {p.key for p in problems}  # the run settings' own check, in the options' words, once per option
    problems += [p for p in in_cli_words(settings.problems(), (RunSettings, "RunSettings")) if p.key not in named]
    # the plugins named load, and a missing optional dependency is an input error, before anything runs
    problems += executor_problems(settings)
    return build(matrix_settings, problems), settings


def _check_cluster(matrix: Matrix, settings: RunSettings) -> None:
    """Last before running: asking the cluster is the slowest check (joining Ray, sinfo). An unreachable cluster,
    or one the experiments do not fit, is an input error within a bound."""
    if settings.executor == Executor.LOCAL or settings.dry_run:
        return
    from tunebench.api.running import run_options
    from tunebench.execution.executors import make_executor
    from tunebench.execution.processes import RunSession

    executor = make_executor(settings.executor)
    if hasattr(executor, "check"):
        executor.check(run_options(matrix, settings, {}, RunSession()), matrix.experiments)


def _write_fit_map(options: argparse.Namespace, matrix: Matrix) -> int:
    """`plan --fit_map`: the largest micro-batch that fits, per model × framework config × PEFT × length."""
    from tunebench.api.planning import fit_map_frame

    frame = fit_map_frame(matrix, options.plan_device, options.gpu_table)
    print(frame.drop(columns=["pred_note"]).to_string(index=False))
    path = Path(options.results_output_path) / results_folder.FIT_MAP
    write_atomic(path, frame.to_csv(index=False))
    print(f"wrote {path}")
    return 0


def _write_plan(options: argparse.Namespace, matrix: Matrix) -> int:
    from tunebench.api.planning import plan, predictions
    from tunebench.planning.plan_matrix import plan_table, table_notes

    found = predictions(matrix, options.plan_device, options.gpu_table, runs_here=False)
    print(plan_table(matrix.experiments, found).to_string(index=False))
    for note in table_notes(matrix.experiments, found):
        print(f"note: {note}")
    path = Path(options.results_output_path) / results_folder.PLAN
    write_atomic(path, plan(matrix, options.plan_device, found, options.gpu_table).to_csv(index=False))
    print(f"wrote {path}")
    return 0


# The projection's columns `plan --project_from` prints (projection.csv holds them all).
SHOWN = ("scenario", "framework_config", "model_name_or_path", "proj_num_gpus", "steady_tokens_per_second",
         "proj_steady_tokens_per_second", "proj_step_time", "proj_usd_per_million_tokens", "proj_joules_per_token",
         "pred_mem_peak", "pred_fits")


def projection_options(options: argparse.Namespace) -> ProjectionOptions:
    """`plan --project_from`'s options, typed."""
    return ProjectionOptions(project_from=options.project_from, plan_device=options.plan_device,
                             gpu_table=options.gpu_table, gpu_hour_usd=options.gpu_hour_usd,
                             num_gpus=options.project_num_gpus, parallelism=options.project_parallelism)


def _write_projection(options: argparse.Namespace) -> int:
    """`plan --project_from`: project, print the table and write `<out>/projection.csv`."""
    frame = projection_frame(projection_options(options))
    print(frame[[c for c in SHOWN if c in frame.columns]].to_string(index=False))
    path = Path(options.results_output_path) / results_folder.PROJECTION
    write_atomic(path, frame.to_csv(index=False))
    print(f"wrote {path}")
    return 0


def _plan_command(options: argparse.Namespace, matrix: Matrix) -> int:
    from tunebench.api.planning import check_models

    check_models(matrix)
    if options.preload_models:
        from tunebench.execution.preparation import preload_models

        preload_models(matrix.experiments)
    with results_lock(Path(options.results_output_path)):  # never into a folder a run holds
        return _write_fit_map(options, matrix) if options.fit_map else _write_plan(options, matrix)


def _run_command(options: argparse.Namespace, matrix: Matrix, settings: RunSettings) -> int:
    _check_cluster(matrix, settings)
    result = run_checked(matrix, settings, say=lambda text: print(text, flush=True))
    if settings.dry_run:
        _print_dry_run(result)
        return 0
    print(results.summary_table(results.collect(result.rows)))
    earlier = len(result.frame) - len(result.rows)
    print(f"wrote {result.paths['raw_summary']} and {result.paths['benchmarks']}"
          + (f" ({len(result.frame)} rows: {earlier} from earlier runs in this folder)" if earlier > 0 else ""))
    if options.compare_with:
        return _compare_after_run(options)
    return 0


def _print_dry_run(result: RunResult) -> None:
    from tunebench.execution.experiment_run import ALREADY_RUN

    frame = result.frame
    print(frame[[c for c in results.KEY_COLUMNS + ["effective_batch_size", "per_device_train_batch_size",
                 "gradient_accumulation_steps", "max_seq_len", "packing", "peft_method"] if c in frame.columns]]
          .to_string(index=False))
    kept = sum(row.get("error_messages") == ALREADY_RUN for row in result.rows)
    fresh = len(result.rows) - kept
    written = f"wrote command.sh for {fresh} experiment(s)" if fresh else "wrote no command.sh"
    left = f"; {kept} already run there, their files left as they are" if kept else ""
    print(f"dry run: {written} under {result.paths['folder']}/{left}; ran nothing")


def _compare_after_run(options: argparse.Namespace) -> int:
    from tunebench.results.compare.comparison import CompareInputError, compare_paths

    output_dir = Path(options.results_output_path)
    try:
        outcome = compare_paths(options.compare_with, str(output_dir), str(output_dir / "compare"),
                                thresholds=options.compare_threshold)
    except CompareInputError as exc:
        print(f"tunebench compare: {exc}", file=sys.stderr)
        return 2
    print(outcome.markdown)
    return outcome.exit_code


def _input_error(exc: InputError) -> int:
    print(f"tunebench: {len(exc.problems)} problem(s) in the input; nothing was run:", file=sys.stderr)
    for problem in exc.problems:
        print(f"  - {problem}", file=sys.stderr)
    return 2


def _environment_error(exc: OSError) -> int:
    """A fault of the machine (disk full, permissions, an unreachable hub) rather than of the input: one line, exit 2."""
    from tunebench.api.diagnosis import environment_line

    print(environment_line(exc), file=sys.stderr)
    return 2


def _checked_run(options: argparse.Namespace, planning_only: bool) -> int:
    if planning_only and options.project_from:  # measured rows onto another GPU: no matrix to expand
        if problems := option_problems(options, OPTION_RANGES) + results_folder.check(options.results_output_path):
            raise InputError(problems)
        with results_lock(Path(options.results_output_path)):
            return _write_projection(options)
    matrix, settings = read_command_line(options, planning_only)
    if planning_only:
        return _plan_command(options, matrix)
    return _run_command(options, matrix, settings)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in SUBCOMMANDS:
        from importlib import import_module
        return import_module(SUBCOMMANDS[argv[0]]).main(argv[1:])
    planning_only = bool(argv) and argv[0] == "plan"
    options = build_parser("benchmark.py plan" if planning_only else "benchmark.py").parse_args(
        argv[1:] if planning_only else argv)
    logging.basicConfig(level=options.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # A run starts processes (Ray, the preload server, experiments): a watchdog takes them all along if the
    # harness is killed. A dry run and `plan` start none.
    watchdog = contextlib.nullcontext() if options.dry_run or planning_only else Guardian()
    try:
        with watchdog:
            return _checked_run(options, planning_only)
    except PluginError as exc:  # a plugin that failed in use: the run stopped there
        print(f"tunebench: {exc.problems[0]}; the run stopped (the CSVs hold every experiment on disk)",
              file=sys.stderr)
        return 2
    except InputError as exc:
        return _input_error(exc)
    except HarnessStopped as exc:
        print(f"stopped by {exc}: every running experiment was stopped; the CSVs hold every experiment on disk "
              "(interrupted ones as error rows)", file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        print("interrupted: every running experiment was stopped; the CSVs hold every experiment on disk "
              "(interrupted ones as error rows)", file=sys.stderr)
        return 130
    except OSError as exc:
        return _environment_error(exc)
