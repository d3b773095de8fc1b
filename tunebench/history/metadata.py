"""What `history add` reads from a results folder: its executions (row, steps) grouped into runs, and each run's
metadata (tunebench commit, package versions, CUDA, driver, GPU, host, start) and identity."""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path
from typing import Any

from tunebench.errors import InputError, InputProblem
from tunebench.readback import Unreadable, load_json
from tunebench.results.summaries import newest_rows

logger = logging.getLogger(__name__)

STEPS_FILE = "steps.json"
METADATA_COLUMNS = ("tunebench_git_sha", "torch_version", "transformers_version", "trl_version", "peft_version",
                    "accelerate_version", "datasets_version", "cuda_version", "driver_version", "gpu_name",
                    "gpu_count", "host_name")


def _steps(folder: Path) -> list[dict[str, Any]]:
    try:
        steps = load_json(folder / STEPS_FILE, list)
    except FileNotFoundError:
        return []
    except (OSError, Unreadable) as exc:
        logger.warning("%s: its steps are not stored", exc)
        return []
    return [s for s in steps if isinstance(s, dict)]


def _started(row: dict[str, Any], folder: Path) -> float:
    for key in ("experiment_start_unix", "process_start_unix"):
        value = row.get(key)  # finite and within every clock's range: results.row_values checked it
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return (folder / "results.json").stat().st_mtime


def executions(results: Path) -> list[dict[str, Any]]:
    """Every finished execution of a results folder (the newest folder of each experiment and repeat, as the CSVs
    take it): its identity, row and steps. Launched experiments that wrote no results.json are left out. InputError
    naming the folder's files when a row holds a value no run produces (the store never takes it)."""
    problems: list[InputProblem] = []
    try:
        found = [{"experiment_id": row["experiment_id"], "repeat": int(row.get("repeat") or 1),
                  "started_unix": _started(row, folder), "row": row, "steps": _steps(folder), "folder": folder}
                 for folder, row in newest_rows(results, incomplete=False, problems=problems)]
    except OSError as exc:  # the results folder, not the store: said so
        raise InputError([InputProblem(str(results), "results folder", f"cannot read {exc.filename or results}: "
                                       f"{exc.strerror or exc}", "give a results folder you may read")]) from None
    if problems:
        raise InputError(problems)
    return sorted(found, key=lambda e: (e["started_unix"], e["experiment_id"]))


def run_id(group: list[dict[str, Any]]) -> str:
    """The same executions are the same run, wherever the folder lies and however often it is added."""
    identity = "\n".join(sorted(f"{e['experiment_id']}:{e['repeat']}:{e['started_unix']!r}" for e in group))
    return hashlib.sha256(identity.encode()).hexdigest()[:12]


def _first(group: list[dict[str, Any]], column: str):
    values = [e["row"].get(column) for e in group]
    return next((v for v in values if v not in (None, "") and v == v), None)


def describe_run(group: list[dict[str, Any]], label: str | None, source: str) -> dict[str, Any]:
    """The runs row of a group of executions."""
    return {"run_id": run_id(group), "label": label, "source": source,
            "started_unix": min(e["started_unix"] for e in group), "added_unix": time.time(),
            "experiments": len(group), **{c: _first(group, c) for c in METADATA_COLUMNS}}


def runs_of(results: Path, label: str | None, each_repeat: bool) -> list[tuple[dict[str, Any], list[dict]]]:
    """(run, executions) of a results folder: one run, or one per repeat with `each_repeat`."""
    found = executions(results)
    if not found:
        return []
    groups = {}
    for execution in found:
        groups.setdefault(execution["repeat"] if each_repeat else 0, []).append(execution)
    source = str(results.resolve())
    return [(describe_run(group, label, source + (f" (repeat {k})" if each_repeat else "")), group)
            for k, group in sorted(groups.items())]
