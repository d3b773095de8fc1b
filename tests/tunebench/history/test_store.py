"""The history store (issue V item 1): one run per set of executions however often it is added, columns typed by the
registry, concurrent writers and a killed writer lose nothing, hostile input is refused in one line (exit 2) with
nothing written, Parquet export; and `history check` on series with known answers.

Reached through the modules it calls (the history extra's imports): tunebench/history/optional.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import unicodedata

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

duckdb = pytest.importorskip("duckdb")
pytest.importorskip("ruptures")

from tests.fixtures.harness import REPO  # noqa: E402
from tests.fixtures.history import results_folder  # noqa: E402
from tunebench.cli import history as command  # noqa: E402
from tunebench.history.check import check, describe  # noqa: E402
from tunebench.results.row_values import row_problems  # noqa: E402


def history(*args: str, capsys=None) -> int:
    return command.main(list(args))


def test_a_run_added_twice_is_one_run_wherever_its_folder_lies(tmp_path, capsys):
    first = results_folder(tmp_path / "a", [0.1])
    store = tmp_path / "h.duckdb"
    assert history("add", str(first), "--store", str(store), "--label", "v1") == 0
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(first), str(copy)], check=True)
    assert history("add", str(first), str(copy), "--store", str(store)) == 0
    out = capsys.readouterr().out
    assert out.count("already in the store") == 2 and out.strip().endswith("1 run(s); 0 added now")
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT count(*), min(label) FROM runs").fetchone() == (1, "v1")
    assert con.execute("SELECT count(*) FROM experiments").fetchone() == (1,)
    assert con.execute("SELECT count(*), sum(steady::INT) FROM steps").fetchone() == (11, 10)


def test_column_types_follow_the_registry_and_new_columns_join(tmp_path):
    store = tmp_path / "h.duckdb"
    assert history("add", str(results_folder(tmp_path / "a", [0.1])), "--store", str(store)) == 0
    later = results_folder(tmp_path / "b", [0.1], start=1.9e9, extra={"gpu_sm_clock_mhz": 1980, "host_name": "n1"})
    assert history("add", str(later), "--store", str(store)) == 0
    con = duckdb.connect(str(store), read_only=True)
    types = dict(con.execute("SELECT column_name, data_type FROM information_schema.columns WHERE table_name = "
                             "'experiments'").fetchall())
    assert (types["steady_step_time_median"], types["gpu_sm_clock_mhz"], types["status"], types["learning_rate"],
            types["host_name"]) == ("DOUBLE", "DOUBLE", "VARCHAR", "VARCHAR", "VARCHAR")
    assert con.execute("SELECT gpu_sm_clock_mhz FROM experiments ORDER BY started_unix").fetchall() == [
        (None,),
        (1980.0,),
    ]


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
def test_concurrent_writers_lose_nothing(tmp_path):
    store = tmp_path / "h.duckdb"
    folders = [results_folder(tmp_path / f"r{i}", [0.1, 0.1], start=1.8e9 + 1000 * i) for i in range(4)]
    code = "import sys; from tunebench.cli.history import main; sys.exit(main(sys.argv[1:]))"
    procs = [subprocess.Popen([sys.executable, "-c", code, "add", str(f), "--store", str(store), "--each_repeat"],
                              cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for f in folders]
    outcomes = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], outcomes
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT count(*) FROM runs").fetchone() == (8,)
    assert con.execute("SELECT count(*) FROM experiments").fetchone() == (8,)
    assert con.execute("SELECT count(*) FROM steps").fetchone() == (88,)


KILLED_WRITER = """
import sys, time
from tunebench.history import store
real = store.insert_run
def slow(con, run, executions):
    real(con, run, executions)
    print("inserted", flush=True)
    time.sleep(120)  # killed here: the run's rows are written, its transaction not committed
store.insert_run = slow
from tunebench.cli.history import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
def test_a_writer_killed_mid_run_leaves_the_store_as_it_was(tmp_path):
    store = tmp_path / "h.duckdb"
    assert history("add", str(results_folder(tmp_path / "kept", [0.1])), "--store", str(store)) == 0
    victim = results_folder(tmp_path / "victim", [0.2], start=1.9e9)
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, "add", str(victim), "--store", str(store)],
                            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "inserted"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT count(*) FROM runs").fetchone() == (1,)
    assert con.execute("SELECT count(*) FROM experiments").fetchone() == (1,)
    con.close()
    assert history("add", str(victim), "--store", str(store)) == 0  # and it can be added again
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT count(*) FROM runs").fetchone() == (2,)


def test_bad_input_is_one_line_each_exit_2_and_nothing_written(tmp_path, capsys):
    not_a_store = tmp_path / "notes.duckdb"
    not_a_store.write_text("my notes\n")
    good = results_folder(tmp_path / "a", [0.1])
    assert history("add", str(tmp_path / "missing"), "--label", "a\nb", "--store", str(tmp_path / "new.duckdb")) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'missing'}: no such results folder" in err and "--label: at most 200 printable" in err
    assert not (tmp_path / "new.duckdb").exists()
    assert history("add", str(good), "--store", str(not_a_store)) == 2
    assert "not a tunebench history store" in capsys.readouterr().err
    assert not_a_store.read_text() == "my notes\n"
    assert history("check", "--store", str(tmp_path / "none.duckdb")) == 2
    assert "none.duckdb does not exist" in capsys.readouterr().err
    store = tmp_path / "h.duckdb"
    assert history("add", str(good), "--store", str(store)) == 0
    assert history("check", "--store", str(store), "--metric", "steady_nope") == 2
    assert "--metric: 'steady_nope' is not a column of the store" in capsys.readouterr().err
    assert history("check", "--store", str(store), "--min_effect", "nan") == 2
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "mine.txt").write_text("x")
    assert history("export", "--parquet", str(tmp_path / "busy"), "--store", str(store)) == 2
    assert sorted(p.name for p in (tmp_path / "busy").iterdir()) == ["mine.txt"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(label=st.text(max_size=60), column=st.text(min_size=1, max_size=30))
def test_hostile_labels_and_column_names_are_kept_exactly_or_refused(tmp_path_factory, label, column):
    root = tmp_path_factory.mktemp("hostile")
    folder = results_folder(root / "r", [0.1], extra={column: "x'); DROP TABLE runs; --"})
    store = root / "h.duckdb"
    code = command.main(["add", str(folder), "--store", str(store), f"--label={label}"])
    row = json.loads((folder / "tiny_0123456789ab" / "results.json").read_text())
    # a label with control characters, or a column that is tunebench's in other case (or a number's) is refused
    if any(unicodedata.category(c) in ("Cc", "Cs") for c in label) or row_problems(row, "results.json"):
        assert code == 2 and not store.exists()
        return
    assert code == 0
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT label FROM runs").fetchall() == [(label or None,)]
    assert con.execute("SELECT count(*) FROM experiments").fetchone() == (1,)


def test_export_writes_each_table_as_parquet(tmp_path):
    store = tmp_path / "h.duckdb"
    assert history("add", str(results_folder(tmp_path / "a", [0.1, 0.2])), "--each_repeat", "--store", str(store)) == 0
    assert history("export", "--parquet", str(tmp_path / "pq"), "--store", str(store)) == 0
    assert len(pd.read_parquet(tmp_path / "pq" / "runs.parquet")) == 2
    assert list(pd.read_parquet(tmp_path / "pq" / "experiments.parquet")["steady_step_time_median"]) == [0.1, 0.2]
    assert len(pd.read_parquet(tmp_path / "pq" / "steps.parquet")) == 22


def _series(tmp_path, medians: list[float], extra_of=None) -> list:
    store = tmp_path / "h.duckdb"
    for i, median in enumerate(medians):
        extra = extra_of(i) if extra_of else None
        folder = results_folder(tmp_path / f"run{i}", [median], start=1.8e9 + 1000 * i, extra=extra)
        assert history("add", str(folder), "--store", str(store), "--label", f"n{i + 1}") == 0
    from tunebench.history.actions import load
    from tunebench.history.store import connect

    rows, steps = load(connect(store, read_only=True), store)
    return check(rows, steps)


def test_the_newest_run_alone_opens_a_worse_regime_and_its_cause_is_named(tmp_path, capsys):
    shared = {"gpu_other_processes": 1, "gpu_other_process_names": "burner (pid 7, 1.0 GiB)"}
    findings = _series(
        tmp_path, [0.100, 0.1002, 0.0999, 0.107], lambda i: shared if i == 3 else {"gpu_other_processes": 0}
    )
    (finding,) = findings
    assert finding.verdict == "regression" and finding.regimes == [(0, 3), (3, 4)]
    lines = describe(finding)
    assert lines[0] == "REGRESSION  tiny: regimes runs 1-3 | run 4"
    assert lines[1].startswith("  run 4 opened the newest regime: +7.0 % (99 % CI +")
    assert lines[2] == "  what changed: other processes on the GPU 0 → 1 (burner (pid 7, 1.0 GiB))"


def test_a_clean_run_after_an_outlier_is_back_in_the_old_regime(tmp_path):
    (finding,) = _series(tmp_path, [0.100, 0.1002, 0.0999, 0.107, 0.1001])
    assert finding.verdict == "stable" and finding.regimes == [(0, 5)]
    assert describe(finding)[1:] == ["  the newest run (run 5) is in the regime of runs 1-5",
                                     "  one-off runs in that regime: run 4 (+6.9 %)"]  # 0.107 / 0.1001


def test_an_argument_that_changed_with_the_regime_is_named(tmp_path):
    values = [0.100, 0.1003, 0.0998, 0.1001, 0.090, 0.0902, 0.0899]
    (finding,) = _series(tmp_path, values, lambda i: {"learning_rate": 0.001 if i < 4 else 0.002,
                                                      "torch_version": "2.13.0" if i < 4 else "2.14.0"})
    assert finding.verdict == "improvement" and finding.regimes == [(0, 4), (4, 7)]
    assert finding.what_changed == "learning_rate 0.001 → 0.002; torch_version 2.13.0 → 2.14.0"


def test_check_exit_codes(tmp_path, capsys):
    _series(tmp_path, [0.100, 0.1002, 0.0999, 0.107])
    assert history("check", "--store", str(tmp_path / "h.duckdb")) == 1
    assert capsys.readouterr().out.strip().endswith("1 experiment(s) whose newest run opened a worse regime")
    assert history("check", "--store", str(tmp_path / "h.duckdb"), "--min_effect", "10") == 0


def test_a_regime_split_compare_cannot_call_does_not_hide_the_change_before_it(tmp_path):
    # +6 % from run 12, then two runs 1.9 % higher and two back: the change-point search cuts at 17 and 19 as well,
    # but the step times cannot tell runs 17-18 from their neighbours (±1 % step wobble, 2 runs a side).
    before = [0.1000, 0.1001, 0.0999, 0.1000, 0.1002, 0.0998, 0.1001, 0.1000, 0.0999, 0.1001, 0.1000]
    after = [0.1060, 0.1061, 0.1059, 0.1060, 0.1062, 0.1080, 0.1081, 0.1060, 0.1059]
    from tunebench.history import changepoints
    assert changepoints.change_points(before + after) == [11, 16, 18]  # what the merge has to undo
    (finding,) = _series(tmp_path, before + after)
    assert finding.verdict == "regression" and finding.regimes == [(0, 11), (11, 20)]
    assert describe(finding)[1].startswith("  run 12 opened the newest regime: +6.0 % (99 % CI +")


@pytest.mark.parametrize("extra, key, message", [
    ({"Steady_Step_Time_Median": 3.0}, "Steady_Step_Time_Median",
     "differs from the key 'steady_step_time_median' only in case"),
    ({"experiment_start_unix": float("nan")}, "experiment_start_unix", "nan is not a finite number"),
    ({"experiment_start_unix": 1e300}, "experiment_start_unix",
     "1e+300 is no time (Unix seconds between 1970 and 9999)"),
])
def test_a_row_no_run_produces_is_the_folders_problem_not_the_stores(tmp_path, capsys, extra, key, message):
    """Keys differing only in case, a NaN or a 1e300 start time: `history add` called a good store "not a tunebench
    history store, or a damaged one" (or took the row, and `history report` then raised OverflowError). Now one line
    naming the results.json and its key, exit 2, and the store as it was."""
    store = tmp_path / "h.duckdb"
    assert history("add", str(results_folder(tmp_path / "good", [0.1])), "--store", str(store)) == 0
    before = store.read_bytes()
    folder = results_folder(tmp_path / "bad", [0.1], extra=extra, start=1.9e9)
    capsys.readouterr()
    assert history("add", str(folder), "--store", str(store)) == 2
    err = capsys.readouterr().err
    assert f"  - {folder / 'tiny_0123456789ab' / 'results.json'}: {key}: {message}" in err
    assert "--store" not in err and "history store" not in err
    assert store.read_bytes() == before


def test_a_key_in_other_case_than_the_stores_column_names_the_folder(tmp_path, capsys):
    store = tmp_path / "h.duckdb"
    assert history("add", str(results_folder(tmp_path / "a", [0.1], extra={"my_note": "x"})), "--store",
                   str(store)) == 0
    folder = results_folder(tmp_path / "b", [0.1], extra={"My_Note": "y"}, start=1.9e9)
    capsys.readouterr()
    assert history("add", str(folder), "--store", str(store)) == 2
    assert (f"  - {folder / 'tiny_0123456789ab' / 'results.json'}: My_Note: the store's column is spelt 'my_note' "
            "(DuckDB's names ignore case) (fix: rename the key 'my_note')") in capsys.readouterr().err
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT count(*) FROM runs").fetchone() == (1,)


def test_report_and_check_name_their_own_options(tmp_path, capsys):
    """`history report --out <a folder>` blamed --store; `history check --metric scenario` (text) exited 0 over
    "0 experiment(s)"."""
    store = tmp_path / "h.duckdb"
    assert history("add", str(results_folder(tmp_path / "a", [0.1] * 3)), "--store", str(store)) == 0
    capsys.readouterr()
    assert history("report", "--store", str(store), "--out", str(tmp_path)) == 2
    assert f"  - command line: --out: {tmp_path} is a folder" in capsys.readouterr().err
    assert history("report", "--store", str(store), "--out", str(tmp_path / "no" / "r.html")) == 2
    assert f"--out: {tmp_path / 'no'} is not a folder that exists" in capsys.readouterr().err
    for command_name in ("check", "report"):
        assert history(command_name, "--store", str(store), "--metric", "scenario") == 2
        assert ("--metric: 'scenario' is not a numeric column of the store (its values are text): a change point "
                "needs a number per run") in capsys.readouterr().err


def test_a_store_written_before_rows_were_checked_still_reports(tmp_path, capsys):
    """A run started at 1e300 taken by an earlier tunebench: the report shows the number, no OverflowError."""
    store = tmp_path / "h.duckdb"
    assert history("add", str(results_folder(tmp_path / "a", [0.1] * 3)), "--store", str(store)) == 0
    con = duckdb.connect(str(store))
    con.execute("UPDATE runs SET started_unix = 1e300")
    con.close()
    assert history("report", "--store", str(store), "--out", str(tmp_path / "r.html")) == 0
    assert "1e+300 (no time: Unix seconds out of range)" in (tmp_path / "r.html").read_text()


def test_an_unresolvable_cut_after_a_regression_does_not_hide_it(tmp_path):
    """A store CI made (test_check_and_bisection_e2e's twenty runs, 2026-11-28): +13 % from run 12, then the
    change-point search cut again at run 15 (+5.3 %, which compare could not resolve: "unstable"), and the check
    said UNSTABLE with exit 0. Between three or more regimes such a cut is merged like a not-significant one."""
    import gzip
    import shutil

    store = tmp_path / "h.duckdb"
    with gzip.open(REPO / "tests" / "data" / "history-ci-noisy-split.duckdb.gz") as packed, open(store, "wb") as out:
        shutil.copyfileobj(packed, out)
    from tunebench.history.actions import load
    from tunebench.history.store import connect

    (finding,) = check(*load(connect(store, read_only=True), store))
    assert finding.verdict == "regression" and finding.regimes == [(0, 11), (11, 20)]
    assert describe(finding)[0] == "REGRESSION  tiny: regimes runs 1-11 | runs 12-20"
