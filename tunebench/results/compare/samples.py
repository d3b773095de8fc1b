"""Steady step times behind result rows: read from experiment folders or a reference's sidecar; write a reference.

A results directory keeps them in each experiment folder's steps.json (every optimizer step, `steady` marking the
steady window). A reference CSV has no folders, so its step times live next to it in `<csv stem>.samples.json`:

    {"version": 1, "experiments": {"<experiment_id>": {"runs": [[0.1801, 0.1799, ...], ...]}}}

one run per CSV row of that experiment_id (rows with the same id are its repeats), each run the steady step
seconds in step order (order matters: the test resamples blocks of consecutive steps). `write_reference` makes
both files from one or more results directories (`benchmark.py compare --write_reference refs/x.csv --results
DIR [DIR ...]`).
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd

from tunebench.fileio import write_atomic
from tunebench.readback import Unreadable, load_experiment_file, load_json
from tunebench.results.compare.reading import CompareInputError, load_csv
from tunebench.results.folder import RAW_SUMMARY, experiment_folders
from tunebench.vocabulary import Status

logger = logging.getLogger(__name__)

VERSION = 1
SUFFIX = ".samples.json"
STEPS_FILE = "steps.json"

Runs = dict[str, list[np.ndarray]]  # experiment_id -> runs, each the steady step seconds in step order


def sidecar_path(csv: str | os.PathLike) -> Path:
    """refs/cpu.csv -> refs/cpu.samples.json."""
    csv = Path(csv)
    return csv.with_name(csv.stem + SUFFIX)


def _positive_seconds(values, where: str) -> np.ndarray:
    if not isinstance(values, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                               for v in values):
        raise ValueError(f"{where}: expected a list of step seconds (numbers)")
    array = np.asarray(values, dtype=float)
    if not np.all(np.isfinite(array) & (array > 0)):
        raise ValueError(f"{where}: step seconds must be finite and > 0")
    return array


def steady_seconds(steps, where: str) -> np.ndarray:
    """The steady steps' seconds of one steps.json, in step order."""
    if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
        raise ValueError(f"{where}: expected a list of step records")
    steady = [s for s in steps if s.get("steady") is True]
    if not all(isinstance(s.get("step", 0), int) and not isinstance(s.get("step"), bool) for s in steady):
        raise ValueError(f"{where}: expected whole step numbers")
    ordered = sorted(steady, key=lambda s: s.get("step", 0))
    return _positive_seconds([s.get("seconds") for s in ordered], where)


def read_sidecar(path: Path) -> Runs:
    """The runs of a `<csv stem>.samples.json`; CompareInputError naming the file and the fix when malformed."""
    fix = "regenerate it with `benchmark.py compare --write_reference <csv> --results <dir>`, or delete it"
    try:
        data = load_json(path)
    except (OSError, Unreadable) as exc:
        raise CompareInputError(f"step samples {path}: unreadable ({getattr(exc, 'reason', exc)}); {fix}") from None
    if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("experiments"), dict):
        raise CompareInputError(f"step samples {path}: expected {{\"version\": {VERSION}, \"experiments\": {{...}}}}; "
                                f"{fix}")
    runs: Runs = {}
    for experiment, entry in data["experiments"].items():
        where = f"step samples {path}: experiment {experiment!r}"
        if not isinstance(entry, dict) or not isinstance(entry.get("runs"), list) or not entry["runs"]:
            raise CompareInputError(f"{where}: expected {{\"runs\": [[seconds, ...], ...]}}; {fix}")
        try:
            runs[experiment] = [_positive_seconds(run, f"{where} run {i + 1}") for i, run in enumerate(entry["runs"])]
        except ValueError as exc:
            raise CompareInputError(f"{exc}; {fix}") from None
    return runs


def _identity(folder: Path) -> tuple[str, int] | None:
    """(experiment_id, repeat) of an experiment folder, from its own files."""
    for name in ("results.json", "spec.json", "config.json"):
        try:
            data = load_experiment_file(folder / name)
        except (OSError, Unreadable):
            continue
        return data["experiment_id"], data.get("repeat", 1)
    return None


def folder_runs(results_dir: Path) -> tuple[Runs, list[str]]:
    """The runs of every experiment of a results directory, one per repeat (`--repeats`) in repeat order, each
    from the folder with the newest results.json, as raw_summary.csv takes it; and the reasons folders gave none
    (no or unreadable steps.json)."""
    newest: dict[tuple[str, int], tuple[float, Path]] = {}
    for folder in experiment_folders(results_dir):
        identity = _identity(folder)
        try:
            stamp = (folder / "results.json").stat().st_mtime
        except OSError:
            continue  # no results.json: the experiment never finished, its row is not ok
        if identity and (identity not in newest or stamp > newest[identity][0]):
            newest[identity] = (stamp, folder)
    runs: Runs = {}
    problems = []
    for (experiment, _), (_, folder) in sorted(newest.items()):
        path = folder / STEPS_FILE
        try:
            run = steady_seconds(load_json(path, list), str(path))
            runs.setdefault(experiment, []).append(run)
        except FileNotFoundError:
            problems.append(f"{folder.name}: no {STEPS_FILE}")
        except (OSError, ValueError) as exc:
            problems.append(f"{folder.name}: {exc}")
    return runs, problems


def load_samples(path: str | os.PathLike) -> tuple[Runs, str]:
    """Step samples for a compare input (a results directory or a CSV), and one line saying where they came from.

    A CSV uses its sidecar; without one, a `raw_summary.csv` uses the experiment folders beside it.
    """
    path = Path(path)
    if path.is_file():
        sidecar = sidecar_path(path)
        if sidecar.is_file():
            runs = read_sidecar(sidecar)
            return runs, f"`{sidecar}` ({len(runs)} experiments)"
        if path.name != RAW_SUMMARY:
            return {}, f"none (no `{sidecar}`)"
        path = path.parent
    if not path.is_dir():
        return {}, "none"
    runs, problems = folder_runs(path)
    where = f"{len(runs)} experiment folders of `{path}`"
    if problems:
        where += f"; without samples: {'; '.join(problems[:5])}" + (" ..." if len(problems) > 5 else "")
    return runs, where


def _sidecar_text(runs: Runs) -> str:
    """One line per experiment: diffable, and exact (json writes a float's shortest round-tripping repr)."""
    lines = [f"  {json.dumps(experiment)}: {json.dumps({'runs': [list(map(float, run)) for run in entry]})}"
             for experiment, entry in runs.items()]
    return f'{{"version": {VERSION}, "experiments": {{\n' + ",\n".join(lines) + "\n}}\n"


def write_reference(results_dirs: list[str | os.PathLike], csv_out: str | os.PathLike) -> tuple[Path, Path, str]:
    """The ok rows of every results directory as one reference CSV, their steady step times as its sidecar.

    Returns (csv, sidecar, summary line). Rows of the same experiment in several directories are its repeats,
    one run each. Reference files hold ok rows only (a failure belongs to the evidence, not to the baseline).
    """
    csv_out = Path(csv_out)
    if csv_out.suffix != ".csv":
        raise CompareInputError(f"--write_reference {csv_out}: the reference must be a .csv file (its samples go "
                                f"to <name>{SUFFIX} beside it)")
    frames, runs, missing = [], {}, []
    for directory in map(Path, results_dirs):
        if not (directory / RAW_SUMMARY).is_file():
            raise CompareInputError(f"--results {directory}: no {RAW_SUMMARY}; pass results directories made by "
                                    "the benchmark (their experiment folders hold the step times)")
        frame = load_csv(directory / RAW_SUMMARY, "results")
        if "status" in frame.columns:
            frame = frame[frame["status"].astype(str).str.strip().str.lower() == Status.OK]
        if "experiment_id" not in frame.columns:
            raise CompareInputError(f"--results {directory / RAW_SUMMARY}: no experiment_id column")
        found, _ = folder_runs(directory)
        for experiment in dict.fromkeys(frame["experiment_id"].astype(str)):  # once each: found holds every repeat
            if experiment in found:
                runs.setdefault(experiment, []).extend(found[experiment])
            else:
                missing.append(f"{directory}/{experiment}")
        frames.append(frame)
    table = pd.concat(frames, ignore_index=True, sort=False)
    if table.empty:
        raise CompareInputError(f"--results {', '.join(map(str, results_dirs))}: no ok rows to make a reference of")
    sidecar = sidecar_path(csv_out)
    write_atomic(csv_out, table.to_csv(index=False))
    write_atomic(sidecar, _sidecar_text(runs))
    summary = (f"wrote {csv_out} ({len(table)} ok rows) and {sidecar} ({len(runs)} experiments, "
               f"{sum(len(r) for r in runs.values())} runs)")
    if missing:
        summary += f"; no steady step times for {len(missing)} row(s) ({', '.join(missing[:5])}): compare judges " \
                   "them by the threshold rule"
    logger.info(summary)
    return csv_out, sidecar, summary


def median_of_runs(runs: list[np.ndarray]) -> float:
    """What the CSV holds for these runs: the median over runs of each run's median step time."""
    return float(np.median([np.median(run) for run in runs])) if runs else math.nan
