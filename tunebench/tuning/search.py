"""The search: prune, screen the likely best points with short runs, confirm the leaders, stop on budget.

Deterministic given the rows it is fed: re-running the same `tune` on the same folder reuses every finished
experiment (resume) and so walks the same path to where the last run stopped, then goes on.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tunebench.tuning import prune
from tunebench.tuning.expectation import expected, prior
from tunebench.tuning.failure_text import one_line
from tunebench.tuning.options import TuneOptions
from tunebench.tuning.space import CATEGORICAL, Point
from tunebench.tuning.stages import CONFIRM, GRID, SCREEN, finite_number, noise
from tunebench.vocabulary import Status

logger = logging.getLogger(__name__)

__all__ = ["BATCH", "CONFIRM", "GRID", "SCREEN", "Outcome", "PointState", "Search"]
BATCH = 2  # points per screening launch: small enough to steer by, large enough to amortise a launch
NEIGHBOUR_WIDTH = 3  # the best point's neighbours are checked when expected within this many tolerances
# A stage's runner: the rows of these points' experiments, in the same order.
Runner = Callable[[str, list[Point]], list[dict[str, Any]]]


@dataclass
class PointState:
    """What the search did with one point, and what it measured."""

    point: Point
    prediction: dict[str, Any]
    prior: float
    # pruned | not run | screened | confirmed | noisy (its confirming run was not steady) | measured (--grid) |
    # oom | failed
    state: str = "not run"
    reason: str = ""
    noise: str = ""  # why the run it is judged by was not as steady as its stage asks ('' = it was)
    expected: float | None = None
    screen: dict[str, Any] | None = None
    confirm: dict[str, Any] | None = None
    grid: dict[str, Any] | None = None

    def final(self) -> dict[str, Any] | None:
        """The row the point is judged by: its confirming run, else its grid or screening run."""
        return self.confirm or self.grid or self.screen


@dataclass
class Outcome:
    states: list[PointState]
    margin: prune.Margin
    winner: PointState | None
    confidence: str
    stop_reason: str
    gpu_seconds: float
    runs: list[dict[str, Any]] = field(default_factory=list)


def score(row: dict[str, Any] | None, options: TuneOptions) -> float | None:
    """The row's objective as a log, higher better (None when the run measured nothing usable)."""
    if not row or row.get("status") != Status.OK:
        return None
    value = finite_number(row.get(options.objective_column))
    if value is None or value <= 0:
        return None
    return -math.log(value) if options.objective == "joules_per_token" else math.log(value)


def objective_value(row: dict[str, Any] | None, options: TuneOptions) -> float | None:
    """The objective in its own unit (tokens/s, J/token or $ per million tokens)."""
    s = score(row, options)
    if s is None:
        return None
    if options.objective == "cost":
        return options.gpu_hour_price * options.num_gpus / 3600 / math.exp(s) * 1e6
    return math.exp(-s) if options.objective == "joules_per_token" else math.exp(s)


def gpu_seconds(row: dict[str, Any]) -> float:
    wall = finite_number(row.get("experiment_wall_seconds")) or 0.0
    return wall * (finite_number(row.get("num_gpus")) or 1)


def _neighbours(a: Point, b: Point, sizes: list[int]) -> bool:
    """One setting apart; micro-batches count as apart by one when adjacent in the space's sorted sizes."""
    fa, fb = a.factors(), b.factors()
    differ = [k for k in fa if fa[k] != fb[k] and k != "grad_accum"]
    if differ == ["micro_batch"]:
        return abs(sizes.index(a.micro_batch) - sizes.index(b.micro_batch)) == 1
    return len(differ) == 1


def _ci(row: dict[str, Any]) -> float:
    """Half-width of the row's score's 95 % interval (from the median step time's)."""
    return math.log1p((finite_number(row.get("steady_step_time_ci_pct")) or 0.0) / 100)


class Search:
    def __init__(self, points: list[Point], predictions: dict[Point, dict[str, Any]], options: TuneOptions,
                 device_type: str, margin: prune.Margin):
        self.options, self.margin = options, margin
        self.states = {p: PointState(p, predictions.get(p, {}), prior(p, options.max_seq_len, device_type))
                       for p in points}
        self.runs: list[dict[str, Any]] = []
        self.budget_s = options.budget_minutes * 60 if options.budget_minutes else None

    # ---------------------------------------------------------------- bookkeeping
    def spent(self) -> float:
        return sum(gpu_seconds(r) for r in self.runs)

    def _over_budget(self) -> bool:
        return self.budget_s is not None and self.spent() >= self.budget_s

    def _prune(self) -> None:
        for s in self.states.values():
            if s.state in ("not run", "pruned"):
                runs, why = prune.verdict(s.prediction, self.margin)
                if runs and "target" in s.prediction:  # --project_to: it must fit the other GPU as well
                    fits, why_target = prune.verdict(s.prediction["target"], self.margin)
                    runs, why = fits, f"{why}; on the {self.options.project_to}: {why_target}"
                s.state, s.reason = ("not run", why) if runs else ("pruned", why)

    def _record(self, stage: str, states: list[PointState], rows: list[dict[str, Any]]) -> None:
        for s, row in zip(states, rows, strict=True):
            self.runs.append({**row, "tune_stage": stage, "tune_point": s.point.label})
            setattr(s, stage, row)
            status = row.get("status")
            s.noise = noise(row, stage)
            if status == Status.OOM:
                s.state, s.reason = "oom", f"{stage} run out of memory" + (
                    f" (predicted: {s.reason})" if stage == GRID else "")
                if stage == GRID:  # the reference grid runs everything; it teaches nothing to itself
                    continue
                self.margin = prune.taught_by_oom(self.margin, s.point.label, s.prediction)
                self._prune()
            elif score(row, self.options) is None:
                s.state = "failed"
                error = one_line(row.get("error_messages"))
                if status == Status.OK and str(row.get("proj_note", "")).startswith("not projected"):
                    error = row["proj_note"]  # --project_to: the run measured, its projection could not be made
                s.reason = f"{stage} run: {status}" + (f" ({error})" if error else ", objective not measured")
            else:
                s.state = {CONFIRM: "noisy" if s.noise else "confirmed", GRID: "measured"}.get(stage, "screened")
                s.reason = f"measured (before launch: {s.reason})" if stage == GRID else \
                    s.reason if s.reason.startswith("screened ") else f"{stage}ed"
                if s.state == "noisy":
                    s.reason = "its confirming run was not steady (see noise): it confirms nothing"

    # ---------------------------------------------------------------- stages
    def _tolerance(self) -> float:
        """--tolerance_pct as a difference of scores (logs)."""
        return math.log1p(-self.options.tolerance_pct / 100)

    def _screen(self, run: Runner) -> str:
        tolerance = self._tolerance()
        while True:
            if self._over_budget():
                return "budget spent while screening"
            measured = {s.point: score(s.screen, self.options) for s in self.states.values()
                        if s.state == "screened"}
            fitting = [s for s in self.states.values() if s.state in ("not run", "screened")]
            guess = expected([s.point for s in fitting], {s.point: s.prior for s in fitting}, measured)
            for s in fitting:
                s.expected = guess[s.point]
            waiting = sorted((s for s in fitting if s.state == "not run"), key=lambda s: -s.expected)
            uncovered = self._uncovered_levels(fitting, waiting)
            if uncovered:
                self._record(SCREEN, uncovered[:BATCH], run(SCREEN, [s.point for s in uncovered[:BATCH]]))
                continue
            if measured:
                best = max(measured.values())
                for s in waiting:
                    if s.expected < best + tolerance:
                        s.reason = (f"not screened: expected {math.exp(s.expected - best) - 1:+.1%} against the best "
                                    f"screened, beyond --tolerance_pct {self.options.tolerance_pct:g}")
                waiting = [s for s in waiting if s.expected >= best + tolerance]
            if not waiting:
                waiting = self._unchecked_neighbours(fitting, tolerance)
            if not waiting:
                return "every point expected within the tolerance, and every near neighbour of the best, was screened"
            batch = waiting[:BATCH]
            self._record(SCREEN, batch, run(SCREEN, [s.point for s in batch]))

    @staticmethod
    def _uncovered_levels(fitting: list[PointState], waiting: list[PointState]) -> list[PointState]:
        """First, one screened point per level of every setting (the best expected one with it): the prior's
        guess of a setting's effect (LoRA against full fine-tuning, checkpointing, an optimizer) can be wrong by
        more than any tolerance on a given model and GPU, and a level never measured is never corrected."""
        chosen: list[PointState] = []
        if waiting and not any(s.state == "screened" for s in fitting):
            chosen.append(waiting[0])  # the most promising point opens the search
        for factor in CATEGORICAL:
            levels = {s.point.factors()[factor] for s in fitting}
            if len(levels) < 2:
                continue
            for level in sorted(levels, key=str):
                covered = [s for s in fitting if s.point.factors()[factor] == level
                           and (s.state == "screened" or s in chosen)]
                if not covered:
                    candidates = [s for s in waiting if s.point.factors()[factor] == level]
                    if candidates:
                        chosen.append(candidates[0])
                        candidates[0].reason = f"screened to measure {factor} = {level}"
        return chosen

    def _unchecked_neighbours(self, fitting: list[PointState], tolerance: float) -> list[PointState]:
        """Before stopping, the best point's neighbours (one setting changed, the micro-batch one step) expected
        within NEIGHBOUR_WIDTH tolerances: a check of the model's corrections where they matter most, since a
        factor measured at few points is corrected only part of the way (ridge)."""
        screened = [s for s in fitting if s.state == "screened"]
        if not screened:
            return []
        best = max(screened, key=lambda s: s.expected)
        sizes = sorted({s.point.micro_batch for s in fitting})
        near = [s for s in fitting if s.state == "not run" and _neighbours(best.point, s.point, sizes)
                and s.expected >= best.expected + NEIGHBOUR_WIDTH * tolerance]
        for s in near:
            s.reason = f"screened as a neighbour of the best ({best.point.label})"
        return sorted(near, key=lambda s: -s.expected)

    def _confirm(self, run: Runner) -> None:
        screened = sorted((s for s in self.states.values() if s.state == "screened"),
                          key=lambda s: -score(s.screen, self.options))
        if not screened or self._over_budget():
            return
        best = score(screened[0].screen, self.options)
        leaders = [s for s in screened if score(s.screen, self.options) >= best + self._tolerance()
                   ][: self.options.confirm]
        self._record(CONFIRM, leaders, run(CONFIRM, [s.point for s in leaders]))

    def _verdict(self, stop_reason: str) -> Outcome:
        confirmed = sorted((s for s in self.states.values() if s.state in ("confirmed", "noisy")),
                           key=lambda s: -score(s.confirm, self.options))
        screened = sorted((s for s in self.states.values() if s.state == "screened"),
                          key=lambda s: -score(s.screen, self.options))
        if confirmed:
            winner = confirmed[0]
            if len(confirmed) == 1:
                confidence = "the only leader within the tolerance after screening"
            else:
                second = confirmed[1]
                low = score(winner.confirm, self.options) - _ci(winner.confirm)
                high = score(second.confirm, self.options) + _ci(second.confirm)
                gap = math.exp(score(winner.confirm, self.options) - score(second.confirm, self.options)) - 1
                confidence = (f"ahead of {second.point.label} by {gap:.1%}, outside both 95 % intervals"
                              if low > high else f"ahead of {second.point.label} by {gap:.1%}, within the 95 % "
                              "intervals: the two are equivalent at this precision")
            if winner.noise:  # a busy host: neither the measurement nor any comparison with it holds
                confidence = (
                    f"unconfirmed: its confirming run was noisy ({winner.noise}); run tune again on a quiet machine"
                )
        elif screened:
            winner = screened[0]
            confidence = "unconfirmed (screening run only)" + (f"; the run was noisy ({winner.noise})"
                                                               if winner.noise else "")
        else:
            winner, confidence = None, "no point ran to a measurement"
        return Outcome(list(self.states.values()), self.margin, winner, confidence, stop_reason, self.spent(),
                       self.runs)

    def run_grid(self, runner: Runner) -> Outcome:
        """`--grid`: every point, predicted to fit or not, with the standard measurement (the reference a search
        is judged against: its best, its GPU time, and whether the pruned points really did not fit)."""
        self._prune()
        states = list(self.states.values())
        self._record(GRID, states, runner(GRID, [s.point for s in states]))
        measured = sorted((s for s in states if s.state == "measured"), key=lambda s: -score(s.grid, self.options))
        winner = measured[0] if measured else None
        confidence = "the whole grid measured" if winner else "nothing measured"
        if winner is not None and winner.noise:
            confidence = f"unconfirmed: the whole grid measured, but the winner's run was noisy ({winner.noise})"
        return Outcome(states, self.margin, winner, confidence,
                       "grid: every point ran", self.spent(), self.runs)

    def run(self, runner: Runner) -> Outcome:
        self._prune()
        reason = self._screen(runner)
        if self._over_budget():
            return self._verdict(reason if "budget" in reason else "budget spent")
        self._confirm(runner)
        return self._verdict(reason + ("; budget spent by the confirming runs" if self._over_budget() else ""))
