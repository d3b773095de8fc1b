"""HTML report: rendered from synthetic CSVs; the numbers in its tables and its embedded PNGs are checked.

Reached through the modules it calls (the report's comparison section and HTML blocks):
tunebench/results/report/comparison.py, tunebench/results/report/html.py."""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from tests.fixtures.harness import DATA
from tests.fixtures.report import GIB, failed_row, parse, run_row
from tunebench.results.report import page as report

OOM_TRACE = (
    'Traceback (most recent call last):\n  File "train.py", line 9, in <module>\n'
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
)


@pytest.fixture
def results_csv(tmp_path) -> Path:
    rows = [
        run_row(1, 4),
        run_row(2, 4),
        run_row(4, 4),
        run_row(1, 8),
        run_row(2, 8),
        failed_row(64, "oom", OOM_TRACE),
        failed_row(32, "error", "RuntimeError: boom\nmore context"),
        failed_row(16, "timeout", ""),
    ]
    path = tmp_path / "results" / "raw_summary.csv"
    path.parent.mkdir()
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _number(text: str) -> float:
    return float(re.sub(r"[^0-9.+-]", "", text))


def test_tables_show_the_csv_numbers(results_csv):
    out = report.write_report(results_csv.parent)
    assert out == results_csv.parent / "report.html"
    page = parse(out.read_text())
    table = page.tables["experiments"]
    assert table[0] == [
        "experiment",
        "status",
        "steady non-pad tokens/s",
        "steady tokens/s per device",
        "steady MFU",
        "median step",
        "step spread (robust CV)",
        "whole-run tokens/s",
        "whole-run MFU",
        "peak allocated",
        "scanner peak",
        "runtime",
        "loss",
    ]
    csv = pd.read_csv(results_csv)
    assert len(table) - 1 == len(csv)
    for shown, (_, r) in zip(table[1:], csv.iterrows(), strict=True):
        assert shown[1] == r["status"]
        if r["status"] != "ok":
            assert shown[2:] == ["–"] * 11
            continue
        assert _number(shown[2]) == r["steady_nonpad_tokens_per_second"]
        assert _number(shown[3]) == r["steady_nonpad_tokens_per_second_per_device"]
        assert _number(shown[4]) == pytest.approx(r["steady_mfu"] * 100, abs=0.005)
        assert _number(shown[7]) == r["train_nonpad_tokens_per_second"]
        assert _number(shown[8]) == pytest.approx(r["mfu"] * 100, abs=0.005)
        assert shown[9].endswith(" GiB") and _number(shown[9]) * GIB == pytest.approx(
            r["mem_peak_torch_mem_alloc_in_bytes"], abs=0.005 * GIB
        )
        assert _number(shown[11]) == r["train_runtime"] and shown[11].endswith(" s")
        assert _number(shown[12]) == pytest.approx(r["train_loss"], abs=5e-5)
    # Exact rendering of the first row (independently computed from the fixture formulas).
    assert table[1] == [
        "gpus=1 · bs=4",
        "ok",
        "4,800.0",
        "4,800.0",
        "24.00 %",
        "250.00 ms",
        "2.00 %",  # the robust CV (the plain CV is 1 %)
        "4,000.0",
        "21.25 %",
        "3.00 GiB",
        "3.00 GiB",
        "50.000 s",
        "2.0004",
    ]
    # padded and unpadded side by side, lowest padding first, with the kernel each one got
    padding = page.tables["padding"]
    assert padding[0][:4] == ["experiment", "lengths", "padding", "attention kernel"]
    assert [row[1] for row in padding[1:]] == ["fixed", "fixed", "uniform", "uniform", "uniform"]
    worst = page.tables["predictions"]
    assert (
        worst[0] == ["experiment", "category", "predicted / measured − 1", "measured vs calibrated bound"]
        and worst[1][2] == "+1.00 %"
    )


def test_failures_table_has_status_class_and_error_line(results_csv):
    page = parse(report.build_report(pd.read_csv(results_csv), "x.csv"))
    assert page.tables["failures"] == [
        ["experiment", "status", "error class", "error"],
        [
            "gpus=1 · bs=64",
            "oom",
            "OutOfMemoryError",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        ],
        ["gpus=1 · bs=32", "error", "RuntimeError", "RuntimeError: boom"],
        ["gpus=1 · bs=16", "timeout", "–", "–"],
    ]


def test_charts_are_embedded_valid_pngs(results_csv):
    html_text = report.build_report(pd.read_csv(results_csv), "x.csv")
    page = parse(html_text)
    # memory breakdown, time breakdown, start-up, scaling, memory vs batch size, Pareto front, predicted vs measured
    assert len(page.images) == 7
    for src in page.images:
        assert src.startswith("data:image/png;base64,")
        png = base64.b64decode(src.split(",", 1)[1])
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        with Image.open(io.BytesIO(png)) as img:
            img.load()
            assert img.width > 400 and img.height > 150
    assert "Omitted" not in html_text
    assert 'src="http' not in html_text and "<script" not in html_text  # self-contained, nothing fetched


def test_the_start_up_chart_stacks_each_stage_to_the_measured_total(results_csv):
    """Each bar is the stages in their order, launcher first; the marker is startup_seconds (the launcher is not in it),
    so the stages past the launcher add up to the marker exactly on these rows (issue AE: where start-up goes)."""
    df = pd.read_csv(results_csv)
    ok = df[df["status"] == "ok"]
    stages = [c for c, _ in report.STARTUP_PARTS]
    assert stages[0] == "startup_launcher_seconds"
    assert np.allclose(ok[stages[1:]].sum(axis=1), ok["startup_seconds"])
    page = parse(report.build_report(df, "x.csv"))
    assert "Start-up by stage" in [alt for alt in page.image_alts]


def test_missing_columns_are_omitted_with_a_reason(tmp_path):
    keep = [
        "scenario",
        "framework_config",
        "peft_method",
        "num_gpus",
        "per_device_train_batch_size",
        "status",
        "train_nonpad_tokens_per_second",
    ]
    rows = [{k: v for k, v in run_row(1, bs).items() if k in keep} for bs in (4, 8)]
    path = tmp_path / "cpu.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    html_text = report.write_report(path, tmp_path / "r.html").read_text()
    page = parse(html_text)
    assert page.images == []
    assert html_text.count("Omitted:") == 8  # + no steady-state columns (and so no Pareto front), no predictions
    assert "scan_mem_params" in html_text and "scan_time_forward" in html_text
    assert "startup_imports_seconds" in html_text and "the training entry&#39;s start-up marks" in html_text
    assert "all ok rows have num_gpus = 1" in html_text
    assert "Memory vs effective batch size: no ok row has effective_batch_size." in html_text
    assert page.tables["experiments"][0] == ["experiment", "status", "whole-run tokens/s"]
    assert page.tables["experiments"][1:] == [["bs=4", "ok", "4,000.0"], ["bs=8", "ok", "8,000.0"]]
    assert "No failed experiments." in html_text


def test_report_with_reference_shows_the_comparison(results_csv, tmp_path):
    ref = pd.read_csv(results_csv)
    ref.loc[0, "steady_nonpad_tokens_per_second"] = 6000.0  # results are -20 % against this (no samples: threshold)
    ref_path = tmp_path / "ref.csv"
    ref.to_csv(ref_path, index=False)
    out = report.write_report(results_csv, tmp_path / "r.html", reference=ref_path)
    html_text = out.read_text()
    page = parse(html_text)
    assert '<b class="status-bad">1 regression(s)</b>' in html_text
    assert [
        "gpus=1 · bs=4",
        "regression",
        "yes",
        "steady_nonpad_tokens_per_second",
        "6,000.0",
        "4,800.0",
        "-20.0 %",
    ] in page.tables["findings"]
    assert len(page.images) == 8  # + the change heatmap


def test_main_exit_codes(results_csv, tmp_path, capsys):
    from tunebench.cli import report as report_cli

    assert report_cli.main([str(results_csv), "--out", str(tmp_path / "ok.html")]) == 0
    assert (tmp_path / "ok.html").is_file()
    assert report_cli.main([str(tmp_path / "absent.csv")]) == 2
    assert "absent.csv: file not found" in capsys.readouterr().err
    assert report_cli.main([]) == 2


def test_example_gpu_csv_renders():
    """The committed synthetic GPU-shaped example (also used for docs/images) renders every chart."""
    page = parse(report.build_report(pd.read_csv(DATA / "report_example_gpu.csv"), "example"))
    assert len(page.images) == 4
    assert [r[1] for r in page.tables["failures"][1:]] == ["oom", "timeout"]


def test_a_fit_map_beside_the_results_is_shown_as_a_batch_by_length_map(tmp_path):
    import pandas as pd

    from tunebench.results.report import fit_map as report_fit_map

    results = tmp_path / "benchmarks.csv"
    assert report_fit_map.section(results) == ""  # no map, no section
    pd.DataFrame([
        {"model_name_or_path": "m", "framework_config": "none", "peft_method": "none", "max_seq_len": 1024,
         "num_gpus": 1, "gpu": "NVIDIA H100 80GB HBM3", "max_micro_batch": 22},
        {"model_name_or_path": "m", "framework_config": "none", "peft_method": "none", "max_seq_len": 2048,
         "num_gpus": 1, "gpu": "NVIDIA H100 80GB HBM3", "max_micro_batch": 11},
        {"model_name_or_path": "n", "framework_config": "gc", "peft_method": "lora", "max_seq_len": 2048,
         "num_gpus": 1, "gpu": "NVIDIA H100 80GB HBM3", "max_micro_batch": None},
    ]).to_csv(tmp_path / "fit_map.csv", index=False)
    page = report_fit_map.section(results)
    assert "<h3>NVIDIA H100 80GB HBM3</h3>" in page
    assert "<th>1024 tokens</th><th>2048 tokens</th>" in page
    assert '<td>m · none · none · 1 GPU(s)</td><td class="num">22</td><td class="num">11</td>' in page
    assert '<td>n · gc · lora · 1 GPU(s)</td><td class="num">–</td><td class="num">–</td>' in page


def test_a_cpu_run_shows_its_host_memory_where_the_device_peaks_are_empty(tmp_path):
    """Issue AD: on CPU `scan_mem_peak_allocated` is empty and nothing pointed to the host's memory; the batch-size
    section said "omitted" though effective_batch_size was filled. The experiments table shows the peak host RSS
    (and says why the scanner peak is not shown), the memory-vs-batch curve plots it."""
    cpu = {"device_type": "cpu", "scan_mem_peak_allocated": np.nan, "mem_peak_torch_mem_alloc_in_bytes": np.nan,
           "mem_peak_torch_max_allocated_bytes": np.nan}
    rows = [run_row(1, bs, **cpu, mem_peak_host_rss_bytes=bs * 2**28, effective_batch_size=bs) for bs in (4, 8)]
    path = tmp_path / "cpu.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    html_text = report.write_report(path, tmp_path / "r.html").read_text()
    page = parse(html_text)
    header = page.tables["experiments"][0]
    assert "peak host RSS (CPU)" in header and "scanner peak" not in header
    assert page.tables["experiments"][1][header.index("peak host RSS (CPU)")] == "1.00 GiB"
    assert ("scanner peak (a CPU run has no device allocator: its memory is the peak host RSS)") in html_text
    assert "Memory vs effective batch size: " not in html_text  # charted, not omitted
