"""tunebench.experiment.finite_loss: a NaN or infinite loss makes an error row with no loss figure."""

from __future__ import annotations

import math
import subprocess
import sys

import pandas as pd
import pytest

from tests.fixtures.harness import REPO, tiny_scenario, write_inputs
from tunebench.experiment.finite_loss import LOSS_COLUMNS, guard, nonfinite_steps


def test_finite_losses_keep_the_row():
    row = {"status": "ok", "train_loss": 2.5}
    assert guard(row, {1: 3.0, 2: 2.0}, 2) is row


def test_a_nan_step_fails_the_row_even_when_transformers_filled_in_a_number():
    row = {"status": "ok", "train_loss": 0.0, "train_loss_last_step": math.nan, "loss_first_step": 5.0,
           "steady_nonpad_tokens_per_second": 1000.0}
    failed = guard(row, {1: 5.0, 2: math.nan, 3: math.inf, 4: math.nan}, 4)
    assert failed["status"] == "error"
    assert all(failed[column] is None for column in LOSS_COLUMNS)
    assert failed["steady_nonpad_tokens_per_second"] == 1000.0  # the timing was measured; the run is what failed
    assert failed["error_messages"].startswith("nonfinite_loss: the loss diverged: step 2's loss is nan (3 of 4 steps")
    assert "filled in by transformers" in failed["error_messages"]


def test_a_nonfinite_train_loss_alone_fails_the_row():
    failed = guard({"status": "ok", "train_loss": math.inf}, {1: 1.0}, 1)
    assert failed["status"] == "error" and failed["train_loss"] is None


def test_nonfinite_steps_in_order():
    assert nonfinite_steps({3: math.nan, 1: 1.0, 2: -math.inf}) == [2, 3]


@pytest.mark.slow
def test_a_diverging_run_is_an_error_row_with_no_loss_in_the_csv(tmp_path):
    """A learning rate of 1000 on float16 weights overflows them within steps: the harness records the run as an error
    of class nonfinite_loss, the CSV holds no loss number for it, and the matrix's other row is unharmed."""
    diverging = tiny_scenario("diverges", learning_rate=1000, torch_dtype="float16")
    options = write_inputs(tmp_path, [tiny_scenario("ok"), diverging])
    done = subprocess.run([sys.executable, str(REPO / "benchmark.py"), *options, "--results_output_path",
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = pd.read_csv(tmp_path / "out" / "raw_summary.csv").set_index("scenario")
    assert rows.loc["ok", "status"] == "ok" and math.isfinite(rows.loc["ok", "train_loss"])
    assert rows.loc["diverges", "status"] == "error"
    assert rows.loc["diverges", "error_messages"].startswith("nonfinite_loss: the loss diverged: step ")
    for column in ("train_loss", "train_loss_last_step", "loss_first_step"):
        assert pd.isna(rows.loc["diverges", column])
