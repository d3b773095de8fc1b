"""The history store: runs, their experiment rows and step times in one DuckDB file, each run added in one transaction.

Tables (docs/guides/history.md, "The store's schema"):
* `runs`: one row per run (a results folder, or one repeat of it with --each_repeat): run_id, label, where it came
  from, when it started and was added, and the run's metadata (tunebench commit, package versions, CUDA, driver,
  GPU, host).
* `experiments`: one row per execution of an experiment, keyed (experiment_id, repeat, started_unix), with every
  column of its results row. Column types follow the column registry: a declared column with a unit is DOUBLE,
  every other column (text, arguments) VARCHAR; a column first seen in a later run is added then.
* `steps`: every optimizer step of every execution (seconds, tokens, steady or not).

DuckDB lets one process write a database file at a time: writers take turns through a file lock (filelock) on
`<store>.lock` (held while its connection is open) and readers retry while a writer holds the file (up to `wait_s`
each), so concurrent `history add` commands queue rather than fail; a run is one transaction, so a writer killed midway
leaves the store as it was (DuckDB's write-ahead log replays only committed transactions).
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from scanner.atomic import atomic_via_tmp
from tunebench.errors import InputError, InputProblem
from tunebench.fileio import LOOKED_AT, looked_at
from tunebench.history.optional import require
from tunebench.results.columns.lookup import lookup
from tunebench.results.compare.rules import canonical

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
    """A DuckDB connection that, for a writer, holds the lock on `<store>.lock` until it is closed."""

    def __init__(self, connection, lock: FileLock | None):
        self._connection, self._lock = connection, lock
        self.created: list[Path] = []  # files this writer made (the store, its lock, its log): see abandon

    def __getattr__(self, name: str):
        return getattr(self._connection, name)

    def close(self) -> None:
        """Close the connection, then let the next writer in (idempotent)."""
        self._connection.close()
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def abandon(self) -> None:
        """Close, and remove what this writer created: a refused command leaves no store and no lock it made."""
        self.close()
        _remove(self.created)


def _writer_lock(path: Path, deadline: float) -> FileLock:
    """An exclusive lock on `<store>.lock` (a flock, released by the kernel if the writer dies): writers take turns,
    and none opens a store another is still creating (DuckDB refuses a half-written file rather than waiting for
    it). Returns the held lock."""
    lock = FileLock(lock_path(path), mode=0o644, thread_local=False)
    try:
        lock.acquire(timeout=max(0.0, deadline - time.monotonic()), poll_interval=0.05)
    except Timeout:
        raise TimeoutError(f"{path}: another writer held the store for more than {WAIT_S:.0f} s") from None
    return lock


def connect(path: Path, read_only: bool = False, wait_s: float = WAIT_S) -> Connection:
    """A connection to the store, waiting while another process holds it (DuckDB allows one writer process)."""
    duckdb = require("duckdb", "the history store")
    deadline = time.monotonic() + wait_s
    lock = None if read_only else _writer_lock(path, deadline)
    delay = 0.05
    while True:
        try:
            return Connection(duckdb.connect(str(path), read_only=read_only), lock)
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                if lock is not None:
                    lock.release()
                raise
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
        except BaseException:
            if lock is not None:
                lock.release()
            raise


def path_problems(path: Path, made_here: bool) -> list[InputProblem]:
    """--store: a store's file, or (`made_here`: history add, bisect) a path where one is made; never written
    through a link to nowhere. Said as the store's, before anything opens it."""
    found = looked_at(path)
    if found == "dangling":
        return [InputProblem("command line", "--store", f"{path} is a link to a path that does not exist",
                             "give the store itself, or a new path")]
    if found in ("folder", "other"):
        return [InputProblem("command line", "--store", f"{path} is not a file", "give a .duckdb file")]
    if found == "missing" and not made_here:
        return [InputProblem("command line", "--store", f"{path} does not exist",
                             "give the file `history add` wrote (default <results parent>/history.duckdb)")]
    if found not in LOOKED_AT:
        return [InputProblem("command line", "--store", f"{path}: {found}", "give a .duckdb file's path")]
    return []


def lock_path(path: Path) -> Path:
    return Path(str(path) + ".lock")


def is_duckdb_error(exc: BaseException) -> bool:
    return type(exc).__module__.split(".")[0] in ("duckdb", "_duckdb")


def first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__


@contextlib.contextmanager
def failures_named(path: Path) -> Iterator[None]:
    """Within it, whatever DuckDB or the filesystem refuses about the store (a truncated or damaged file, a
    directory, a read-only filesystem, no permission, another writer too long) is one InputError naming it."""
    try:
        yield
    except InputError:
        raise
    except TimeoutError as exc:
        raise InputError([InputProblem(str(path), "--store", str(exc), "try again when the other writer is done")]) \
            from None
    except OSError as exc:
        where = exc.filename or path
        raise InputError([InputProblem(str(path), "--store", f"cannot open {where}: {exc.strerror or exc}",
                                       "give a --store in a folder you may write (history add writes the store "
                                       "and <store>.lock beside it)")]) from None
    except ValueError as exc:  # ensure_schema: another version's store, or another program's DuckDB file
        raise InputError([InputProblem(str(path), "--store", f"not a tunebench history store ({first_line(exc)})",
                                       "give a store written by `benchmark.py history add`, or a new path")]) from None
    except Exception as exc:
        if not is_duckdb_error(exc):
            raise
        raise InputError([InputProblem(str(path), "--store", f"not a tunebench history store, or a damaged one: "
                                                             f"{first_line(exc)}",
                                       "give a store written by `benchmark.py history add` (a truncated or damaged "
                                       "one cannot be repaired: restore a copy), or a new path")]) from None


def open_store(path: Path, read_only: bool) -> Connection:
    """The store, checked (a reader: its schema is this tunebench's; a writer: the schema made or checked); every
    refusal one InputError naming it. A refused writer leaves nothing it created (the store, its lock)."""
    created = [] if read_only else [p for p in (path, lock_path(path), Path(f"{path}.wal")) if not p.exists()]
    try:
        with failures_named(path):
            con = connect(path, read_only=read_only)
            con.created = created
            try:
                check_schema(con) if read_only else ensure_schema(con, fresh=path in created)
            except BaseException:
                con.close()
                raise
            return con
    except BaseException:
        _remove(created)
        raise


def _remove(paths: list[Path]) -> None:
    for made in paths:
        with contextlib.suppress(OSError):
            made.unlink()


def check_schema(con) -> None:
    """A reader's check: the store's tables and schema version are this tunebench's (ValueError otherwise)."""
    tables = {t for (t,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    if not {"meta", "runs", "experiments", "steps"} <= tables:
        raise ValueError("no runs, experiments and steps tables")
    found = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if found is None or found[0] != SCHEMA_VERSION:
        raise ValueError(f"schema version {found[0] if found else 'none'}, this tunebench reads {SCHEMA_VERSION}")


def ensure_schema(con, fresh: bool = True) -> None:
    """The store's tables, made where missing; a file that existed and holds tables of another program
    (`fresh` False, no `meta` table) is refused (ValueError), never written into."""
    tables = {t for (t,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    if not fresh and tables and "meta" not in tables:
        raise ValueError(f"a DuckDB file with other tables ({', '.join(sorted(tables)[:3])})")
    run_columns = ", ".join(f"{c} {'DOUBLE' if c in _NUMERIC_RUN else 'VARCHAR'}" for c in RUN_COLUMNS[1:])
    steps = ", ".join(f"{c} {t}" for c, t in STEP_COLUMNS.items())
    con.execute("CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    con.execute(f"CREATE TABLE IF NOT EXISTS runs (run_id VARCHAR PRIMARY KEY, {run_columns})")
    con.execute("CREATE TABLE IF NOT EXISTS experiments (run_id VARCHAR NOT NULL, experiment_id VARCHAR NOT NULL, "
                "repeat INTEGER NOT NULL, started_unix DOUBLE NOT NULL, PRIMARY KEY (experiment_id, repeat, "
                "started_unix))")
    con.execute(f"CREATE TABLE IF NOT EXISTS steps (run_id VARCHAR NOT NULL, experiment_id VARCHAR NOT NULL, "
                f"repeat INTEGER NOT NULL, started_unix DOUBLE NOT NULL, {steps})")
    found = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if found is None:
        con.execute("INSERT INTO meta VALUES ('schema_version', ?)", [SCHEMA_VERSION])
    elif found[0] != SCHEMA_VERSION:
        raise ValueError(f"schema version {found[0]}, this tunebench reads version {SCHEMA_VERSION}")


def column_type(name: str) -> str:
    """DOUBLE for a registry column with a unit, VARCHAR for the rest (text columns and training arguments)."""
    column = lookup(name)
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


def existing_columns(con, table: str) -> dict[str, str]:
    rows = con.execute("SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ?",
                       [table]).fetchall()
    return dict(rows)


def _widen(con, names: list[str]) -> dict[str, str]:
    """Add the columns the store does not have yet; returns every column's type."""
    existing = existing_columns(con, "experiments")
    for name in names:
        if name not in existing:
            existing[name] = column_type(name)
            con.execute(f"ALTER TABLE experiments ADD COLUMN {quoted(name)} {existing[name]}")
    return existing


def stored_executions(con) -> set[tuple[str, int, float]]:
    return {(e, int(r), float(s)) for e, r, s in con.execute(
        "SELECT experiment_id, repeat, started_unix FROM experiments").fetchall()}


def insert_run(con, run: dict[str, Any], executions: list[dict[str, Any]]) -> None:
    """One run: its runs row, its executions' rows and steps (callers hold the transaction). Rows and steps go in
    as one frame each (DuckDB's bulk insert: 100,000 steps in well under a second, not a statement per row)."""
    con.execute(f"INSERT INTO runs VALUES ({', '.join('?' * len(RUN_COLUMNS))})",
                [_cell(run.get(c), "DOUBLE" if c in _NUMERIC_RUN else "VARCHAR") for c in RUN_COLUMNS])
    names = sorted({n for e in executions for n in e["row"] if _SAFE_NAME.match(n)} - {"run_id", *EXECUTION_KEY})
    skipped = sorted({n for e in executions for n in e["row"] if not _SAFE_NAME.match(n)})
    if skipped:
        logger.warning("columns with names the store does not keep: %s", ", ".join(map(repr, skipped[:5])))
    types = _widen(con, names)
    keys = [[run["run_id"], e["experiment_id"], e["repeat"], e["started_unix"]] for e in executions]
    rows = {"run_id": [k[0] for k in keys], "experiment_id": [k[1] for k in keys], "repeat": [k[2] for k in keys],
            "started_unix": [k[3] for k in keys],
            **{n: [_cell(e["row"].get(n), types[n]) for e in executions] for n in names}}
    _insert_frame(con, "experiments", rows, {**{n: types[n] for n in names}, "repeat": "INTEGER",
                                             "started_unix": "DOUBLE"})
    frames = [_steps_frame(key, execution["steps"]) for key, execution in zip(keys, executions, strict=True)
              if execution["steps"]]
    if frames:
        import pandas as pd

        con.register("tunebench_new_steps", pd.concat(frames, ignore_index=True))
        try:
            con.execute("INSERT INTO steps BY NAME SELECT * FROM tunebench_new_steps")
        finally:
            con.unregister("tunebench_new_steps")


def _steps_frame(key: list, steps: list[dict[str, Any]]):
    """One execution's steps as the steps table's columns, as steps.json holds them read back: a count that is no
    whole number within INTEGER's range, a time that is no finite number, is NULL; `steady` is the value's truth."""
    import numpy as np
    import pandas as pd

    raw = pd.DataFrame.from_records(steps, columns=list(STEP_COLUMNS))
    frame = pd.DataFrame({"run_id": key[0], "experiment_id": key[1], "repeat": key[2], "started_unix": key[3]},
                         index=raw.index)
    for column, kind in STEP_COLUMNS.items():
        values = raw[column]
        clean = values.dtype != object  # what tunebench writes: one type per column, parsed in bulk
        if kind == "BOOLEAN":
            frame[column] = values.astype(bool) if values.dtype == bool else values.map(
                lambda v: bool(v) if isinstance(v, (bool, int, float, str)) and v == v else False).astype(bool)
            continue
        numbers = pd.to_numeric(values if clean else values.map(lambda v: None if isinstance(v, (dict, list)) else v),
                                errors="coerce").astype(float)
        numbers = numbers.where(np.isfinite(numbers))
        if kind in ("INTEGER", "BIGINT"):
            numbers = numbers.round().where(numbers.abs() < 2**31).astype("Int64")
        frame[column] = numbers
    return frame


_PANDAS_TYPES = {"INTEGER": "Int64", "BIGINT": "Int64", "DOUBLE": "Float64", "BOOLEAN": "boolean"}


def _insert_frame(con, table: str, columns: dict[str, list], types: dict[str, str]) -> None:
    """`columns` (name → values) into `table` in one statement, each column typed as the table's (nullable)."""
    import pandas as pd

    frame = pd.DataFrame({name: pd.array(values, dtype=_PANDAS_TYPES.get(types.get(name, "VARCHAR"), object))
                          for name, values in columns.items()})
    con.register("tunebench_new_rows", frame)
    try:
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM tunebench_new_rows")
    finally:
        con.unregister("tunebench_new_rows")


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
