"""Calibrated bounds of the memory prediction (tunebench.planning.residuals): learned from measured residuals kept
as data, widened from the plan's GPU and allocator setting to all rows only where there are none, and judged by
`fits` (with the allocator's slack measured over the same bound)."""


import pandas as pd
import pytest

from tunebench.planning import residuals
from tunebench.planning.allocator_slack import verdict_columns

H100, CONF = "NVIDIA H100 80GB HBM3", "expandable_segments:True"


def _data(tmp_path, monkeypatch, rows):
    path = tmp_path / "residuals.csv"
    pd.DataFrame(rows, columns=residuals.COLUMNS).to_csv(path, index=False)
    monkeypatch.setattr(residuals, "RESIDUAL_FILE", path)
    residuals.bound_ratios.cache_clear()
    yield
    residuals.bound_ratios.cache_clear()


@pytest.fixture
def data(tmp_path, monkeypatch):
    yield from _data(tmp_path, monkeypatch, [
        ("d", H100, CONF, "a", "peak", 1000, 1010),  # 1 % under-predicted
        ("d", H100, CONF, "b", "peak", 1000, 990),  # over-predicted: says nothing about the upper side
        ("d", H100, CONF, "a", "activations", 400, 400),
        ("d", H100, "", "c", "peak", 1000, 1050),  # the default allocator: block tails in the measured peak
        ("d", "NVIDIA H200", CONF, "e", "peak", 1000, 1020),
    ])


def test_the_bound_is_the_largest_under_prediction_of_the_same_gpu_and_allocator(data):
    assert residuals.bound_ratios(H100, CONF) == pytest.approx({"peak": 0.01, "activations": 0.0})
    assert residuals.bound_ratios(H100, "")["peak"] == pytest.approx(0.05)
    assert residuals.bound_ratios(H100, "max_split_size_mb:128")["peak"] == pytest.approx(0.05)  # the GPU's rows
    assert residuals.bound_ratios("NVIDIA A100", CONF)["peak"] == pytest.approx(0.05)  # every row
    assert residuals.upper(100_000, "peak", H100, CONF) == 101_376  # 101 000 up to whole 512 B blocks
    assert residuals.upper(100_000, "grads", H100, CONF) == 100_000  # no residual: its own bound


def test_rows_come_from_comparable_ok_cuda_rows_only():
    summary = pd.DataFrame([
        {"status": "ok", "gpu_name": H100, "cuda_alloc_conf": CONF, "experiment_id": "x", "pred_mem_peak": 100,
         "mem_peak_torch_max_allocated_bytes": 110, "pred_mem_params": 5, "scan_mem_params": 5},
        {"status": "oom", "gpu_name": H100, "experiment_id": "y", "pred_mem_peak": 100},
        {"status": "ok", "gpu_name": None, "experiment_id": "cpu", "pred_mem_peak": 1,
         "mem_peak_torch_max_allocated_bytes": 1},
    ])
    rows = residuals.residual_rows(summary, "doc.md")
    assert rows[["experiment", "category", "predicted", "measured"]].values.tolist() == [
        ["x", "params", 5, 5], ["x", "peak", 100, 110]]
    assert set(rows["cuda_alloc_conf"]) == {CONF}


def test_fits_judges_the_bound_plus_the_slack_on_cuda_and_the_peak_elsewhere(data, monkeypatch):
    import tunebench.planning.allocator_slack as slack

    monkeypatch.setattr(slack, "edge_slack", lambda *a, **k: 4096)
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", CONF)
    prediction = {"pred_mem_peak": 100_000, "pred_mem_activations": 40_000}
    cuda = verdict_columns(prediction, 106_000 * 10, True, H100)
    assert cuda["pred_mem_peak_upper"] == 101_376 and cuda["pred_mem_activations_upper"] == 40_000
    assert cuda["pred_mem_reserved"] == 101_376 + 4096
    cpu = verdict_columns(prediction, 106_000 * 10, False, None)
    assert cpu["pred_mem_reserved"] == 100_000 and "pred_mem_peak_upper" not in cpu


def test_the_shipped_residuals_bound_every_shipped_row_they_came_from():
    """Every H100 row with expandable segments is within its bound: the bound is the data's maximum, not a guess."""
    residuals.bound_ratios.cache_clear()
    data = pd.read_csv(residuals.RESIDUAL_FILE, keep_default_na=False)
    rows = data[(data.gpu_name == H100) & (data.cuda_alloc_conf == CONF)]
    assert len(rows) >= 40
    for row in rows.itertuples():
        assert row.measured <= residuals.upper(row.predicted, row.category, H100, CONF), row


def test_an_evidence_run_appends_its_rows_once(tmp_path, monkeypatch):
    from tests.fixtures.harness import EVIDENCE, load_script

    module = load_script(EVIDENCE / "common" / "residual_rows.py")
    path = tmp_path / "residuals.csv"
    monkeypatch.setattr(module, "RESIDUAL_FILE", path)
    summary = tmp_path / "raw_summary.csv"
    pd.DataFrame([{"status": "ok", "gpu_name": H100, "experiment_id": "x", "pred_mem_peak": 100,
                   "mem_peak_torch_max_allocated_bytes": 110}]).to_csv(summary, index=False)
    module.main([str(summary), "doc.md"])
    once = path.read_text()
    module.main([str(summary), "doc.md"])
    assert path.read_text() == once and len(pd.read_csv(path)) == 1
