"""docs/evidence/projection-h100-h200/projection_report.py on synthetic device outputs: an "H200" whose every
kernel took what the model says, so the H100 -> H200 projection must come out exact and the evidence document must
be written."""

import json
import sys
import tarfile
from pathlib import Path

import pandas as pd
import pytest

from scanner.kernel_split import flat_kernels, summarise_kernels, write_rows
from tests.fixtures.harness import REPO
from tests.fixtures.projection import PHASE_US, STEADY_US, kernel_rows, make_results
from tunebench.hardware.gpus import Gpu
from tunebench.projection.host_replay import Timeline, calibrate
from tunebench.projection.kernel_model import Rates, kernel_seconds

sys.path.insert(0, str(REPO / "docs/evidence/projection-h100-h200"))
H100 = Gpu("h100", (), {"bf16_tflops": 798, "memory_tb_per_s": 3.0, "kernel_floor_us": 2.0})
H200 = Gpu("h200", (), {"bf16_tflops": 788, "memory_tb_per_s": 4.3, "kernel_floor_us": 2.0})


def device_output(root: Path, name: str, gpu: str, peaks: dict, scale=None) -> Path:
    """What projection_evidence.sh returns, for the fixture's experiment measured on `gpu`; `scale`: the kernels
    and step of another GPU, as the model would have them there (its kernel times, the replay's host)."""
    results = root / f"{name}-results"
    folder, _ = make_results(results)
    rows = kernel_rows()
    if scale is not None:  # the step the replay gives on the other GPU, laid out kernel by kernel
        src, dst = scale
        host = calibrate(Timeline.of(rows), STEADY_US * 1e-6)
        ready = 0.0
        for row in sorted(rows, key=lambda r: r["launch_us"]):
            row["launch_us"] *= host
            row["dur_us"] = kernel_seconds(row, src, dst) * 1e6
            row["start_us"] = max(ready, row["launch_us"])
            ready = row["start_us"] + row["dur_us"]
        phases = {p: v * ready / STEADY_US for p, v in PHASE_US.items()}
        result = json.loads((folder / "results.json").read_text())
        result.update({"gpu_name": gpu, "steady_step_time_median": ready * 1e-6,
                       "steady_tokens_per_second": 8192 / (ready * 1e-6),
                       "steady_nonpad_tokens_per_second": 8192 / (ready * 1e-6),
                       **{f"scan_time_{p}": v * 1e-6 for p, v in phases.items()},
                       **flat_kernels(summarise_kernels(rows, 1))})
        (folder / "results.json").write_text(json.dumps(result))
        write_rows(str(folder / "kernels.csv.gz"), rows)
    out = root / name
    out.mkdir()
    with tarfile.open(out / "results.tgz", "w:gz") as tar:
        for path in folder.iterdir():
            if path.name != "kernels.csv.gz":
                tar.add(path, arcname=f"{folder.name}/{path.name}")
    with tarfile.open(out / "kernels-proj-1b.tgz", "w:gz") as tar:
        tar.add(folder / "kernels.csv.gz", arcname=f"{folder.name}/kernels.csv.gz")
    (out / "peaks.json").write_text(json.dumps({"device": gpu, **peaks}))
    return out


@pytest.mark.slow
def test_the_offline_report_projects_both_ways_and_writes_the_evidence(tmp_path):
    import projection_report

    h100 = device_output(tmp_path, "h100", "NVIDIA H100 80GB HBM3",
                         {"bf16_matmul_tflops": 798, "copy_tb_per_s": 3.0, "tiny_kernel_gpu_us": 2.0})
    h200 = device_output(tmp_path, "h200", "NVIDIA H200",
                         {"bf16_matmul_tflops": 788, "copy_tb_per_s": 4.3, "tiny_kernel_gpu_us": 2.0},
                         scale=(Rates.of(H100), Rates.of(H200)))
    doc = tmp_path / "docs" / "projection-h100-h200.md"
    assert projection_report.main([str(h100), str(h200), "--doc", str(doc), "--work", str(tmp_path / "w")]) == 0
    errors = pd.read_csv(doc.with_suffix("") / "projection-errors.csv").set_index("direction")
    assert abs(errors.loc["H100 → H200", "proj_error"]) < 1e-9  # the "H200" ran exactly what the model says
    assert abs(errors.loc["H200 → H100", "proj_error"]) < 1e-3  # back again: the same roofline, inverted
    text = doc.read_text()
    assert "median absolute error **0.0 %**" in text and "## Assumptions the measurement contradicts" in text
    ratios = pd.read_csv(doc.with_suffix("") / "kernel-class-ratios.csv")
    assert (ratios["measured_ratio"] - ratios["model_ratio"]).abs().max() < 1e-9
