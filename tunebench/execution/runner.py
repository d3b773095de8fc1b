"""The matrix loop: resume, skip and dry-run decisions, then the chosen executor, with the CSVs kept current."""

from __future__ import annotations

import logging
from typing import Any

from tunebench.execution.executors import EXECUTORS, make_executor
from tunebench.execution.experiment_run import (
    RunOptions,
    base_row,
    cpu_slots,
    reusable_row,
    run_one,
    skip_reason,
)
from tunebench.execution.progress import MatrixProgress, settings_of
from tunebench.experiment.spec import ExperimentSpec
from tunebench.planning.predict import reserved_bytes, usable_bytes
from tunebench.planning.prediction_errors import error_columns
from tunebench.results import summaries as results
from tunebench.vocabulary import Executor, Status

logger = logging.getLogger(__name__)


def run_matrix(experiments: list[ExperimentSpec], options: RunOptions) -> list[dict[str, Any]]:
    """Rows of every experiment that finished (or was reused, skipped, dry-run), in matrix order."""
    untyped = [e.folder_name for e in experiments if not e.entry]
    if untyped:
        raise ValueError(f"{untyped[:3]}: run_matrix takes validated experiments (tunebench.matrix.validation)")
    rows: dict[int, dict[str, Any]] = {}
    todo = [index for index, experiment in enumerate(experiments)
            if not _decided(index, experiment, options, rows)]
    if not todo:
        return [rows[i] for i in sorted(rows)]

    executor = make_executor(options.executor)
    order = [e.folder_name for e in experiments]
    planned = [experiments[i] for i in todo]
    progress = MatrixProgress([e.folder_name for e in planned], executor.concurrency(options),
                              settings=[settings_of(e) for e in planned])

    def finished(position: int, row: dict[str, Any]) -> None:
        index = todo[position]
        row.update(experiments[index].describe())  # identity columns win over anything else
        try:
            results.write_row(options.output_dir / experiments[index].folder_name, row, root=options.output_dir)
        except ValueError as exc:  # its folder resolves outside the results folder: never written
            logger.error("%s: row not written: %s", experiments[index].folder_name, exc)
        rows[index] = row
        if progress.finished(position, row.get("status", "?"), _run_seconds(row)):  # not for a row updated later
            logger.info("%s: %s", experiments[index].folder_name, row.get("status"))
        # Keep the CSVs current (rebuilt from every folder on disk, running experiments aside): even a harness
        # that is SIGKILLed leaves every finished row in them.
        results.write_summaries(options.output_dir, order, incomplete=False)

    try:
        with EXECUTORS.blame(options.executor, "to run the matrix"):
            executor.run(planned, options, finished, progress)
    finally:
        progress.close()
    return [rows[i] for i in sorted(rows)]


def _decided(index: int, experiment: ExperimentSpec, options: RunOptions, rows: dict[int, dict[str, Any]]) -> bool:
    """Whether the experiment's row is settled without launching it: reused (resume), dry-run, or skipped (the
    machine cannot hold it, a framework config or an acceleration cannot run here, predicted OOM); `rows` gets it."""
    folder = options.output_dir / experiment.folder_name
    previous = reusable_row(folder, experiment.experiment_id) if options.resume and not options.dry_run else None
    if previous is not None:
        logger.info("resume: %s already completed, skipping", experiment.folder_name)
        predicted = options.predictions.get(experiment.experiment_id)
        if predicted:  # --plan on a resumed folder: the prediction joins the finished row
            previous.update(predicted)
            previous.update(error_columns(previous))
            results.write_row(folder, previous, root=options.output_dir)
        rows[index] = previous
        return True
    # On a cluster executor this machine's GPUs and cores are not the limit: the executor places (or skips)
    # what its nodes cannot hold, wider experiments across several nodes.
    here = options.executor == Executor.LOCAL
    reason = skip_reason(experiment, len(options.available_gpus) if here else None,
                         cpu_slots(options) if here else None) or predicted_oom(experiment, options)
    if options.dry_run:  # a dry run plans for the GPUs the experiment asks for, present or not
        usable = options.available_gpus if len(options.available_gpus) >= experiment.num_gpus else \
            range(experiment.num_gpus)
        row = run_one(experiment, list(usable[:experiment.num_gpus]) if experiment.device_type == "cuda" else [],
                      options)
        note = row.get("error_messages") or (f"would be skipped here: {reason}" if reason else "")
        rows[index] = {**row, "error_messages": note}
        return True
    if reason:
        logger.warning("skipping %s: %s", experiment.folder_name, reason)
        rows[index] = {**base_row(experiment, options), "status": Status.SKIPPED, "error_messages": reason}
        folder.mkdir(parents=True, exist_ok=True)
        results.write_row(folder, rows[index], root=options.output_dir)
        return True
    return False


def _run_seconds(row: dict[str, Any]) -> float | None:
    """The experiment's own launch-to-end time from its row (an executor that queues, like Ray, knows no start)."""
    start, end = row.get("experiment_start_unix"), row.get("experiment_end_unix")
    ok = isinstance(start, (int, float)) and isinstance(end, (int, float)) and end >= start
    return float(end - start) if ok else None


def predicted_oom(experiment: ExperimentSpec, options: RunOptions) -> str | None:
    """With --skip_predicted_oom: why an experiment predicted not to fit is not launched."""
    predicted = options.predictions.get(experiment.experiment_id, {})
    if not options.skip_predicted_oom or predicted.get("pred_fits") is not False:
        return None
    gib = 1024**3
    usable, reserved = usable_bytes(predicted), reserved_bytes(predicted)
    slack = reserved - predicted["pred_mem_peak"]
    needs = f" + {slack / gib:.2f} GiB allocator slack = {reserved / gib:.2f} GiB" if slack > 0 else ""
    return (f"predicted OOM: peak {predicted['pred_mem_peak'] / gib:.2f} GiB per device{needs}, more than the "
            f"{usable / gib:.2f} GiB usable of {predicted['pred_capacity_bytes'] / gib:.2f} GiB "
            "(--skip_predicted_oom)")
