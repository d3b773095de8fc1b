"""Comparing and reporting from Python: `tunebench.compare(reference, results)` is `benchmark.py compare` (a
CompareResult: the verdict per metric as DataFrames, the Markdown, the files), `tunebench.report(results)` is
`benchmark.py report` (the HTML file's path). A bad file or option is one InputError naming it."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from tunebench.api.checks import argument_problem, checked_field, cli_names, field_problems, raise_problems
from tunebench.api.words import CLI, in_api_words
from tunebench.errors import InputError, InputProblem
from tunebench.results.compare.reading import CompareInputError
from tunebench.results.compare.result import CompareResult
from tunebench.results.compare.rules import PERCENT_RANGE
from tunebench.vocabulary import Direction

logger = logging.getLogger(__name__)


@dataclass
class CompareOptions:
    """How to judge: per metric, glob or family (MetricFamily) a threshold and a minimum effect in percent, and a
    direction (Direction); which columns join the rows; which metrics; where the outputs go. Each field's type
    and range are checked when compare starts (the percentages as `--threshold` and `--min_effect` are)."""

    thresholds: dict[str, float] = checked_field("--threshold", PERCENT_RANGE, default_factory=dict,
                                                 example="{'steady_nonpad_tokens_per_second': 5.0}")
    min_effects: dict[str, float] = checked_field("--min_effect", PERCENT_RANGE, default_factory=dict,
                                                  example="{'throughput': 2.0}")
    directions: dict[str, Direction] = checked_field("--direction", default_factory=dict,
                                                     example="{'my_metric': 'higher'}")
    keys: list[str] | None = checked_field("--keys", default=None, example="['scenario', 'framework_config']")
    metrics: list[str] | None = checked_field("--metrics", default=None, example="['steady_mfu']")
    allow_missing: bool = checked_field("--allow_missing", default=False)
    charts: bool = checked_field(default=True)
    out: str | os.PathLike | None = checked_field("--out", default=None,  # default <results dir>/compare
                                                  example="'compare'")

    def problems(self) -> list[InputProblem]:
        """Every field of the wrong type or out of its range, named `CompareOptions: field`."""
        return field_problems(self)


_PATH = str | os.PathLike


def compare(reference: str | Path, results: str | Path, options: CompareOptions | None = None) -> CompareResult:
    """Judge `results` (a results folder or CSV) against `reference`; `exit_code` 1 when anything regressed."""
    from tunebench.results.compare.comparison import compare_paths

    raise_problems([argument_problem("compare", "reference", reference, _PATH, "a results folder or CSV"),
                    argument_problem("compare", "results", results, _PATH, "a results folder or CSV"),
                    argument_problem("compare", "options", options, CompareOptions | None,
                                     "e.g. tunebench.CompareOptions(thresholds={'steady_mfu': 5.0})")])
    options = options or CompareOptions()
    raise_problems(options.problems())
    try:
        return compare_paths(reference, results, options.out, keys=options.keys, thresholds=dict(options.thresholds),
                             directions={k: str(v) for k, v in options.directions.items()},
                             metrics=options.metrics, allow_missing=options.allow_missing, charts=options.charts,
                             min_effects=dict(options.min_effects))
    except CompareInputError as exc:
        raise _in_api_words(exc, "compare", "check the files and the options") from None


def report(results: str | Path, out: str | Path | None = None, reference: str | Path | None = None) -> Path:
    """Write the HTML report of `results` (a results folder or CSV), compared with `reference` when given; its path."""
    from tunebench.results.report.page import write_report

    raise_problems([argument_problem("report", "results", results, _PATH, "a results folder or CSV"),
                    argument_problem("report", "out", out, _PATH | None, "an HTML file's path, or None"),
                    argument_problem("report", "reference", reference, _PATH | None, "a results folder or CSV")])
    try:
        return write_report(results, out, reference)
    except CompareInputError as exc:
        raise _in_api_words(exc, "report", "give a results folder or CSV") from None


def _in_api_words(exc: CompareInputError, function: str, fix: str) -> InputError:
    """compare's own error (it names a file by its role, or an option as the command line spells it) as one
    problem naming the argument or the CompareOptions field."""
    text = str(exc)
    first = text.split()[0] if text.split() else ""
    option = first if first.startswith("--") else "--results" if first in ("results", "step") else f"--{first}"
    names = {**{f"--{argument}": (function, argument) for argument in ("reference", "results")},
             **{option: ("CompareOptions", field) for field, option in cli_names(CompareOptions).items()}}
    problem = InputProblem(CLI, option if option in names else "--results", text, fix)
    return InputError(in_api_words([problem], names))
