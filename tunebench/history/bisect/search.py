"""`bisect`'s search: the first bad git ref (or package version) between a good and a bad one, for one experiment,
from typed BisectOptions (the command line reads them in tunebench.cli.bisect).

Each step runs the experiment with the candidate's code first on PYTHONPATH (candidates.py), adds the run to the
history store (label `bisect <ref>`) and judges it against the good ref with compare's statistics (a regression =
bad); first_bad halves the candidates.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from tunebench.errors import InputError, InputProblem
from tunebench.history import check, metadata, store
from tunebench.history.bisect import candidates as candidate
from tunebench.results.compare import rules
from tunebench.results.compare.samples import steady_seconds

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BisectOptions:
    """What to bisect: a git repository's refs or a package's versions, good to bad, and how to judge a step."""

    good: str  # a ref (or version) without the regression
    bad: str  # a later one with it
    repo: str | None = None  # a git repository holding the code under test
    package: str | None = None  # or a package on the index pip uses
    versions: tuple[str, ...] = ()  # --package: the versions in order, good..bad
    pip_args: str = ""  # --package: extra pip install arguments
    subdir: str = ""  # --repo: the folder of the checkout to import from
    harness: bool = False  # --repo is tunebench: run the candidate's benchmark.py
    metric: str = "steady_step_time_median"  # the metric that regressed
    min_effect: float | None = None  # minimum effect in % (None: compare's)
    retries: int = 2  # re-runs of the noisier side while a step's verdict is unstable


class CannotTell(Exception):
    """The search cannot go on: a run failed, or stayed unstable, or the bad ref is not worse."""


def candidates(options: BisectOptions) -> list[str]:
    """The refs (or versions) from the good one to the bad one, in order."""
    if options.repo:
        return candidate.commits_between(Path(options.repo), options.good, options.bad)
    versions = list(options.versions or [])
    if len(versions) < 2 or versions[0] != options.good or versions[-1] != options.bad:
        raise InputError([InputProblem("command line", "--versions", "must list the versions in order, from --good "
                                       "to --bad", f"e.g. --versions {options.good} ... {options.bad}")])
    return versions


class Bisection:
    """The runs of one bisection: each candidate's code, its results folder, its rows in the store."""

    def __init__(self, options: BisectOptions, benchmark_args: list[str], candidates: list[str], workdir: Path, con):
        self.options, self.benchmark_args, self.candidates = options, benchmark_args, candidates
        self.workdir, self.con = workdir, con
        self.rule = rules.rule_for(options.metric, min_effects={options.metric: options.min_effect}
                                   if options.min_effect is not None else None)
        self.runs: dict[int, list[dict]] = {}

    def _code(self, index: int) -> Path:
        ref = self.candidates[index]
        folder = self.workdir / "code" / f"{index:03d}"
        if self.options.repo:
            return candidate.export_commit(Path(self.options.repo), ref, folder)
        return candidate.install_version(self.options.package, ref, folder, self.options.pip_args.split())

    def run(self, index: int) -> list[dict]:
        """Run candidate `index` once more; its executions so far (all attempts)."""
        ref, attempt = self.candidates[index], len(self.runs.get(index, [])) + 1
        code = self.workdir / "code" / f"{index:03d}"
        code = code if code.exists() else self._code(index)
        results = self.workdir / "results" / f"{index:03d}-{ref[:12]}-{attempt}"
        benchmark = code / "benchmark.py" if self.options.harness else candidate.BENCHMARK
        path_entry = None if self.options.harness else code / self.options.subdir
        results.parent.mkdir(parents=True, exist_ok=True)
        print(f"bisect: running {ref[:12]} ({index + 1}/{len(self.candidates)}) -> {results}", flush=True)
        code_exit = candidate.run_harness(self.benchmark_args, results, path_entry, benchmark,
                                          results.with_suffix(".log"))
        try:
            found = [e for e in metadata.executions(results) if e["row"].get("status") == "ok"]
        except InputError as exc:  # the candidate's own rows (a tunebench of another version): it cannot be judged
            raise CannotTell(f"{ref}: its results hold a value no run produces ({exc.problems[0]})") from None
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
            judged = check.judge(frame["before"], frame["after"], self.options.metric, samples, self.rule)
            if judged["verdict"] != "unstable" or retries >= self.options.retries:
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
    subject = candidate.git(Path(bisection.options.repo), "log", "-1", "--format=%h %s", ref).strip() \
        if bisection.options.repo else f"{bisection.options.package}=={ref}"
    print(f"first bad: {ref}  ({subject})")


def first_bad(candidates: list[str], is_bad: Callable[[int], bool]) -> tuple[int, list[int]]:
    """Binary search of candidates[0] (good) .. candidates[-1] (bad, confirmed by the caller): the index of the first
    bad one and the indices probed, in order."""
    low, high, probed = 0, len(candidates) - 1, []
    while high - low > 1:
        middle = (low + high) // 2
        probed.append(middle)
        if is_bad(middle):
            high = middle
        else:
            low = middle
    return high, probed


def search(bisection: Bisection) -> int:
    """The first bad candidate, printed with each verdict on the way (0); CannotTell when it cannot be had."""
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

    found, _ = first_bad(bisection.candidates, is_bad)
    _report(bisection, verdicts, found)
    return 0
