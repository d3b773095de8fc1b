"""What each `history` subcommand does once its input is checked: add runs, check them, chart them, export them."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from tunebench.errors import InputError, InputProblem
from tunebench.history import metadata, store

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def written(option: str, target: Path, fix: str) -> Iterator[None]:
    """Within it, a write that fails (the filesystem's refusal, or DuckDB's when it writes a file) is one problem
    naming `option` and the file: the output's, never the store's (store.failures_named is the store's)."""
    try:
        yield
    except OSError as exc:
        raise InputError([InputProblem("command line", option, f"cannot write {exc.filename or target}: "
                                       f"{exc.strerror or exc}", fix)]) from None
    except Exception as exc:
        if not store.is_duckdb_error(exc):
            raise
        raise InputError([InputProblem("command line", option, f"cannot write {target}: {store.first_line(exc)}",
                                       fix)]) from None


def read_runs(folders: list[str], label: str | None, each_repeat: bool) -> list[tuple[Path, list]]:
    """(folder, its runs) of every results folder, read before the store is opened: what is wrong with a folder is
    said as the folder's (InputError naming its files), never as the store's."""
    found, problems = [], []
    for results in map(Path, folders):
        try:
            found.append((results, metadata.runs_of(results, label, each_repeat)))
        except InputError as exc:
            problems += exc.problems
    if problems:
        raise InputError(problems)
    return found


def _spelling_problems(con, group: list[dict]) -> list[InputProblem]:
    """Keys of the new rows that differ only in case from a column the store already holds: one column to DuckDB,
    so the folder's key is named (the store is fine)."""
    stored = {name.lower(): name for name in store.existing_columns(con, "experiments")}
    return [InputProblem(str(e["folder"] / "results.json"), key, f"the store's column is spelt {stored[key.lower()]!r}"
                         " (DuckDB's names ignore case)", f"rename the key {stored[key.lower()]!r}")
            for e in group for key in e["row"] if key.lower() in stored and key != stored[key.lower()]]


def add(found: list[tuple[Path, list]], path: Path, con) -> int:
    """Each results folder's runs (read_runs), one transaction each; a run already stored is skipped."""
    added = 0
    for results, runs in found:
        if not runs:
            print(f"{results}: no finished experiment to add", flush=True)
        for run, group in runs:
            if problems := _spelling_problems(con, group):
                raise InputError(problems)
            con.execute("BEGIN TRANSACTION")
            try:
                known = store.stored_executions(con)
                fresh = [e for e in group if (e["experiment_id"], e["repeat"], e["started_unix"]) not in known]
                if fresh:
                    store.insert_run(con, {**run, "experiments": len(fresh)}, fresh)
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
            added += bool(fresh)
            print(f"{run['source']}: " + (f"run {run['run_id']} added ({len(fresh)} experiment rows)" if fresh else
                                          f"already in the store (run {run['run_id']}): nothing added"), flush=True)
    total = con.execute("SELECT count(*) FROM runs").fetchone()[0]
    con.close()
    print(f"{path}: {total} run(s); {added} added now")
    return 0


def load(con, path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The ok rows of the store at `path` with each run's number (1-based, in start order) and label, and every
    stored step."""
    tables = {t for (t,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    if not {"runs", "experiments", "steps"} <= tables:
        raise InputError([InputProblem(str(path), "--store", "not a tunebench history store (no runs table)",
                                       "give a store written by `benchmark.py history add`")])
    rows = store.frame(con, "SELECT e.*, r.label AS run_label, r.started_unix AS run_started, r.source AS source, "
                            "dense_rank() OVER (ORDER BY r.started_unix, r.run_id) AS run_number "
                            "FROM experiments e JOIN runs r USING (run_id) ORDER BY run_number, e.started_unix")
    steps = store.frame(con, "SELECT experiment_id, repeat, started_unix, step, seconds, steady FROM steps")
    if rows.empty:
        raise InputError([InputProblem(str(path), "--store", "the store holds no run yet",
                                       "add results first: benchmark.py history add RESULTS")])
    if "status" in rows.columns:
        rows = rows[rows["status"].astype(str).str.lower() == "ok"]
    return rows, steps


def _metric_problem(rows: pd.DataFrame, metric: str) -> None:
    """`metric` is a numeric column of the store: a change point is found in a series of numbers (a text column
    such as `scenario` has none, and would pass over zero experiments)."""
    numeric = [c for c in rows.columns if c.startswith(("steady_", "scan_mem", "mem_"))
               and pd.api.types.is_numeric_dtype(rows[c])][:8]
    if metric not in rows.columns:
        raise InputError([InputProblem("command line", "--metric", f"{metric!r} is not a column of the store",
                                       f"e.g. {', '.join(numeric)}")])
    if store.column_type(metric) != "DOUBLE":
        raise InputError([InputProblem("command line", "--metric", f"{metric!r} is not a numeric column of the store "
                                       "(its values are text): a change point needs a number per run",
                                       f"e.g. {', '.join(numeric)}")])


def check(metric: str, min_effect: float | None, path: Path, con) -> int:
    """The change points of `metric` per experiment; 1 when a newest run opened a worse regime."""
    from tunebench.history.check import check as run_check
    from tunebench.history.check import describe

    rows, steps = load(con, path)
    con.close()
    _metric_problem(rows, metric)
    min_effects = {metric: min_effect} if min_effect is not None else None
    findings = run_check(rows, steps, metric, min_effects)
    runs = int(rows["run_number"].max()) if not rows.empty else 0
    print(f"history check of {path}: {len(findings)} experiment(s) over {runs} run(s), metric {metric}")
    for finding in findings:
        print("\n".join(describe(finding)))
    regressions = [f for f in findings if f.regression]
    print(f"{len(regressions)} experiment(s) whose newest run opened a worse regime")
    return 1 if regressions else 0


def report(metric: str, out: str | None, path: Path, con) -> int:
    """Trend charts of `metric` per experiment, regimes shaded, in `out` (default: history.html beside the store)."""
    from tunebench.history.report import write_report

    rows, steps = load(con, path)
    con.close()
    _metric_problem(rows, metric)
    out = Path(out) if out else path.resolve().parent / "history.html"
    with written("--out", out, "give an HTML file in a folder you may write, e.g. --out history.html"):
        write_report(rows, steps, metric, out)
    print(f"wrote {out}")
    return 0


def export(parquet: str, path: Path, con) -> int:
    """The store's tables as Parquet files in the folder `parquet` (new, or holding only what export wrote)."""
    folder = Path(parquet)
    own = {"runs.parquet", "experiments.parquet", "steps.parquet"}
    if folder.exists() and (not folder.is_dir() or {p.name for p in folder.iterdir()} - own):
        raise InputError(
            [
                InputProblem(
                    "command line",
                    "--parquet",
                    f"{folder} holds other files",
                    "give a new or empty folder (tunebench never overwrites what it did not write)",
                )
            ]
        )
    with written("--parquet", folder, "give a new or empty folder you may write"):
        files = store.export_parquet(con, folder)
    con.close()
    print("wrote " + ", ".join(map(str, files)))
    return 0
