"""Comparing and reporting from Python: `tunebench.compare(reference, results)` is `benchmark.py compare` (a
CompareResult: the verdict per metric as DataFrames, the Markdown, the files), `tunebench.report(results)` is
`benchmark.py report` (the HTML file's path). A bad file or option is one InputError naming it."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from tunebench.errors import InputError, InputProblem
from tunebench.results.compare_io import CompareInputError
from tunebench.results.compare_result import CompareResult
from tunebench.vocabulary import Direction

logger = logging.getLogger(__name__)


@dataclass
class CompareOptions:
    """How to judge: per metric, glob or family (MetricFamily) a threshold and a minimum effect in percent, and a
    direction (Direction); which columns join the rows; which metrics; where the outputs go."""

    thresholds: dict[str, float] = field(default_factory=dict)
    min_effects: dict[str, float] = field(default_factory=dict)
    directions: dict[str, Direction] = field(default_factory=dict)
    keys: list[str] | None = None
    metrics: list[str] | None = None
    allow_missing: bool = False
    charts: bool = True
    out: str | None = None  # default <results dir>/compare

    def problems(self) -> list[InputProblem]:
        """Each direction that is no Direction, named (a name matching no column, glob or MetricFamily is
        compare's own input error)."""
        return [InputProblem("CompareOptions", f"directions[{name!r}]", f"unknown direction {value!r}",
                             "one of: " + ", ".join(Direction.values()))
                for name, value in self.directions.items() if value not in Direction.values()]


def compare(reference: str | Path, results: str | Path, options: CompareOptions | None = None) -> CompareResult:
    """Judge `results` (a results folder or CSV) against `reference`; `exit_code` 1 when anything regressed."""
    from tunebench.results.compare import compare_paths

    options = options or CompareOptions()
    if problems := options.problems():
        raise InputError(problems)
    try:
        return compare_paths(reference, results, options.out, keys=options.keys, thresholds=dict(options.thresholds),
                             directions={k: str(v) for k, v in options.directions.items()},
                             metrics=options.metrics, allow_missing=options.allow_missing, charts=options.charts,
                             min_effects=dict(options.min_effects))
    except CompareInputError as exc:
        raise InputError([InputProblem("compare", str(results), str(exc), "check the files and the options")]) from None


def report(results: str | Path, out: str | Path | None = None, reference: str | Path | None = None) -> Path:
    """Write the HTML report of `results` (a results folder or CSV), compared with `reference` when given; its path."""
    from tunebench.results.report import write_report

    try:
        return write_report(results, out, reference)
    except CompareInputError as exc:
        raise InputError([InputProblem("report", str(results), str(exc), "give a results folder or CSV")]) from None
