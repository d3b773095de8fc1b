"""tunebench/results/row_values.py: the one check of a results row's values, as every reader of a results folder
(the CSVs, scaling, projection, history, tune) meets it through results.summaries.newest_rows (issue AD)."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tunebench
from tunebench.results import summaries
from tunebench.results.columns.registry import REGISTRY
from tunebench.results.columns.types import OUTCOME
from tunebench.results.row_values import row_problems, without_problems

OK = {"experiment_id": "0123456789ab", "status": "ok", "num_gpus": 1}


def _problems(**values) -> list[tuple[str, str]]:
    return [(p.key, p.message) for p in row_problems({**OK, **values}, "r.json")]


@pytest.mark.parametrize("values, expected", [
    ({"steady_nonpad_tokens_per_second": -100.0},
     [("steady_nonpad_tokens_per_second", "-100.0 is negative: a rate (tokens/s) is never below 0")]),
    ({"scan_time_forward": -1.5}, [("scan_time_forward", "-1.5 is negative: a time (s) is never below 0")]),
    ({"steady_nonpad_tokens_per_second": 0}, [("steady_nonpad_tokens_per_second",
                                              "0 tokens/s in a finished (ok) row: a run that trained moved tokens")]),
    ({"steady_step_time_median": math.nan}, [("steady_step_time_median", "nan is not a finite number")]),
    ({"scan_mem_peak_allocated": math.inf}, [("scan_mem_peak_allocated", "inf is not a finite number")]),
    ({"experiment_start_unix": 1e300},
     [("experiment_start_unix", "1e+300 is no time (Unix seconds between 1970 and 9999)")]),
    ({"steady_tokens_per_second": "fast"}, [("steady_tokens_per_second", 'expected a number, got "fast"')]),
    ({"train_runtime": True}, [("train_runtime", "expected a number, got true")]),
    ({"per_device_train_batch_size": 0}, [("per_device_train_batch_size", "0 is not a whole number >= 1")]),
    ({"experiment_start_unix": 10**400}, [("experiment_start_unix", "a number past 1e308 is no time (Unix seconds "
                                                                    "between 1970 and 9999)")]),
    ({"train_runtime": -(10**5000)}, [("train_runtime", "a number below -1e308 is negative: a time (s) is never "
                                                        "below 0")]),
    ({"Steady_Step_Time_Median": 1.0, "steady_step_time_median": 1.0},
     [("Steady_Step_Time_Median", "differs from the key 'steady_step_time_median' only in case")]),
    ({"Train_Runtime": 1.0}, [("Train_Runtime", "tunebench's column is spelt 'train_runtime'")]),
    ({"fsdp": True, "fsdp_config": '{"version": "x"}'}, [("fsdp_config.version", 'expected 1 or 2, got "x"')]),
    # what a run writes passes: a signed fraction, a plan that does not fit, a diverged loss (text column)
    ({"loss_parity_final_rel_diff": -0.2, "pred_fit_margin_bytes": -2**30, "train_loss": math.nan,
      "steady_nonpad_tokens_per_second": 1.5e4, "experiment_start_unix": 1.8e9, "status": "ok"}, []),
    ({"status": "error", "steady_nonpad_tokens_per_second": 0}, []),  # a failed run may have moved nothing
])
def test_values_no_run_produces_are_named_by_key(values, expected):
    assert _problems(**values) == expected


def test_what_is_named_is_left_empty_and_an_odd_spelling_dropped():
    row = {**OK, "steady_nonpad_tokens_per_second": -1.0, "Train_Runtime": 2.0, "train_loss": 1.0}
    assert without_problems(row, row_problems(row, "r.json")) == {**OK, "steady_nonpad_tokens_per_second": None,
                                                                  "train_loss": 1.0}


def _experiment(root: Path, experiment_id: str, num_gpus: int, rate: float, **arguments) -> None:
    folder = root / f"s_{experiment_id}"
    folder.mkdir(parents=True)
    base = {"model_name_or_path": "preset:llama-tiny", "per_device_train_batch_size": 4, **arguments}
    (folder / "spec.json").write_text(json.dumps({"experiment_id": experiment_id, "num_gpus": num_gpus,
                                                  "device_type": "cuda", "scenario": "s", "arguments": base}))
    (folder / "results.json").write_text(json.dumps({
        "experiment_id": experiment_id, "scenario": "s", "status": "ok", "num_gpus": num_gpus,
        "steady_nonpad_tokens_per_second": rate, "steady_step_time_median": 1.0}))


@pytest.mark.parametrize("twin_rate", [0.0, -5.0])
def test_a_twin_at_no_rate_gives_no_scaling_efficiency_and_a_line_naming_it(tmp_path, caplog, twin_rate):
    """A one-GPU twin at 0 tokens/s gave scaling_efficiency inf, at -5 gave -1 307.8: the CSVs now hold neither
    the twin's rate nor an efficiency from it, and the log names the file and the key."""
    _experiment(tmp_path, "aaaaaaaaaaaa", 1, twin_rate)
    _experiment(tmp_path, "bbbbbbbbbbbb", 2, 13078.0, fsdp=True)
    with caplog.at_level(logging.WARNING, logger="tunebench.results.summaries"):
        summaries.write_summaries(tmp_path)
    frame = pd.read_csv(tmp_path / "raw_summary.csv").set_index("experiment_id")
    assert pd.isna(frame.loc["aaaaaaaaaaaa", "steady_nonpad_tokens_per_second"])
    assert frame.get("scaling_efficiency", pd.Series(dtype=float)).isna().all()
    assert f"{tmp_path / 's_aaaaaaaaaaaa' / 'results.json'}: steady_nonpad_tokens_per_second:" in caplog.text


def test_the_folder_reader_names_every_bad_value_when_asked(tmp_path):
    _experiment(tmp_path, "aaaaaaaaaaaa", 1, -100.0)
    _experiment(tmp_path, "bbbbbbbbbbbb", 1, math.inf)
    problems: list = []
    rows = summaries.rows_on_disk(tmp_path, incomplete=False, problems=problems)
    assert sorted((Path(p.source).parent.name, p.key) for p in problems) == [
        ("s_aaaaaaaaaaaa", "steady_nonpad_tokens_per_second"), ("s_bbbbbbbbbbbb", "steady_nonpad_tokens_per_second")]
    assert [r["steady_nonpad_tokens_per_second"] for r in rows] == [None, None]


def test_a_report_names_every_cell_no_run_produces_and_writes_nothing(tmp_path, capsys):
    """The report reads a results CSV: a hand-edited one at -100 tokens/s or an infinite step time is refused with
    every such cell named (file, column, row), exit 2, before anything is charted."""
    from tunebench.cli import report

    csv = tmp_path / "raw_summary.csv"
    pd.DataFrame({"experiment_id": ["0123456789ab", "ba9876543210"], "status": ["ok", "ok"],
                  "steady_nonpad_tokens_per_second": [-100.0, 5.0], "steady_step_time_median": [0.1, math.inf],
                  "Steady_MFU": [0.1, 0.2]}).to_csv(csv, index=False)
    assert report.main([str(csv), "--out", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"error: results {csv}: 3 cell(s) no run produces:"
    assert err[1].startswith(f"  - {csv}: Steady_MFU: tunebench's column is spelt 'steady_mfu'")
    assert err[2].startswith(f"  - {csv}: steady_nonpad_tokens_per_second (row 0123456789ab): -100.0 is negative")
    assert err[3].startswith(f"  - {csv}: steady_step_time_median (row ba9876543210): inf is not a finite number")
    assert not (tmp_path / "r.html").exists()


# ---------------------------------------------------------------- generated rows (hypothesis), in this process
NUMERIC = sorted(c.name for c in REGISTRY if c.pattern is None and c.unit not in ("-", "bool") and c.kind != OUTCOME)
hostile = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=True,
                    allow_infinity=True), st.text(max_size=8), st.sampled_from([1e300, -0.0, 0, 253402300800.0,
                                                                               '{"version": "x"}', "nan"]))
spelt = st.tuples(st.sampled_from(NUMERIC + ["fsdp", "fsdp_config", "learning_rate"]), st.booleans()).map(
    lambda k: k[0].upper() if k[1] else k[0])
rows = st.builds(lambda status, values: {**OK, "status": status, **values}, st.sampled_from(["ok", "error"]),
                 st.dictionaries(spelt, hostile, max_size=4))
GENERATED = settings(max_examples=200, deadline=None, derandomize=True, database=None)


@GENERATED
@given(row=rows)
def test_every_generated_row_is_named_or_clean_and_cleaning_leaves_nothing(row):
    problems = row_problems(row, "r.json")
    assert all(p.source == "r.json" and (p.key in row or p.key.startswith("fsdp")) for p in problems), problems
    cleaned = without_problems(row, problems)
    assert row_problems(cleaned, "r.json") == [] or all(p.key.startswith("fsdp") for p in problems)
    for key, value in cleaned.items():  # what is kept of a declared number is a finite one
        if key in NUMERIC and value is not None:
            assert isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value), key


@settings(max_examples=20, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(row=rows)
def test_projection_and_history_refuse_a_generated_row_by_name_or_take_it(tmp_path_factory, capsys, row):
    """The readers in front of the checker: `project` and `history add` answer a DataFrame / exit 0, or name the
    results.json and its key (exit 2), never blaming the store, never another exception."""
    from tests.fixtures.projection import make_results
    from tunebench.cli import history

    root = tmp_path_factory.mktemp("rows")
    extra = {k: v for k, v in row.items() if k not in ("experiment_id", "num_gpus")}
    folder, _ = make_results(root / "measured", **extra)
    problems = row_problems(json.loads((folder / "results.json").read_text()), str(folder / "results.json"))
    options = tunebench.ProjectionOptions(project_from=str(root / "measured"), plan_device="NVIDIA H200",
                                          memory=False)
    try:
        tunebench.project(options)
    except tunebench.InputError as error:
        assert problems and {p.key for p in error.problems} == {p.key for p in problems}, error.problems
    else:
        assert not problems
    code = history.main(["add", str(root / "measured"), "--store", str(root / "h.duckdb")])
    err = capsys.readouterr().err
    assert code == (2 if problems else 0), err
    assert "--store" not in err and "history store" not in err
