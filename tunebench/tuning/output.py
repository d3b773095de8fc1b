"""What `tune` leaves behind: the ranked table (tune.csv), the winner as a ready scenarios file, the summary."""

from __future__ import annotations

import logging
import math
import os
import shlex
from pathlib import Path

import pandas as pd
import yaml

from tunebench.api.matrix import REPO_ROOT
from tunebench.fileio import write_atomic
from tunebench.results.compare.rules import plain_number
from tunebench.tuning.options import OBJECTIVES, TuneOptions
from tunebench.tuning.runs import scenario_file
from tunebench.tuning.search import Outcome, PointState, gpu_seconds, objective_value, score

logger = logging.getLogger(__name__)

TABLE = "tune.csv"
WINNER = "tune-scenarios.yaml"
GIB = 1024**3
# Ranked first: points with a confirming run, then screened ones, then the rest in this order.
_STATE_ORDER = {"confirmed": 0, "noisy": 0, "measured": 0, "screened": 1, "oom": 2, "failed": 3, "not run": 4,
                "pruned": 5}


def _gib(value) -> float | None:
    """GiB to 4 significant digits (a tiny model's 1.6 MB is 0.001524, not 0.002 or 0.00)."""
    return float(f"{value / GIB:.4g}") if isinstance(value, (int, float)) and math.isfinite(value) else None


def _sort_key(s: PointState, options: TuneOptions):
    measured = score(s.final(), options)
    guess = s.expected if s.expected is not None else s.prior  # a score of 0.0 is a score
    return (_STATE_ORDER[s.state], -(measured if measured is not None else guess))


def ranked_table(outcome: Outcome, options: TuneOptions) -> pd.DataFrame:
    """One row per point of the space: rank (measured points), settings, verdict and why, measurements."""
    unit = OBJECTIVES[options.objective][1]
    screened = [score(s.screen, options) for s in outcome.states]
    best = max((v for v in screened if v is not None), default=None)
    rows = []
    states = sorted(outcome.states, key=lambda s: _sort_key(s, options))
    for position, s in enumerate(states, start=1):
        final = s.final()
        measured = s.state in ("confirmed", "noisy", "screened", "measured")
        warning = (final or {}).get("measurement_warning")
        rows.append({
            "rank": position if measured else None, "point": s.point.label, **s.point.factors(),
            "state": s.state, "reason": s.reason,
            # tune's verdict on the run the point is judged by ('' = as steady as its stage asks), and the
            # run's own warning as benchmark.py's rows carry it
            "noise": s.noise if measured else "",
            "measurement_warning": warning.strip() if measured and isinstance(warning, str) else "",
            "winner_confidence": outcome.confidence if s is outcome.winner else "",
            f"objective_{unit}": objective_value(final, options) if measured else None,
            f"screen_{unit}": objective_value(s.screen, options),
            f"confirm_{unit}": objective_value(s.confirm, options),
            f"grid_{unit}": objective_value(s.grid, options),
            "steady_step_time_ci_pct": (final or {}).get("steady_step_time_ci_pct") if measured else None,
            "pred_mem_peak_gib": _gib(s.prediction.get("pred_mem_peak")),
            # --project_to: the point on the other GPU (the objective above is the projection) and how it was made
            **({"measured_tokens_per_second": (final or {}).get("steady_nonpad_tokens_per_second") if measured
                else None, "projected_to": options.project_to, "proj_note": (final or {}).get("proj_note", "")}
               if options.project_to else {}),
            "mem_peak_gib": _gib((final or {}).get("mem_peak_torch_max_allocated_bytes")),
            # unmeasured points: how the search expected them to compare with the best screened one
            "expected_vs_best_pct": round(100 * (math.exp(s.expected - best) - 1), 1)
            if s.expected is not None and best is not None and not measured else None,
            "gpu_seconds": sum(gpu_seconds(r) for r in (s.screen, s.confirm, s.grid) if r) or None,
            "screen_experiment": (s.screen or {}).get("experiment_id"),
            "confirm_experiment": (s.confirm or {}).get("experiment_id"),
            "grid_experiment": (s.grid or {}).get("experiment_id"),
        })
    table = pd.DataFrame(rows)
    table["rank"] = table["rank"].astype("Int64")  # 1, not 1.0 (unranked points stay empty)
    return table


def winner_scenarios(outcome: Outcome, options: TuneOptions, cpu: bool) -> str | None:
    """The winner as a scenarios.yaml: the point's settings with the confirming run's measurement."""
    if outcome.winner is None:
        return None
    w = outcome.winner
    content = scenario_file(options, "confirm", [w.point], cpu, name=lambda stage, p: f"tuned-{p.label}")
    unit = OBJECTIVES[options.objective][1]
    value = objective_value(w.final(), options)
    where = f" projected onto the {options.project_to}" if options.project_to else ""
    header = (f"# Written by `benchmark.py tune --model {options.model}` (objective {options.objective}{where}: "
              f"{plain_number(value, 6)} {unit}, {outcome.confidence}).\n"
              f"# Run it (from the folder tune ran in): {run_command(options)}\n")
    return header + yaml.safe_dump(content, sort_keys=False)


def typed_path(path: Path) -> str:
    """A path the user can type where tune ran: relative to the current directory when below it, else absolute."""
    absolute = Path(os.path.abspath(path))
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(absolute)


def run_command(options: TuneOptions) -> str:
    """The command that runs the winner again, from the directory tune was started in."""
    argv = ["python", typed_path(REPO_ROOT / "benchmark.py"), "--scenarios_config_path",
            typed_path(Path(options.results_output_path) / WINNER), "--num_gpus_matrix", str(options.num_gpus)]
    argv += ["--device", options.device] if options.device != "auto" else []  # the winner's dtype is the device's
    return shlex.join(argv)


def write(outcome: Outcome, options: TuneOptions, cpu: bool) -> pd.DataFrame:
    out = Path(options.results_output_path)
    table = ranked_table(outcome, options)
    write_atomic(out / TABLE, table.to_csv(index=False))
    text = winner_scenarios(outcome, options, cpu)
    if text is not None:
        write_atomic(out / WINNER, text)
    return table


def summary(outcome: Outcome, table: pd.DataFrame, options: TuneOptions, cpu: bool = False) -> str:
    """What the user reads at the end: the leaders, the counts, the GPU time, the files."""
    unit = OBJECTIVES[options.objective][1]
    counts = table["state"].value_counts().to_dict()
    shown = table[table["rank"].notna()].head(10)
    columns = ["rank", "point", "state", f"objective_{unit}", "steady_step_time_ci_pct", "pred_mem_peak_gib",
               "mem_peak_gib"]
    lines = [shown[columns].to_string(index=False) if len(shown) else "(no point was measured)", ""]
    lines += [f"! {row.point}: not steady: {row.noise}" for row in shown.itertuples() if row.noise]
    lines.append(f"space: {len(table)} points; " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if options.project_to:
        lines.append(f"ranked for the {options.project_to}: each run here projected onto it (docs/guides/plan.md, "
                     "\"Projection\": host-bound points are the least certain), and pruned where it would not fit it")
    if cpu:
        lines.append("mem_peak_gib: the CUDA allocator's measured peak, which a CPU run has none of (its tensors by "
                     "category: raw_summary.csv's scan_mem_* columns)")
    lines.append(f"memory margin: {outcome.margin.fraction:.1%} ({outcome.margin.source})")
    lines.append(f"search stopped: {outcome.stop_reason}")
    what = "process time (CPU: processes × wall time)" if cpu else "GPU time"
    lines.append(f"{what} spent: {outcome.gpu_seconds / 60:.1f} min ({len(outcome.runs)} runs)")
    out = Path(options.results_output_path)
    if outcome.winner is not None:
        value = objective_value(outcome.winner.final(), options)
        lines.append(f"winner: {outcome.winner.point.label}: {plain_number(value, 6)} {unit} ({outcome.confidence})")
        lines.append(f"wrote {out / TABLE}, {out / WINNER} and {out / 'report.html'}")
    else:
        lines.append(f"no winner: {outcome.confidence}; wrote {out / TABLE}")
    return "\n".join(lines)
