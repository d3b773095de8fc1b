"""`benchmark.py bisect`: the first bad git ref (or package version) between a good and a bad one, for one experiment.

    benchmark.py bisect --repo PATH --good REF --bad REF [--subdir DIR] [--harness] [options] -- BENCHMARK ARGS
    benchmark.py bisect --package NAME --good VER --bad VER --versions V1 V2 ... [--pip_args ARGS] [options] -- ...

BENCHMARK ARGS are benchmark.py's options selecting one experiment. Each step runs it with the candidate's code
first on PYTHONPATH (tunebench.history.bisect), adds the run to the history store (label `bisect <ref>`) and
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

import pandas as pd

from tunebench.bounds import Range
from tunebench.command_line import Parser, option_problems
from tunebench.errors import InputError, InputProblem
from tunebench.execution.guard import HarnessStopped
from tunebench.history import bisect, check, metadata, store
from tunebench.results.compare import rules
from tunebench.results.compare.samples import steady_seconds

logger = logging.getLogger(__name__)

RANGES = {"--min_effect": Range(0, 1000, low_open=True), "--retries": Range(0, 10)}


class CannotTell(Exception):
    """The search cannot go on: a run failed, or stayed unstable, or the bad ref is not worse."""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="benchmark.py bisect", description=__doc__.splitlines()[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--repo", help="a git repository holding the code under test")
    what.add_argument("--package", help="a package on the index pip uses (needs --versions)")
    parser.add_argument("--good", required=True, help="a ref (or version) without the regression")
    parser.add_argument("--bad", required=True, help="a later ref (or version) with it")
    parser.add_argument("--versions", nargs="+", default=None, help="--package: the versions in order, good..bad")
    parser.add_argument("--pip_args", default="", help="--package: extra pip install arguments (e.g. '--no-index "
                        "--find-links DIR')")
    parser.add_argument("--subdir", default="", help="--repo: the folder of the checkout to import from")
    parser.add_argument("--harness", action="store_true", help="--repo is tunebench: run the candidate's benchmark.py")
    parser.add_argument("--store", default="history.duckdb", help="the history store the runs are added to")
    parser.add_argument("--workdir", default=None, help="a new folder for the runs (default bisect-<time> beside "
                        "the store)")
    parser.add_argument("--metric", default="steady_step_time_median", help="the metric that regressed")
    parser.add_argument("--min_effect", type=float, default=None, help="minimum effect in %% (default compare's, 5)")
    parser.add_argument("--retries", type=int, default=2, help="re-runs of the noisier side while a step's verdict "
                        "is unstable")
    return parser


def _candidates(args) -> list[str]:
    if args.repo:
        return bisect.commits_between(Path(args.repo), args.good, args.bad)
    versions = list(args.versions or [])
    if len(versions) < 2 or versions[0] != args.good or versions[-1] != args.bad:
        raise InputError([InputProblem("command line", "--versions", "must list the versions in order, from --good "
                                       "to --bad", f"e.g. --versions {args.good} ... {args.bad}")])
    return versions


class Bisection:
    """The runs of one bisection: each candidate's code, its results folder, its rows in the store."""

    def __init__(self, args, benchmark_args: list[str], candidates: list[str], workdir: Path, con):
        self.args, self.benchmark_args, self.candidates = args, benchmark_args, candidates
        self.workdir, self.con = workdir, con
        self.rule = rules.rule_for(args.metric, min_effects={args.metric: args.min_effect}
                                   if args.min_effect is not None else None)
        self.runs: dict[int, list[dict]] = {}

    def _code(self, index: int) -> Path:
        ref = self.candidates[index]
        folder = self.workdir / "code" / f"{index:03d}"
        if self.args.repo:
            return bisect.export_commit(Path(self.args.repo), ref, folder)
        return bisect.install_version(self.args.package, ref, folder, self.args.pip_args.split())

    def run(self, index: int) -> list[dict]:
        """Run candidate `index` once more; its executions so far (all attempts)."""
        ref, attempt = self.candidates[index], len(self.runs.get(index, [])) + 1
        code = self.workdir / "code" / f"{index:03d}"
        code = code if code.exists() else self._code(index)
        results = self.workdir / "results" / f"{index:03d}-{ref[:12]}-{attempt}"
        benchmark = code / "benchmark.py" if self.args.harness else bisect.BENCHMARK
        path_entry = None if self.args.harness else code / self.args.subdir
        results.parent.mkdir(parents=True, exist_ok=True)
        print(f"bisect: running {ref[:12]} ({index + 1}/{len(self.candidates)}) -> {results}", flush=True)
        code_exit = bisect.run_harness(self.benchmark_args, results, path_entry, benchmark, results.with_suffix(".log"))
        found = [e for e in metadata.executions(results) if e["row"].get("status") == "ok"]
        if code_exit != 0 or len({e["experiment_id"] for e in found}) != 1:
            raise CannotTell(f"{ref}: the run exited {code_exit} with {len(found)} ok experiment row(s) (bisect needs "
                             f"exactly one experiment): see {results.with_suffix('.log')}")
        for run, group in metadata.runs_of(results, f"bisect {ref}", each_repeat=False):
            self.con.execute("BEGIN TRANSACTION")
            store.insert_run(self.con, run, group)
            self.con.execute("COMMIT")
        self.runs.setdefault(index, []).extend(found)
        return self.runs[index]

    def verdict(self, index: int) -> dict:
        """Candidate `index` against the good ref. While unstable (--retries times), the noisier side runs again:
        the good ref's runs are the reference of every step, so a noisy one is worth another run."""
        retries = 0
        while True:
            after = self.runs.get(index) or self.run(index)
            before = self.runs[0]
            frame = {k: pd.DataFrame([{**e["row"], **{c: e[c] for c in store.EXECUTION_KEY}} for e in side])
                     for k, side in (("before", before), ("after", after))}
            samples = {(e["experiment_id"], e["repeat"], e["started_unix"]): _steady(e) for e in before + after}
            judged = check.judge(frame["before"], frame["after"], self.args.metric, samples, self.rule)
            if judged["verdict"] != "unstable" or retries >= self.args.retries:
                return judged
            retries += 1
            noisier = 0 if judged.get("ref_ci_pct", 0) > judged.get("new_ci_pct", 0) else index
            self.run(noisier)


def _steady(execution: dict):
    try:
        return steady_seconds(execution["steps"], str(execution["folder"]))
    except ValueError:
        return None


def _report(bisection: Bisection, verdicts: dict[int, dict], found: int) -> None:
    for index in sorted(verdicts):
        judged = verdicts[index]
        move = judged.get("delta_pct")
        move = f"{move:+.1f} %" if isinstance(move, float) and move == move else ""
        print(f"  {bisection.candidates[index][:12]}  {judged['verdict']:<16} {move}")
    ref = bisection.candidates[found]
    subject = bisect.git(Path(bisection.args.repo), "log", "-1", "--format=%h %s", ref).strip() \
        if bisection.args.repo else f"{bisection.args.package}=={ref}"
    print(f"first bad: {ref}  ({subject})")


def _search(bisection: Bisection) -> int:
    verdicts = {0: {"verdict": "good (given)"}}
    bisection.run(0)
    last = len(bisection.candidates) - 1
    verdicts[last] = bisection.verdict(last)
    if verdicts[last]["verdict"] != "regression":
        raise CannotTell(f"the bad ref {bisection.candidates[last]} is not a regression against the good one "
                         f"({verdicts[last]['verdict']}: {verdicts[last].get('detail') or 'no significant move'})")

    def is_bad(index: int) -> bool:
        verdicts[index] = bisection.verdict(index)
        if verdicts[index]["verdict"] == "unstable":
            raise CannotTell(f"{bisection.candidates[index]} stayed unstable: {verdicts[index].get('detail')}")
        return verdicts[index]["verdict"] == "regression"

    found, _ = bisect.first_bad(bisection.candidates, is_bad)
    _report(bisection, verdicts, found)
    return 0


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
    if args.workdir and Path(args.workdir).exists():
        problems.append(InputProblem("command line", "--workdir", f"{args.workdir} exists",
                                     "give a new folder (bisect never writes into one it did not make)"))
    return problems


def main(argv: list[str] | None = None) -> int:
    own, benchmark_args = _split(list(sys.argv[1:] if argv is None else argv))
    try:
        args = build_parser().parse_args(own)
    except SystemExit as exc:
        return int(exc.code or 0)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    workdir = Path(args.workdir or Path(args.store).resolve().parent / time.strftime("bisect-%Y%m%d-%H%M%S"))
    try:
        if problems := _problems(args, benchmark_args):
            raise InputError(problems)
        candidates = _candidates(args)
        from tunebench.history.store import open_store

        con = open_store(Path(args.store), read_only=False)
        workdir.mkdir(parents=True)
        print(f"bisect: {len(candidates)} candidates, good {candidates[0][:12]}, bad {candidates[-1][:12]}; runs in "
              f"{workdir}", flush=True)
        try:
            return _search(Bisection(args, benchmark_args, candidates, workdir, con))
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
