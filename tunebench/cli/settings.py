"""benchmark.py's options read into the Python API's typed settings: the matrix (MatrixOptions) and how to run it
(RunSettings, each plugin's options its own Settings), every problem of the options and the files at once.

Below this module nothing sees argparse's Namespace: the API takes the typed settings (a house rule,
tests/test_layout.py)."""

from __future__ import annotations

import argparse
import logging

from tunebench.api.matrix import Matrix, MatrixOptions, build
from tunebench.api.running import RunSettings, executor_problems
from tunebench.api.words import in_cli_words, unnamed_broken_plugins
from tunebench.cli.options import OPTION_RANGES, booleans, numbers, split
from tunebench.cli.parsing import option_problems
from tunebench.cli.plugin_options import read_plugin_settings
from tunebench.errors import InputError, InputProblem
from tunebench.experiment.arguments import parse_memory_logging
from tunebench.matrix.fms_configs import pairs_of
from tunebench.results import folder as results_folder

logger = logging.getLogger(__name__)


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
        attn_implementation=split(options.attn_implementation_matrix) if options.attn_implementation_matrix else None,
        fms_configs=pairs_of(options.acceleration_framework_config_keypairs, problems)
        if options.acceleration_framework_config_keypairs else None)


def fms_habits(options: argparse.Namespace) -> None:
    """fms-acceleration's options and variables that tunebench does otherwise: one line each naming what it does."""
    import os

    if options.dataset_save_path:
        logger.warning("--dataset_save_path is fms-acceleration's data cache: tunebench caches preprocessed data in "
                       "$TUNEBENCH_CACHE/data (set TUNEBENCH_CACHE to move it); %s is not used",
                       options.dataset_save_path)
    if options.process_port is not None:
        logger.warning("--process_port is fms-acceleration's accelerate port: tunebench gives every multi-process "
                       "experiment a free port of its own; %s is not used", options.process_port)
    if os.environ.get("ACCELERATION_FRAMEWORK_CONFIG_FILE"):
        logger.warning("ACCELERATION_FRAMEWORK_CONFIG_FILE is fms-hf-tuning's: tunebench does not pass it to the "
                       "experiments; name the file with --acceleration_framework_config_keypairs NAME FILE and put "
                       "NAME in a scenario's framework_config")


def run_settings(options: argparse.Namespace, problems: list[InputProblem]) -> RunSettings:
    """How the command line asks the matrix to run, every plugin's options read into its own Settings."""
    return RunSettings(
        results_output_path=options.results_output_path, overwrite=options.overwrite, dry_run=options.dry_run,
        resume=not options.no_resume, timeout=options.timeout, plan=options.plan, plan_device=options.plan_device,
        skip_predicted_oom=options.skip_predicted_oom, gpu_table=options.gpu_table, executor=options.executor,
        launcher=options.launcher, trackers=tuple(options.trackers or ()),
        plugin_settings=read_plugin_settings(options, problems), cpu_slots=options.cpu_slots,
        exclusive_timing=options.exclusive_timing, preload=not options.no_preload,
        preload_models=options.preload_models, data_processing=not options.no_data_processing)


def read_command_line(options: argparse.Namespace, planning_only: bool = False) -> tuple[Matrix, RunSettings]:
    """The matrix and how to run it; InputError with every problem of the options and the files at once. A GPU
    named as --plan_device builds the matrix for CUDA where nothing runs here (`plan`, a dry run)."""
    from tunebench.api.planning import device_to_plan

    problems: list[InputProblem] = []
    fms_habits(options)
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
    return build(matrix_settings, problems, runs_here=not planning_only), settings
