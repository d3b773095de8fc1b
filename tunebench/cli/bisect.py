"""`benchmark.py bisect`: the first bad git ref (or package version) between a good and a bad one, for one experiment.

    benchmark.py bisect --repo PATH --good REF --bad REF [--subdir DIR] [--harness] [options] -- BENCHMARK ARGS
    benchmark.py bisect --package NAME --good VER --bad VER --versions V1 V2 ... [--pip_args ARGS] [options] -- ...

BENCHMARK ARGS are benchmark.py's options selecting one experiment. Each step runs it with the candidate's code
first on PYTHONPATH (tunebench.history.bisect.candidates), adds the run to the history store (label `bisect <ref>`) and
judges it against the good ref with compare's statistics (a regression = bad). Exit 0 with the first bad ref
printed; 2 on bad input; 3 when the answer cannot be had (the bad ref is not worse, a run failed or stayed
unstable).
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import time
from pathlib import Path

from tunebench.bounds import Range
from tunebench.cli.parsing import Parser, option_problems, parse
from tunebench.errors import InputError, InputProblem
from tunebench.fileio import LOOKED_AT, looked_at
from tunebench.history.bisect.search import Bisection, BisectOptions, CannotTell, candidates, search
from tunebench.lifetime.stop_signals import HarnessStopped

logger = logging.getLogger(__name__)

RANGES = {"--min_effect": Range(0, 1000, low_open=True), "--retries": Range(0, 10)}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="benchmark.py bisect", description=__doc__.splitlines()[0])
    searched = parser.add_argument_group("what is searched")
    what = searched.add_mutually_exclusive_group(required=True)
    what.add_argument("--repo", help="a git repository holding the code under test")
    what.add_argument("--package", help="a package on the index pip uses (needs --versions)")
    searched.add_argument("--good", required=True, help="a ref (or version) without the regression")
    searched.add_argument("--bad", required=True, help="a later ref (or version) with it")
    searched.add_argument("--versions", nargs="+", default=None, help="--package: the versions in order, good..bad")
    searched.add_argument("--pip_args", default="", help="--package: extra pip install arguments (e.g. '--no-index "
                          "--find-links DIR')")
    searched.add_argument("--subdir", default="", help="--repo: the folder of the checkout to import from")
    searched.add_argument("--harness", action="store_true",
                          help="--repo is tunebench: run the candidate's benchmark.py")
    judged = parser.add_argument_group("the verdict of each step")
    judged.add_argument("--metric", default="steady_step_time_median", help="the metric that regressed")
    judged.add_argument("--min_effect", type=float, default=None, help="minimum effect in %% (default compare's, 5)")
    judged.add_argument("--retries", type=int, default=2, help="re-runs of the noisier side while a step's verdict "
                        "is unstable")
    files = parser.add_argument_group("files")
    files.add_argument("--store", default="history.duckdb", help="the history store the runs are added to")
    files.add_argument("--workdir", default=None, help="a new folder for the runs (default bisect-<time> beside "
                       "the store)")
    return parser


def _split(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        at = argv.index("--")
        return argv[:at], argv[at + 1:]
    return argv, []


def _problems(args, benchmark_args: list[str]) -> list[InputProblem]:
    problems = option_problems(args, RANGES)
    if not benchmark_args:
        problems.append(InputProblem("command line", "--", "no benchmark.py arguments after `--`",
                                     "e.g. -- --run_only_scenarios full-finetuning --num_gpus_matrix 1"))
    if "--results_output_path" in benchmark_args:
        problems.append(InputProblem("command line", "--results_output_path", "bisect chooses each run's folder",
                                     "leave it out; give --workdir"))
    from tunebench.history.store import path_problems

    return problems + path_problems(Path(args.store), made_here=True) + _workdir_problems(args.workdir)


def _workdir_problems(workdir: str | None) -> list[InputProblem]:
    """--workdir: a new folder in one that exists (bisect never writes into one it did not make)."""
    if not workdir:
        return []
    found, parent = looked_at(workdir), looked_at(Path(workdir).parent)
    if found not in LOOKED_AT or parent not in LOOKED_AT:
        return [InputProblem("command line", "--workdir", f"{workdir}: {found if found not in LOOKED_AT else parent}",
                             "give a new folder, e.g. --workdir bisect-runs")]
    if found != "missing":
        return [InputProblem("command line", "--workdir", f"{workdir} exists",
                             "give a new folder (bisect never writes into one it did not make)")]
    if parent != "folder":
        return [InputProblem("command line", "--workdir", f"{Path(workdir).parent} is not a folder that exists",
                             "give a new folder in an existing one, e.g. --workdir bisect-runs")]
    return []


def main(argv: list[str] | None = None) -> int:
    own, benchmark_args = _split(list(sys.argv[1:] if argv is None else argv))
    args = parse(build_parser(), own)
    if isinstance(args, int):
        return args
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    workdir = Path(args.workdir or Path(args.store).resolve().parent / time.strftime("bisect-%Y%m%d-%H%M%S"))
    try:
        if problems := _problems(args, benchmark_args):
            raise InputError(problems)
        options = BisectOptions(good=args.good, bad=args.bad, repo=args.repo, package=args.package,
                                versions=tuple(args.versions or ()), pip_args=args.pip_args, subdir=args.subdir,
                                harness=args.harness, metric=args.metric, min_effect=args.min_effect,
                                retries=args.retries)
        refs = candidates(options)
        from tunebench.history.store import open_store

        con = open_store(Path(args.store), read_only=False)
        try:
            workdir.mkdir(parents=True)
        except OSError as exc:  # the runs' folder, not the store: refused, the store is left as it was
            con.abandon()
            raise InputError([InputProblem("command line", "--workdir", f"cannot make {workdir}: "
                                           f"{exc.strerror or exc}", "give a new folder you may write")]) from None
        print(f"bisect: {len(refs)} candidates, good {refs[0][:12]}, bad {refs[-1][:12]}; runs in "
              f"{workdir}", flush=True)
        try:
            return search(Bisection(options, benchmark_args, refs, workdir, con))
        finally:
            con.close()
            shutil.rmtree(workdir / "code", ignore_errors=True)  # the checkouts and installs bisect made
    except InputError as exc:
        print(f"tunebench bisect: {len(exc.problems)} problem(s); nothing was run:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  - {problem}", file=sys.stderr)
        return 2
    except CannotTell as exc:
        print(f"tunebench bisect: cannot tell: {exc}", file=sys.stderr)
        return 3
    except HarnessStopped as exc:
        print(f"tunebench bisect: stopped by {exc}: the running step was stopped", file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        print("tunebench bisect: interrupted: the running step was stopped", file=sys.stderr)
        return 130
