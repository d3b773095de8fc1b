"""Projecting measured experiments onto another GPU kind, or N of them: `tunebench.project(ProjectionOptions(...))` is
`benchmark.py plan --project_from RESULTS --plan_device GPU`'s projection.csv as a DataFrame.

The typed options are checked at the edge; the results folder's rows and its experiment folders are read once, each
GPU kind is resolved once in the one GPU table (planning.gpu_target), and tunebench.projection projects from what
it is handed (it reads no results folder).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from tunebench.api.checks import argument_problem, checked_field, field_problems, raise_problems
from tunebench.api.words import api_words
from tunebench.bounds import Range
from tunebench.errors import InputError, InputProblem

logger = logging.getLogger(__name__)

PARALLELISMS = ("ddp", "fsdp2")  # how N GPUs share a one-GPU row's work (projection.ranks)


@dataclass
class ProjectionOptions:
    """What to project and onto what: a results folder's measured experiments onto `plan_device` (a GPU of the GPU
    table, or several, comma-separated), `num_gpus` of it (default: each row's own count; a one-GPU row spread
    over several needs a `parallelism`), priced at `gpu_hour_usd` (one target only), with their memory verdict
    there. Each field's type and range are checked when the projection starts."""

    project_from: str | os.PathLike = checked_field("--project_from", example="'results'")
    plan_device: str | None = checked_field("--plan_device", default=None, example="'NVIDIA H200'")
    gpu_table: str | None = checked_field("--gpu_table", default=None, example="'my-gpus.yaml'")
    gpu_hour_usd: float | None = checked_field("--gpu_hour_usd", Range(0, 1e6), default=None, example="2.5")
    num_gpus: int | None = checked_field("--project_num_gpus", Range(1, 4096), default=None, example="8")
    parallelism: str | None = checked_field("--project_parallelism", choices=PARALLELISMS, default=None,
                                            example="'ddp'")
    memory: bool = checked_field(default=True)  # the memory verdict on the target (pred_*, proj_fits)

    def problems(self) -> list[InputProblem]:
        """Every field of the wrong type or out of its range, named `ProjectionOptions: field`."""
        return field_problems(self)

    def targets(self) -> list[str]:
        """The GPU kinds asked for, in order (InputError, in the command line's words, when none is or when one
        price is given for several)."""
        from tunebench.planning.gpu_target import device_names

        targets = device_names(self.plan_device)
        if not targets:
            raise InputError([InputProblem("command line", "--plan_device", "--project_from needs the GPU to "
                                           "project to", "e.g. --plan_device \"NVIDIA H200\"")])
        if self.gpu_hour_usd is not None and len(targets) > 1:
            raise InputError([InputProblem("command line", "--gpu_hour_usd", "one price for several GPU kinds",
                                           "give each GPU's price as usd_per_hour in a --gpu_table file")])
        return targets


def measured_frame(root: Path):
    """The measured rows of a results folder, rebuilt from its experiment folders (as the CSVs are)."""
    from tunebench.results.summaries import collect, rows_on_disk

    if not root.is_dir():
        raise InputError([InputProblem("command line", "--project_from", f"{root} is not a folder",
                                       "give a results folder benchmark.py wrote")])
    problems: list[InputProblem] = []
    rows = rows_on_disk(root, incomplete=False, problems=problems)
    if problems:  # a value no run produces would be projected as it stands (-100 tokens/s to -112.6)
        raise InputError(problems)
    if not rows:
        raise InputError([InputProblem("command line", "--project_from", f"{root} holds no finished experiment",
                                       "give a results folder benchmark.py wrote (one with raw_summary.csv)")])
    return collect(rows)


def _target(name: str, gpu_table: str | None):
    """The GPU kind `name` names in the one GPU table (with the table it was found in): a size is no GPU kind."""
    from tunebench.planning.gpu_target import plan_target

    target = plan_target(name, (), gpu_table)
    if target.gpu is None:
        raise InputError([InputProblem("command line", "--plan_device", f"{name!r} is a size: --project_from "
                                       "projects onto a GPU kind", "give a GPU's name, e.g. \"NVIDIA H200\"")])
    return target


def projection_frame(options: ProjectionOptions):
    """projection.csv's rows, every target's after the other; problems in the command line's words (the CLI's)."""
    import pandas as pd

    from tunebench.projection.memory import with_verdicts
    from tunebench.projection.project import project_rows
    from tunebench.results.folder import folders_by_id

    root = Path(options.project_from)
    measured = folders = None
    frames = []
    for name in options.targets():
        target = _target(name, options.gpu_table)
        if measured is None:  # read once, after the first GPU is known (a wrong GPU is said first)
            measured = measured_frame(root)
            several = pd.to_numeric(measured.get("num_gpus", pd.Series(dtype=float)), errors="coerce").fillna(1) > 1
            folders = folders_by_id(root)
        if (options.num_gpus or 1) > 1 and options.parallelism is None and not several.any():
            # a row measured on several GPUs brings its own parallelism; one-GPU rows need one to be spread
            raise InputError([InputProblem("command line", "--project_parallelism", f"{options.num_gpus} GPUs "
                                           "need a parallelism", "--project_parallelism ddp (or fsdp2)")])
        frame = project_rows(measured, target.table, target.gpu, folders, options.gpu_hour_usd, options.num_gpus,
                             options.parallelism)
        frames.append(with_verdicts(frame, folders, target.gpu, options.parallelism) if options.memory else frame)
    return pd.concat(frames, ignore_index=True)


def project(options: ProjectionOptions):
    """The measured experiments of `options.project_from` projected onto `options.plan_device`: one row per
    experiment and GPU kind, the `proj_*` columns (and, with `memory`, the `pred_*` verdict there). InputError
    naming the ProjectionOptions field when one is wrong."""
    raise_problems([argument_problem("project", "options", options, ProjectionOptions, "e.g. tunebench.project("
                                     "tunebench.ProjectionOptions(project_from='out', plan_device='NVIDIA H200'))")])
    raise_problems(options.problems())
    with api_words((ProjectionOptions, "ProjectionOptions")):
        return projection_frame(options)
