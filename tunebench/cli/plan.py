"""`benchmark.py plan`: the memory of every experiment before anything runs (plan.csv), the largest micro-batch
that fits (`--fit_map`: fit_map.csv), or measured experiments projected onto another GPU (`--project_from`:
projection.csv), each through tunebench.api."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from tunebench.api.matrix import Matrix
from tunebench.api.projecting import ProjectionOptions, projection_frame
from tunebench.cli.options import OPTION_RANGES
from tunebench.cli.parsing import option_problems
from tunebench.cli.settings import read_command_line
from tunebench.errors import InputError
from tunebench.fileio import write_atomic
from tunebench.results import folder as results_folder
from tunebench.results.folder import results_lock

logger = logging.getLogger(__name__)


def _write_fit_map(options: argparse.Namespace, matrix: Matrix) -> int:
    """`plan --fit_map`: the largest micro-batch that fits, per model × framework config × PEFT × length."""
    from tunebench.api.planning import fit_map_frame
    from tunebench.planning.fit_map import per_gpu_count

    frame = fit_map_frame(matrix, options.plan_device, options.gpu_table)
    print(frame.drop(columns=["pred_note"]).to_string(index=False))
    for line in per_gpu_count(frame):
        print(f"fits: {line}")
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


def plan(options: argparse.Namespace) -> int:
    """`benchmark.py plan`'s options in, its files out: the projection with --project_from (measured rows onto
    another GPU: no matrix to expand), else the plan or the fit map of the matrix."""
    if options.project_from:
        if problems := option_problems(options, OPTION_RANGES) + results_folder.check(options.results_output_path):
            raise InputError(problems)
        with results_lock(Path(options.results_output_path)):
            return _write_projection(options)
    matrix, _ = read_command_line(options, planning_only=True)
    return _plan_command(options, matrix)
