"""The end-of-run console table (issue Q): each measurement warning keyed by its row's experiment id, GPUs and
batch, one line per row, so a 16-row matrix's warnings can be told apart."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tunebench.results.summaries import summary_table


def row(experiment_id: str, gpus: int, bs: int, warning, ga: int = 1) -> dict:
    return {"experiment_id": experiment_id, "scenario": "full-finetuning", "framework_config": "none",
            "model_name_or_path": "preset:llama-tiny", "num_gpus": gpus, "per_device_train_batch_size": bs,
            "gradient_accumulation_steps": ga, "status": "ok", "measurement_warning": warning}


def test_each_warning_line_names_its_row():
    frame = pd.DataFrame([
        row("0a1b2c3d4e5f", 1, 4, "step time CV 13.5 % exceeds 5 %: the steady window is not steady"),
        row("00ff00ff00ff", 1, 8, "step time CV 6.9 % exceeds 5 %: the steady window is not steady", ga=2),
        row("123456789abc", 2, 2, ""),  # no warning: no line
        row("fedcba987654", 2, 4, np.nan),  # a CSV cell without one: no line either
        row("777777777777", 2, 4, "only 3 steady step(s) (< 10): raise max_steps"),
    ])
    text = summary_table(frame)
    notes = text.split("measurement warnings:\n", 1)[1].splitlines()
    assert notes == [
        "  ! 0a1b2c3d4e5f full-finetuning/none gpus=1 bs=4×1: step time CV 13.5 % exceeds 5 %: the steady window "
        "is not steady",
        "  ! 00ff00ff00ff full-finetuning/none gpus=1 bs=8×2: step time CV 6.9 % exceeds 5 %: the steady window is "
        "not steady",
        "  ! 777777777777 full-finetuning/none gpus=2 bs=4×1: only 3 steady step(s) (< 10): raise max_steps",
    ]


def test_rows_from_a_csv_read_back_keep_integer_settings_and_a_clean_run_prints_no_section():
    frame = pd.DataFrame([row("a" * 12, 2, 4, "x")]).astype({"num_gpus": float, "per_device_train_batch_size": float})
    assert summary_table(frame).endswith("\n  ! aaaaaaaaaaaa full-finetuning/none gpus=2 bs=4×1: x")
    assert "measurement warnings" not in summary_table(pd.DataFrame([row("b" * 12, 1, 4, "")]))


def test_the_tables_spread_is_the_one_its_warning_names():
    """Issue W2: the table's `cv %` (std/mean, 7.5) and the warning's robust CV (6.9 %) disagreed for one row. The
    table shows the robust CV the warning judges: the same figure, from the same steps."""
    from tunebench.experiment.steady import SteadyPolicy, summarize

    times = [1.0] * 3 + [0.93, 1.07, 0.95, 1.05, 1.0, 0.92, 1.08, 1.0, 1.5, 0.94, 1.06]  # warm-up, then a spread
    summary = summarize(times, SteadyPolicy(warmup_steps=3, min_steps=5, max_cv=0.05))
    (warning,) = summary.warnings
    robust, plain = f"{100 * summary.robust_cv:.1f}", f"{100 * summary.cv:.1f}"
    assert robust != plain and f"step time spread {robust} % (robust CV" in warning
    frame = pd.DataFrame([{**row("0a1b2c3d4e5f", 1, 4, warning), "steady_step_time_cv": summary.cv,
                           "steady_step_time_robust_cv": summary.robust_cv}])
    header, line = summary_table(frame).splitlines()[:2]
    assert "robust cv %" in header and robust in line.split() and plain not in line.split()
