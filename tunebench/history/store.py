"""The history store: runs, their experiment rows and step times in one DuckDB file, each run added in one transaction.

Tables (README "History"):
* `runs`: one row per run (a results folder, or one repeat of it with --each_repeat): run_id, label, where it came
  from, when it started and was added, and the run's metadata (tunebench commit, package versions, CUDA, driver,
  GPU, host).
* `experiments`: one row per execution of an experiment, keyed (experiment_id, repeat, started_unix), with every
  column of its results row. Column types follow the column registry: a declared column with a unit is DOUBLE,
  every other column (text, arguments) VARCHAR; a column first seen in a later run is added then.
* `steps`: every optimizer step of every execution (seconds, tokens, steady or not).

DuckDB lets one process write a database file at a time: writers take turns through a flock on `<store>.lock`
(held while its connection is open) and readers retry while a writer holds the file (up to `wait_s` each), so
concurrent `history add` commands queue rather than fail; a run is one transaction, so a writer killed midway
leaves the store as it was (DuckDB's write-ahead log replays only committed transactions).
"""

from __future__ import annotations

import logging
import math
import os
import re
import time
from pathlib import Path
from typing import Any

from scanner.atomic import atomic_via_tmp
from tunebench.history.optional import require
from tunebench.results import columns as registry
from tunebench.results.compare_rules import canonical

logger = logging.getLogger(__name__)

FILE_NAME = "history.duckdb"
SCHEMA_VERSION = "1"
WAIT_S = 300.0
RUN_COLUMNS = ("run_id", "label", "source", "started_unix", "added_unix", "experiments", "tunebench_git_sha",
               "torch_version", "transformers_version", "trl_version", "peft_version", "accelerate_version",
               "datasets_version", "cuda_version", "driver_version", "gpu_name", "gpu_count", "host_name")
_NUMERIC_RUN = {"started_unix", "added_unix", "experiments", "gpu_count"}
EXECUTION_KEY = ("experiment_id", "repeat", "started_unix")
STEP_COLUMNS = {"step": "INTEGER", "seconds": "DOUBLE", "end_unix": "DOUBLE", "padded_tokens": "BIGINT",
                "nonpad_tokens": "BIGINT", "steady": "BOOLEAN"}
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.+-]{1,120}$")


def quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class Connection:
    """A DuckDB connection that, for a writer, holds the flock on `<store>.lock` until it is closed."""

    def __init__(self, connection, descriptor: int | None):
        self._connection, self._descriptor = connection, descriptor

    def __getattr__(self, name: str):
        return getattr(self._connection, name)

    def close(self) -> None:
        """Close the connection, then let the next writer in (idempotent)."""
        self._connection.close()
        if self._descriptor is not None:
            os.close(self._descriptor)  # releases the flock
            self._descriptor = None


def _writer_lock(path: Path, deadline: float) -> int:
    """An exclusive flock on `<store>.lock`: writers take turns, and none opens a store another is still creating
    (DuckDB refuses a half-written file rather than waiting for it). Returns the descriptor that holds it."""
    import fcntl

    descriptor = os.open(str(path) + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    while True:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return descriptor
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(descriptor)
                raise TimeoutError(f"{path}: another writer held the store for more than {WAIT_S:.0f} s") from None
            time.sleep(0.05)


def connect(path: Path, read_only: bool = False, wait_s: float = WAIT_S) -> Connection:
    """A connection to the store, waiting while another process holds it (DuckDB allows one writer process)."""
    duckdb = require("duckdb", "the history store")
    deadline = time.monotonic() + wait_s
    descriptor = None if read_only else _writer_lock(path, deadline)
    delay = 0.05
    while True:
        try:
            return Connection(duckdb.connect(str(path), read_only=read_only), descriptor)
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                if descriptor is not None:
                    os.close(descriptor)
                raise
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


def ensure_schema(con) -> None:
    run_columns = ", ".join(f"{c} {'DOUBLE' if c in _NUMERIC_RUN else 'VARCHAR'}" for c in RUN_COLUMNS[1:])
    steps = ", ".join(f"{c} {t}" for c, t in STEP_COLUMNS.items())
    con.execute("CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    con.execute(f"CREATE TABLE IF NOT EXISTS runs (run_id VARCHAR PRIMARY KEY, {run_columns})")
    con.execute("CREATE TABLE IF NOT EXISTS experiments (run_id VARCHAR NOT NULL, experiment_id VARCHAR NOT NULL, "
                "repeat INTEGER NOT NULL, started_unix DOUBLE NOT NULL, PRIMARY KEY (experiment_id, repeat, started_unix))")
    con.execute(f"CREATE TABLE IF NOT EXISTS steps (run_id VARCHAR NOT NULL, experiment_id VARCHAR NOT NULL, "
                f"repeat INTEGER NOT NULL, started_unix DOUBLE NOT NULL, {steps})")
    found = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if found is None:
        con.execute("INSERT INTO meta VALUES ('schema_version', ?)", [SCHEMA_VERSION])
    elif found[0] != SCHEMA_VERSION:
        raise ValueError(f"schema version {found[0]}, this tunebench reads version {SCHEMA_VERSION}")


def column_type(name: str) -> str:
    """DOUBLE for a registry column with a unit, VARCHAR for the rest (text columns and training arguments)."""
    column = registry.lookup(name)
    return "DOUBLE" if column is not None and column.unit != "-" else "VARCHAR"


def _cell(value: Any, kind: str):
    if kind == "DOUBLE":
        try:
            number = float(value)
        except (TypeError, ValueError):
            return None
        return number if math.isfinite(number) else None
    if isinstance(value, str):  # kept as written ("00" stays "00"); numbers and booleans in compare's spelling
        return value or None
    return canonical(value) or None


def _existing_columns(con, table: str) -> dict[str, str]:
    rows = con.execute("SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ?",
                       [table]).fetchall()
    return dict(rows)


def _widen(con, names: list[str]) -> dict[str, str]:
    """Add the columns the store does not have yet; returns every column's type."""
    existing = _existing_columns(con, "experiments")
    for name in names:
        if name not in existing:
            existing[name] = column_type(name)
            con.execute(f"ALTER TABLE experiments ADD COLUMN {quoted(name)} {existing[name]}")
    return existing


def stored_executions(con) -> set[tuple[str, int, float]]:
    return {(e, int(r), float(s)) for e, r, s in con.execute(
        "SELECT experiment_id, repeat, started_unix FROM experiments").fetchall()}


def insert_run(con, run: dict[str, Any], executions: list[dict[str, Any]]) -> None:
    """One run: its runs row, its executions' rows and steps (callers hold the transaction)."""
    con.execute(f"INSERT INTO runs VALUES ({', '.join('?' * len(RUN_COLUMNS))})",
                [_cell(run.get(c), "DOUBLE" if c in _NUMERIC_RUN else "VARCHAR") for c in RUN_COLUMNS])
    names = sorted({n for e in executions for n in e["row"] if _SAFE_NAME.match(n)} - {"run_id", *EXECUTION_KEY})
    skipped = sorted({n for e in executions for n in e["row"] if not _SAFE_NAME.match(n)})
    if skipped:
        logger.warning("columns with names the store does not keep: %s", ", ".join(map(repr, skipped[:5])))
    types = _widen(con, names)
    columns = ["run_id", *EXECUTION_KEY, *names]
    insert = f"INSERT INTO experiments ({', '.join(map(quoted, columns))}) VALUES ({', '.join('?' * len(columns))})"
    for execution in executions:
        key = [run["run_id"], execution["experiment_id"], execution["repeat"], execution["started_unix"]]
        con.execute(insert, key + [_cell(execution["row"].get(n), types[n]) for n in names])
        steps = [key + _step_cells(step) for step in execution["steps"]]
        if steps:
            con.executemany(f"INSERT INTO steps VALUES ({', '.join('?' * (4 + len(STEP_COLUMNS)))})", steps)


def _step_cells(step: dict[str, Any]) -> list:
    return [bool(step.get(c)) if t == "BOOLEAN" else _cell(step.get(c), "DOUBLE") for c, t in STEP_COLUMNS.items()]


def frame(con, query: str, parameters: list | None = None):
    """A query's rows as a pandas DataFrame."""
    return con.execute(query, parameters or []).df()


def export_parquet(con, folder: Path) -> list[Path]:
    """Each table as <folder>/<table>.parquet (DuckDB's writer), each written to a temporary name and renamed."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for table in ("runs", "experiments", "steps"):
        target = folder / f"{table}.parquet"
        atomic_via_tmp(target, lambda temporary, table=table: con.execute(
            f"COPY (SELECT * FROM {table}) TO '{str(temporary).replace(chr(39), chr(39) * 2)}' (FORMAT parquet)"))
        written.append(target)
    return written
