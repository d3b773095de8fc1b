"""`tunebench.tune(TuneOptions(...))` and `benchmark.py tune`: check the options, build the space, predict once,
search, write the table, the winner and the report.

The search runs its batches through the Python API (tunebench.tuning.runs), in one session; the command line only
parses the options into a TuneOptions, calls `tune` and prints.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from tunebench.errors import InputError, InputProblem
from tunebench.tuning.options import TuneOptions
from tunebench.vocabulary import Objective

logger = logging.getLogger(__name__)


@dataclass
class TuneResult:
    """What a search found and wrote: the ranked table (tune.csv), the winning point's row (None: nothing ran
    well enough), the search's outcome (every point's state), the device it ran on and the files."""

    table: Any  # pandas.DataFrame
    winner: dict[str, Any] | None
    outcome: Any  # tunebench.tuning.search.Outcome
    device_type: str
    paths: dict[str, Path]


def _input_problems(options: TuneOptions, device_type: str) -> list[InputProblem]:
    problems = []
    if options.objective == Objective.JOULES_PER_TOKEN and device_type != "cuda":
        problems.append(InputProblem("command line", "--objective", "joules_per_token needs GPUs (the nvidia-smi "
                                     "power sidecar); this run is on CPU", "use --objective tokens_per_second on CPU"))
    if options.project_to and device_type != "cuda":
        problems.append(InputProblem("command line", "--project_to", "projects each run's kernel split, which only "
                                     "a CUDA step has; this run is on CPU", "run tune on a GPU, or leave it out"))
    return problems


def tune(options: TuneOptions, checked: bool = False) -> TuneResult:
    """Find the fastest (or cheapest) configuration that fits; InputError naming the option when one is wrong
    (`checked`: the options were already checked, as `benchmark.py tune`'s parser does; else each problem names
    the TuneOptions field, as a Python caller wrote it)."""
    if checked:
        return _search(options)
    from tunebench.api.checks import argument_problem, field_problems, raise_problems
    from tunebench.api.words import in_api_words
    from tunebench.tuning.option_checks import value_problems

    raise_problems([argument_problem("tune", "options", options, TuneOptions, "e.g. tunebench.tune(tunebench."
                                     "TuneOptions(model='preset:llama-tiny'))")])
    from tunebench.execution.progress import shown_to_stderr

    names = {f"--{field.name}": ("TuneOptions", field.name) for field in fields(TuneOptions)}
    try:
        raise_problems(field_problems(options))  # the types first: the value checks assume them
        raise_problems(value_problems(options))  # checked as the command line's, then named as the fields
        with shown_to_stderr():  # a Python caller without logging hears the search's progress
            return _search(options)
    except InputError as exc:
        raise InputError(in_api_words(exc.problems, names)) from None


def _search(options: TuneOptions) -> TuneResult:
    from tunebench.lifetime.stop_signals import stop_on_signals
    from tunebench.results.folder import results_lock
    from tunebench.results.summaries import rows_on_disk
    from tunebench.tuning import output, prune
    from tunebench.tuning.runs import HarnessRuns
    from tunebench.tuning.search import Search
    from tunebench.tuning.space import build_space

    runs = HarnessRuns(options)
    device_type = runs.device()
    if problems := _input_problems(options, device_type):
        raise InputError(problems)
    cpu = device_type == "cpu"
    points = build_space(options, cpu)
    predictions = runs.predict(points)  # also validates every point (exit 2 before anything runs)
    out = Path(options.results_output_path)
    with stop_on_signals(), results_lock(out):
        # The margin learns from every prediction error this folder already measured (earlier tunes, runs).
        margin = prune.measured_margin(rows_on_disk(out, incomplete=False), options.margin_pct)
        search = Search(points, predictions, options, device_type, margin)
        outcome = search.run_grid(runs) if options.grid else search.run(runs)
        table = output.write(outcome, options, cpu)
        if outcome.runs:
            from tunebench.results.report.page import write_report

            write_report(out)
    winner = outcome.winner.final() if outcome.winner is not None else None
    paths = {"folder": out, "table": out / output.TABLE, "winner": out / output.WINNER}
    return TuneResult(table, winner, outcome, device_type, paths)
