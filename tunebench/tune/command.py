"""`benchmark.py tune`: parse, build the space, predict, search, write the table, the winner and the report."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from tunebench.errors import InputError, InputProblem

logger = logging.getLogger(__name__)


def _input_problems(options, device_type: str) -> list[InputProblem]:
    if options.objective == "joules_per_token" and device_type != "cuda":
        return [InputProblem("command line", "--objective", "joules_per_token needs GPUs (the nvidia-smi power "
                             "sidecar); this run is on CPU", "use --objective tokens_per_second on CPU")]
    return []


def tune(options) -> int:
    from tunebench.execution.guard import results_lock, stop_on_signals
    from tunebench.results.summaries import rows_on_disk
    from tunebench.tune import output, prune
    from tunebench.tune.runs import HarnessRuns
    from tunebench.tune.search import Search
    from tunebench.tune.space import build_space

    runs = HarnessRuns(options)
    device_type = runs.device()
    problems = _input_problems(options, device_type)
    if problems:
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
            from tunebench.results.report import write_report

            write_report(out)
    print(output.summary(outcome, table, options, cpu))
    return 0 if outcome.winner is not None else 1


def _input_error(exc: InputError) -> int:
    """One line per problem, each naming the option (or the file and key) and the fix; exit 2."""
    for problem in exc.problems:
        print(f"tunebench tune: {problem}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    from tunebench.cli import _environment_error
    from tunebench.execution.guard import HarnessStopped
    from tunebench.execution.guardian import Guardian
    from tunebench.tune.options import parse

    try:
        options = parse(sys.argv[1:] if argv is None else argv)
    except InputError as exc:
        return _input_error(exc)
    logging.basicConfig(level=options.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        with Guardian():  # every process the search starts goes with the harness, however it is stopped
            return tune(options)
    except InputError as exc:
        return _input_error(exc)
    except HarnessStopped as exc:
        print(f"stopped by {exc}: the CSVs hold every experiment on disk; run the same command to resume",
              file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        print("interrupted: the CSVs hold every experiment on disk; run the same command to resume", file=sys.stderr)
        return 130
    except OSError as exc:
        return _environment_error(exc)
