"""The floor split of docs/evidence/matrix-wall-h200/floor.py, on two hand-made rows whose parts are known exactly,
and on the committed call-F rows against the sums the evidence page states."""

import pandas as pd
import pytest

from tests.fixtures.harness import EVIDENCE, load_script

HERE = EVIDENCE / "matrix-wall-h200"


def test_two_rows_split_into_their_known_parts():
    floor = load_script(HERE / "floor.py")
    # Row 1: starts at 100, 0.5 s before the GPU, 2 s GPU-side, trains 10 s, exits 1 s later: ends at 113.5.
    # Row 2: starts 0.25 s after that, its parts 0.25 / 3 / 20 / 0.5: ends at 137.5; a failed row is left out.
    rows = pd.DataFrame([
        {"status": "ok", "experiment_start_unix": 100.0, "experiment_end_unix": 113.5, "startup_launcher_seconds": 0.0,
         "startup_imports_seconds": 0.25, "startup_data_seconds": 0.25, "startup_model_seconds": 1.0,
         "startup_trainer_seconds": 0.5, "startup_train_setup_seconds": 0.5, "startup_seconds": 2.5,
         "train_runtime": 10.0, "experiment_wall_seconds": 13.5},
        {"status": "oom", "experiment_start_unix": 113.6, "experiment_end_unix": 113.7},
        {"status": "ok", "experiment_start_unix": 113.75, "experiment_end_unix": 137.5, "startup_launcher_seconds": 0.0,
         "startup_imports_seconds": 0.25, "startup_data_seconds": 0.0, "startup_model_seconds": 2.0,
         "startup_trainer_seconds": 0.5, "startup_train_setup_seconds": 0.5, "startup_seconds": 3.25,
         "train_runtime": 20.0, "experiment_wall_seconds": 23.75},
    ])
    assert list(floor.parts(rows).values()) == [0.75, 0.25, 5.0, 30.0, 1.5, 37.5]


def test_the_call_f_rows_give_the_page_s_sums():
    floor = load_script(HERE / "floor.py")
    parts = floor.parts(pd.read_csv(HERE / "call-f" / "raw_summary-after.csv"))
    assert [round(v, 2) for v in parts.values()] == pytest.approx([2.19, 3.44, 25.18, 68.58, 2.18, 101.52])
