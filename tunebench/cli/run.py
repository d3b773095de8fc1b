"""`benchmark.py [options]`: run the matrix through tunebench.api (run_checked), print the summary table, and
compare with a reference when asked (`--compare_with`)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from tunebench.api.matrix import Matrix
from tunebench.api.running import RunResult, RunSettings, run_checked
from tunebench.cli.settings import read_command_line
from tunebench.results import summaries as results
from tunebench.vocabulary import Executor

logger = logging.getLogger(__name__)


def run(options: argparse.Namespace) -> int:
    """The matrix the options describe, run; the exit code (1: a regression against --compare_with)."""
    matrix, settings = read_command_line(options)
    return _run_command(options, matrix, settings)


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
