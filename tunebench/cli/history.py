"""`benchmark.py history add|check|report|export`: the results store, its change points, its charts, Parquet.

    history add RESULTS... [--store PATH] [--label TEXT] [--each_repeat]   exit 0; 2 on bad input (nothing written)
    history check [--store PATH] [--metric M] [--min_effect PCT]          exit 1 when a newest regime is worse
    history report [--store PATH] [--out FILE.html]
    history export --parquet DIR [--store PATH]

The store defaults to `<parent of the first RESULTS>/history.duckdb` for `add`, `./history.duckdb` otherwise.
"""

from __future__ import annotations

import argparse
import logging
import sys
import unicodedata
from pathlib import Path

from tunebench.bounds import Range
from tunebench.cli.parsing import Parser, option_problems, parse
from tunebench.errors import InputError, InputProblem
from tunebench.fileio import LOOKED_AT, looked_at
from tunebench.history import store

logger = logging.getLogger(__name__)

RANGES = {"--min_effect": Range(0, 1000, low_open=True)}
MAX_LABEL = 200


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="benchmark.py history", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    add = commands.add_parser("add", help="add results folders to the store (a run each)")
    add.add_argument("results", nargs="+", help="results folders made by benchmark.py")
    add.add_argument("--label", default=None, help="a label for these runs, e.g. the git ref of the code under test")
    add.add_argument("--each_repeat", action="store_true", help="each --repeats run of a folder is a run of its own")
    check = commands.add_parser("check", help="change points; exit 1 when the newest run opened a worse regime")
    check.add_argument("--metric", default="steady_step_time_median", help="the metric whose series is checked")
    check.add_argument("--min_effect", type=float, default=None, help="minimum effect in %% (default: compare's, 5)")
    report = commands.add_parser("report", help="trend charts per experiment, regimes shaded (HTML)")
    report.add_argument("--out", default=None, help="the HTML file (default: <store folder>/history.html)")
    report.add_argument("--metric", default="steady_step_time_median")
    export = commands.add_parser("export", help="the store's tables as Parquet files")
    export.add_argument("--parquet", required=True, help="folder for runs.parquet, experiments.parquet, steps.parquet")
    for sub in (add, check, report, export):
        sub.add_argument("--store", default=None, help="the DuckDB file (default: see the module's help)")
    return parser


def _store_path(args) -> Path:
    if args.store:
        return Path(args.store)
    if args.command == "add":
        return Path(args.results[0]).resolve().parent / store.FILE_NAME
    return Path(store.FILE_NAME)


def _problems(args, path: Path) -> list[InputProblem]:
    problems = option_problems(args, RANGES) if args.command == "check" else []
    if args.command == "add":
        problems += _results_problems(args.results)
        label = args.label or ""
        if len(label) > MAX_LABEL or any(unicodedata.category(c) in ("Cc", "Cs") for c in label):
            problems.append(InputProblem("command line", "--label", f"at most {MAX_LABEL} printable characters",
                                         "e.g. --label v1.2.0 or --label $(git rev-parse --short HEAD)"))
    if args.command == "report" and args.out:
        problems += _out_problems(Path(args.out))
    if args.command == "export":
        problems += _parquet_problems(Path(args.parquet))
    return problems + store.path_problems(path, made_here=args.command == "add")


def _results_problems(folders: list[str]) -> list[InputProblem]:
    """`history add RESULTS...`: each a folder that can be read (the folder's problem, never the store's)."""
    problems = []
    for results in folders:
        found = looked_at(Path(results))
        if found in LOOKED_AT and found != "folder":
            problems.append(InputProblem("command line", results, "no such results folder",
                                         "give folders written by benchmark.py --results_output_path"))
        elif found not in LOOKED_AT:
            problems.append(InputProblem("command line", results, f"cannot be read: {found}",
                                         "give folders written by benchmark.py --results_output_path"))
    return problems


def _out_problems(out: Path) -> list[InputProblem]:
    """`history report --out`: a file in a folder that exists (the option's problem, never the store's)."""
    found = looked_at(out)
    if found == "folder":
        return [InputProblem("command line", "--out", f"{out} is a folder", "give the path of the HTML file to "
                             f"write, e.g. --out {out / 'history.html'}")]
    if found not in LOOKED_AT:
        return [InputProblem("command line", "--out", f"{out}: {found}", "give the path of an HTML file, e.g. "
                             "--out history.html")]
    if looked_at(out.parent) != "folder":
        return [InputProblem("command line", "--out", f"{out.parent} is not a folder that exists",
                             "give a file in an existing folder, e.g. --out history.html")]
    return []


def _parquet_problems(folder: Path) -> list[InputProblem]:
    """`history export --parquet`: a folder that can be looked at (what it holds: actions.export)."""
    found = looked_at(folder)
    if found not in LOOKED_AT:
        return [InputProblem("command line", "--parquet", f"{folder}: {found}", "give a new or empty folder")]
    return []


def _act(args: argparse.Namespace, path: Path, con, found: list) -> int:
    """The subcommand's action, with its typed values (tunebench.history.actions)."""
    from tunebench.history import actions

    if args.command == "add":
        return actions.add(found, path, con)
    if args.command == "check":
        return actions.check(args.metric, args.min_effect, path, con)
    if args.command == "report":
        return actions.report(args.metric, args.out, path, con)
    return actions.export(args.parquet, path, con)


def main(argv: list[str] | None = None) -> int:
    args = parse(build_parser(), argv)
    if isinstance(args, int):
        return args
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    path = _store_path(args)
    try:
        if problems := _problems(args, path):
            raise InputError(problems)
        from tunebench.history.actions import read_runs

        # the results folders are read before the store is opened: their problems are theirs, not the store's
        found = read_runs(args.results, args.label, args.each_repeat) if args.command == "add" else []
        con = store.open_store(path, read_only=args.command != "add")
        try:
            with store.failures_named(path):  # a store damaged past its header fails while it is read
                return _act(args, path, con, found)
        except InputError:
            con.abandon()  # refused: nothing this command created is left (the lock, a new store)
            raise
        finally:
            con.close()  # a second close is harmless: the actions close as soon as they are done
    except InputError as exc:
        print(f"tunebench history: {len(exc.problems)} problem(s); nothing was written:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  - {problem}", file=sys.stderr)
        return 2
