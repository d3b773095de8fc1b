"""tunebench/results/row_values.py: the one check of a results row's values, as every reader of a results folder
(the CSVs, scaling, projection, history, tune) meets it through results.summaries.newest_rows (issue AD)."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pandas as pd
import pytest

from tunebench.results import summaries
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
