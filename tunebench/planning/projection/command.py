"""`benchmark.py plan --project_from RESULTS --plan_device GPU`: every measured experiment of a results folder on
another GPU kind (or N of them), with its memory verdict there, in `<out>/projection.csv`."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from tunebench.errors import InputError, InputProblem
from tunebench.planning.gpu_target import plan_target
from tunebench.planning.projection.project import folders_by_id, project_rows

logger = logging.getLogger(__name__)

SHOWN = ("scenario", "framework_config", "model_name_or_path", "proj_num_gpus", "steady_tokens_per_second",
         "proj_steady_tokens_per_second", "proj_step_time", "proj_usd_per_million_tokens", "proj_joules_per_token",
         "pred_mem_peak", "pred_fits")


def measured_frame(root: Path) -> pd.DataFrame:
    """The measured rows of a results folder, rebuilt from its experiment folders (as the CSVs are)."""
    from tunebench.results.summaries import collect, rows_on_disk

    if not root.is_dir():
        raise InputError([InputProblem("command line", "--project_from", f"{root} is not a folder",
                                       "give a results folder benchmark.py wrote")])
    rows = rows_on_disk(root, incomplete=False)
    if not rows:
        raise InputError([InputProblem("command line", "--project_from", f"{root} holds no finished experiment",
                                       "give a results folder benchmark.py wrote (one with raw_summary.csv)")])
    return collect(rows)


def projection(root: Path, target: str, gpu_table: str | None = None, gpu_hour_usd: float | None = None,
               num_gpus: int | None = None, parallelism: str | None = None, memory: bool = True) -> pd.DataFrame:
    """projection.csv's rows: `proj_*` and, with `memory`, the `pred_*` verdict of each experiment on the target."""
    from tunebench.planning.projection.memory import verdict

    gpu = plan_target(target, (), gpu_table).gpu
    if gpu is None:
        raise InputError([InputProblem("command line", "--plan_device", f"{target!r} is a size: --project_from "
                                       "projects onto a GPU kind", "give a GPU's name, e.g. \"NVIDIA H200\"")])
    measured = measured_frame(root)
    several = pd.to_numeric(measured.get("num_gpus", pd.Series(dtype=float)), errors="coerce").fillna(1) > 1
    if (num_gpus or 1) > 1 and parallelism is None and not several.any():
        # a row measured on several GPUs brings its own parallelism; one-GPU rows need one to be spread
        raise InputError([InputProblem("command line", "--project_parallelism", f"{num_gpus} GPUs need a "
                                       "parallelism", "--project_parallelism ddp (or fsdp2)")])
    frame = project_rows(measured, target, gpu_table, str(root), gpu_hour_usd, num_gpus, parallelism)
    if memory:
        folders = folders_by_id(root)
        capacity = gpu.capacity_bytes()
        verdicts = []
        for _, row in frame.iterrows():
            folder = folders.get((row.get("experiment_id"), int(row.get("repeat", 1) or 1)))
            count = int(row.get("proj_num_gpus") or 1)
            own = row.get("proj_source_parallelism") if int(row.get("proj_source_num_gpus") or 1) > 1 else None
            found = verdict(folder, count, own or parallelism, capacity, gpu.name) if folder else {}
            verdicts.append({"proj_mem_peak": found.get("pred_mem_peak"), "proj_fits": found.get("pred_fits"),
                             **found})
        frame = pd.concat([frame, pd.DataFrame(verdicts, index=frame.index)], axis=1)
    return frame


def write_projection(options) -> int:
    """The CLI's path: check the options, project, print the table and write `<out>/projection.csv`."""
    from tunebench.fileio import write_atomic
    from tunebench.results.folder import PROJECTION

    if not options.plan_device:
        raise InputError([InputProblem("command line", "--plan_device", "--project_from needs the GPU to project to",
                                       "e.g. --plan_device \"NVIDIA H200\"")])
    targets = [t.strip() for t in options.plan_device.split(",") if t.strip()]
    if options.gpu_hour_usd is not None and len(targets) > 1:
        raise InputError([InputProblem("command line", "--gpu_hour_usd", "one price for several GPU kinds",
                                       "give each GPU's price as usd_per_hour in a --gpu_table file")])
    frame = pd.concat([projection(Path(options.project_from), target, options.gpu_table, options.gpu_hour_usd,
                                  options.project_num_gpus, options.project_parallelism) for target in targets],
                      ignore_index=True)
    print(frame[[c for c in SHOWN if c in frame.columns]].to_string(index=False))
    path = Path(options.results_output_path) / PROJECTION
    write_atomic(path, frame.to_csv(index=False))
    print(f"wrote {path}")
    return 0
