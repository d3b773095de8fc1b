"""The report qualifies what it shows (issue Q): measurement warnings beside every steady figure, the scaling
chart on steady throughput, and CPU predictions compared only where prediction and measurement mean the same.

Reached through the modules it calls (the report's measurement warnings):
tunebench/results/report/measurement_warnings.py."""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import pytest

from tests.fixtures.report import GIB, failed_row, parse, run_row
from tunebench.results.charts import figures as charts
from tunebench.results.report import page as report

CV_WARNING = "step time CV 67.1 % exceeds 5 %: the steady window is not steady"
FEW_WARNING = "only 3 steady step(s) (< 10): raise max_steps"
MIB = 1024**2


def render(rows: list[dict], **kwargs) -> tuple[str, object]:
    html_text = report.build_report(pd.DataFrame(rows), "x.csv", **kwargs)
    return html_text, parse(html_text)


def _after(table: list[list[str]], classes: list[str], label: str) -> tuple[list[str], str, list[str]]:
    """The row labelled `label`, the class of the row after it and that row's cells."""
    i = next(i for i, row in enumerate(table) if row[0] == label)
    following = i + 1 < len(table)
    return table[i], classes[i + 1] if following else "", table[i + 1] if following else []


@pytest.fixture
def warned_rows() -> list[dict]:
    return [
        run_row(1, 4, measurement_warning=CV_WARNING),
        run_row(2, 4),
        run_row(1, 8, measurement_warning=FEW_WARNING),
        run_row(2, 8),
        failed_row(16, "oom", "torch.OutOfMemoryError: CUDA out of memory"),
    ]


def test_warnings_are_counted_at_the_top_and_shown_beside_each_rows_steady_figures(warned_rows):
    html_text, page = render(warned_rows)
    top = html_text.index("2 of 5 rows carry a measurement warning")
    assert top < html_text.index("<h2>Experiments</h2>")  # the summary comes before any figure

    table, classes = page.tables["experiments"], page.row_classes["experiments"]
    row, after_class, after = _after(table, classes, "gpus=1 · bs=4")
    # steady figures carry the badge ("!"), whole-run ones and the rest do not
    assert row == ["gpus=1 · bs=4", "ok", "!4,800.0", "!4,800.0", "!24.00 %", "!250.00 ms", "!2.00 %", "4,000.0",
                   "21.25 %", "3.00 GiB", "3.00 GiB", "50.000 s", "2.0004"]
    assert after_class == "warning" and after == [f"!measurement warning: {CV_WARNING}"]
    row, after_class, after = _after(table, classes, "gpus=1 · bs=8")
    assert row[2] == "!9,600.0" and after == [f"!measurement warning: {FEW_WARNING}"]
    row, after_class, _ = _after(table, classes, "gpus=2 · bs=4")
    assert "!" not in "".join(row) and after_class != "warning"
    assert classes.count("warning") == 2

    padding, padding_classes = page.tables["padding"], page.row_classes["padding"]
    # the spread the warning judges (robust CV 2 %), not the plain CV (1 %) the column once showed
    assert padding[0] == ["experiment", "lengths", "padding", "attention kernel", "median step",
                          "steady non-pad tokens/s", "step spread (robust CV)"]
    row, after_class, after = _after(padding, padding_classes, "gpus=1 · bs=4")
    # the padding fraction is a token count, exact however scattered the step times: not qualified
    assert row == ["gpus=1 · bs=4", "uniform", "25.00 %", "efficient", "!250.00 ms", "!4,800.0", "!2.00 %"]
    # issue AD: each row's warning is printed once (under it in Experiments), not again under every table
    assert after_class != "warning" and padding_classes.count("warning") == 0
    assert "marks the steady figures of 2 row(s) with a measurement warning; each row's reason is printed once" \
        in html_text
    assert html_text.count(html.escape(CV_WARNING)) == 1 and html_text.count(html.escape(FEW_WARNING)) == 1


def test_warning_text_is_escaped_and_a_clean_run_says_so(warned_rows):
    html_text, _ = render([run_row(1, 4, measurement_warning="<b>odd</b> & more"), run_row(2, 4)])
    assert "&lt;b&gt;odd&lt;/b&gt; &amp; more" in html_text and "<b>odd</b>" not in html_text
    clean = [{**r, "measurement_warning": np.nan} for r in warned_rows]
    html_text, page = render(clean)
    assert "No row carries a measurement warning (5 rows)." in html_text
    assert 'class="warn-mark"' not in html_text and "warning" not in page.row_classes["experiments"]
    html_text, _ = render([run_row(1, 4), run_row(2, 4)])  # an older CSV: no such column at all
    assert "has no <code>measurement_warning</code> column" in html_text


def test_scaling_plots_steady_throughput_and_falls_back_per_row_with_a_label(monkeypatch):
    unsteady = {c: np.nan for c in ("steady_nonpad_tokens_per_second", "steady_nonpad_tokens_per_second_per_device",
                                    "steady_mfu")}
    rows = [run_row(1, 4), run_row(2, 4, measurement_warning=CV_WARNING), run_row(4, 4),
            run_row(1, 8, **unsteady), run_row(2, 8, **unsteady)]
    seen = []
    real = charts.line_panels
    monkeypatch.setattr(charts, "line_panels", lambda specs: seen.append(specs) or real(specs))
    html_text, _ = render(rows)
    scaling = next(specs for specs in seen if specs[0]["xlabel"] == "num_gpus")
    assert [s["title"] for s in scaling] == ["steady non-pad tokens/s (global)", "steady non-pad tokens/s per device",
                                             "steady MFU (%)"]
    xs, ys, flags = scaling[0]["series"]["bs=4"]
    assert xs.tolist() == [1, 2, 4] and ys.tolist() == [4800.0, 9600.0, 19200.0]  # steady: 1200 × gpus × bs
    assert flags.tolist() == [False, True, False]  # the 2-GPU point's row carries the warning
    xs, ys, flags = scaling[0]["series"]["bs=8 (whole-run figure)"]
    assert xs.tolist() == [1, 2] and ys.tolist() == [8000.0, 16000.0] and not flags.any()  # whole-run: 1000 × …
    assert scaling[2]["series"]["bs=4"][1] == pytest.approx([24.0, 24.0, 24.0])
    assert scaling[2]["series"]["bs=8 (whole-run figure)"][1] == pytest.approx([41.25, 41.25])
    # under the chart: which rows fell back, and which plotted rows carry a warning (with its text)
    assert "2 row(s) have no steady figures" in html_text
    assert "1 of the 5 rows plotted in this chart carry a measurement warning" in html_text
    assert "(their points are ringed and marked !; each reason is under its row in Experiments): gpus=2 · bs=4</div>" \
        in html_text


def test_cpu_rows_rank_only_comparable_predictions_and_gpu_rows_are_unchanged(monkeypatch):
    cpu = {"device_type": "cpu", "pred_mem_grads": 0.0, "pred_error_grads": -1.0,
           "pred_mem_temporaries": 4.0 * MIB, "scan_mem_temporaries": np.nan}
    rows = [run_row(1, 4, **cpu, pred_error_activations=0.0308),
            run_row(1, 8, **cpu, pred_error_activations=-1e-9),
            run_row(2, 4, pred_mem_grads=0.0, pred_error_grads=-1.0, pred_error_activations=0.01)]
    seen = {}
    real = charts.predicted_vs_measured

    def keep(df, pairs):
        seen["df"] = df
        return real(df, pairs)

    monkeypatch.setattr(charts, "predicted_vs_measured", keep)
    html_text, page = render(rows)
    assert page.tables["predictions"][1:] == [
        ["gpus=2 · bs=4", "grads", "-100.00 %", "–"],  # the GPU row keeps every category
        ["gpus=1 · bs=4", "activations", "+3.08 %", "–"],
        ["gpus=2 · bs=4", "activations", "+1.00 %", "–"],
        ["gpus=1 · bs=8", "activations", "+0.00 %", "–"],  # a few bytes under is not "-0.00 %"
        ["gpus=1 · bs=4", "params", "+0.00 %", "–"],
        ["gpus=1 · bs=8", "params", "+0.00 %", "–"],
        ["gpus=2 · bs=4", "params", "+0.00 %", "–"],
    ]
    assert "Not compared on the 2 CPU row(s): grads, temporaries (GPU rows compare every category)" in html_text
    assert "most gradient memory held at any phase boundary" in html_text
    charted = seen["df"]
    # the chart gets the CPU rows' grads blanked, the GPU row's grads and every activation as they were
    assert charted["pred_mem_grads"].isna().tolist() == [True, True, False]
    assert charted["pred_mem_activations"].tolist() == pytest.approx([1.01 * GIB, 2.02 * GIB, 1.01 * GIB])


def test_comparison_findings_mark_a_warned_rows_steady_figures(tmp_path):
    rows = [run_row(1, 4, measurement_warning=CV_WARNING), run_row(2, 4)]
    reference = pd.DataFrame(rows)
    reference.loc[0, "steady_nonpad_tokens_per_second"] = 6000.0  # results are -20 % against this
    reference.attrs["path"] = "ref.csv"
    html_text, page = render(rows, reference=reference)
    findings, classes = page.tables["findings"], page.row_classes["findings"]
    i = next(i for i, r in enumerate(findings) if r[3] == "steady_nonpad_tokens_per_second")
    assert findings[i] == ["gpus=1", "regression", "yes", "steady_nonpad_tokens_per_second", "6,000.0",
                           "!4,800.0", "-20.0 %"]
    assert "warning" not in classes  # the reason is under the row in Experiments, once; here the badge points to it
    assert "marks the steady figures of 1 row(s) with a measurement warning" in html_text


def test_columns_empty_in_every_row_are_named_not_shown():
    rows = [run_row(1, bs, mfu=np.nan, steady_mfu=np.nan) for bs in (4, 8)]
    html_text, page = render(rows)
    assert "steady MFU" not in page.tables["experiments"][0] and "whole-run MFU" not in page.tables["experiments"][0]
    assert "Empty in every row, so not shown: steady MFU, whole-run MFU." in html_text


def test_a_prediction_is_shown_against_its_calibrated_bound():
    import pandas as pd

    from tunebench.results.report.predictions import bound_word

    row = pd.Series({"pred_mem_peak": 1000, "pred_mem_peak_upper": 1010, "mem_peak_torch_max_allocated_bytes": 1005})
    assert bound_word(row, "peak", "mem_peak_torch_max_allocated_bytes") == "within (+1.00 %)"
    row["mem_peak_torch_max_allocated_bytes"] = 1011
    assert bound_word(row, "peak", "mem_peak_torch_max_allocated_bytes").startswith("above (+1.00 %)")
    assert bound_word(row.drop("pred_mem_peak_upper"), "peak", "mem_peak_torch_max_allocated_bytes") == "–"
