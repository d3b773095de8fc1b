"""Projection onto another GPU kind: known answers on a synthetic profile, the measurement back on its own GPU,
cost and energy, and the `plan --project_from` command."""

import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fixtures.harness import REPO
from tests.fixtures.projection import (
    H100,
    PHASE_US,
    PROFILE,
    STEADY_US,
    TOKENS,
    kernel_rows,
    make_results,
    measured_row,
)
from tunebench.hardware.gpus import Gpu, load_table
from tunebench.projection.kernel_model import Rates, kernel_seconds, matmul_work
from tunebench.projection.project import project_one, project_rows
from tunebench.projection.step_model import Measured, project_step
from tunebench.results.folder import folders_by_id


def _project(frame, target: str, gpu_table: str, results: Path, **options):
    """project_rows as the projection calls it: the GPU resolved in the table, the folders of `results`."""
    table = load_table(gpu_table)
    return project_rows(frame, table, table.lookup(target), folders_by_id(results), **options)


# A made-up target (given to the table by a user YAML below): half the matmul rate and twice the bandwidth of
# the measured GPU, the same kernel floor.
SRC = Gpu("src", (), {"bf16_tflops": 800.0, "memory_tb_per_s": 3.0, "kernel_floor_us": 2.0, "host_link_gb_per_s": 64})
DST = Gpu("dst", (), {"bf16_tflops": 400.0, "memory_tb_per_s": 6.0, "kernel_floor_us": 2.0, "host_link_gb_per_s": 64,
                      "power_w": 500.0})


def row_of(cls, dur, op="", dims=""):
    return {"class": cls, "dur_us": dur, "op": op, "op_dims": dims, "op_types": '["c10::BFloat16"]' if dims else ""}


def test_each_kernel_scales_with_what_binds_it():
    src, dst = Rates.of(SRC), Rates.of(DST)
    us = 1e-6
    # a square matmul is compute-bound: 2 µs fixed + 998 µs × (800/400)
    assert kernel_seconds(row_of("gemm", 1000, *PROFILE[0][3:]), src, dst) == pytest.approx(1998 * us)
    # LoRA's rank-16 product moves 67.5 MB for 1.07 GFLOP: bandwidth-bound, 2 + 40 × (3/6)
    flops, moved = matmul_work("aten::mm", "[[8192,4096],[4096,16]]", '["c10::BFloat16","c10::BFloat16"]')
    assert flops == 2 * 8192 * 4096 * 16 and moved == 2 * (8192 * 4096 + 4096 * 16 + 8192 * 16)
    assert kernel_seconds(row_of("gemm", 42, *PROFILE[2][3:]), src, dst) == pytest.approx(22 * us)
    assert kernel_seconds(row_of("elementwise", 502), src, dst) == pytest.approx(252 * us)
    assert kernel_seconds(row_of("attention", 3002), src, dst) == pytest.approx(6002 * us)
    assert kernel_seconds(row_of("transfer", 66), src, dst) == pytest.approx(66 * us)  # same host link
    assert kernel_seconds(row_of("copy", 1.5), src, dst) == pytest.approx(1.5 * us)  # all fixed cost
    # batched matmuls and addmm read their shapes past the bias
    assert matmul_work("aten::bmm", "[[4,8,16],[4,16,32]]", '["float","float"]') == (2 * 4 * 8 * 16 * 32,
                                                                                   4 * 4 * (8 * 16 + 16 * 32 + 8 * 32))
    assert matmul_work("aten::addmm", "[[32],[8,16],[16,32]]", '["float","float","float"]')[0] == 2 * 8 * 16 * 32
    assert matmul_work("aten::mm", "not json", "") is None and matmul_work("aten::add", "[[1]]", "") is None


def test_streaming_kernels_scale_by_their_roofline_and_their_path():
    """Bytes from the operator's shapes; at the source's roofline the kernel scales with its path's streaming rate,
    below it the time stays (no worse than its bytes at the target's rate); reductions keep the class ratio."""
    from tunebench.projection.kernel_model import streamed_bytes

    shape, types = "[[8,1024,2048],[8,1024,2048]]", '["c10::BFloat16","c10::BFloat16"]'
    n = 8 * 1024 * 2048
    assert streamed_bytes("aten::mul", shape, types) == 3 * 2 * n  # two read, one written
    assert streamed_bytes("aten::mul", "[[8,1024,2048],[2048]]", types) == 2 * 2 * n + 2 * 2048  # broadcast
    assert streamed_bytes("aten::add_", shape, types) == 3 * 2 * n  # in place: both read, the first written
    assert streamed_bytes("aten::copy_", f"{shape[:-1]},[]]", '["float","c10::BFloat16","Scalar"]') == 6 * n
    assert streamed_bytes("aten::fill_", "[[8,1024,2048],[]]", '["c10::BFloat16","Scalar"]') == 2 * n
    assert streamed_bytes("aten::mean", "[[8,1024,2048],[],[],[]]", '["float","ScalarList","Scalar",""]') == 4 * n
    for op in ("aten::mm", "aten::_foreach_mul_", "aten::_fused_adamw_", "aten::cat", "prim::x"):
        assert streamed_bytes(op, shape, types) is None
    assert streamed_bytes("aten::mul", "[[],[]]", '["float","long int"]') is None  # scalars only
    # The path rates: vectorized at the bandwidth, unrolled (casts) and strided (broadcasts) at their own.
    src = Rates.of(Gpu("s", (), {"bf16_tflops": 800.0, "memory_tb_per_s": 3.0, "unrolled_tb_per_s": 2.0,
                                 "strided_tb_per_s": 1.5}))
    dst = Rates.of(Gpu("d", (), {"bf16_tflops": 800.0, "memory_tb_per_s": 4.5, "unrolled_tb_per_s": 2.5,
                                 "strided_tb_per_s": 1.5}))
    vectorized, unrolled = "vectorized_elementwise_kernel<8, Mul>", "unrolled_elementwise_kernel<copy>"
    strided = "elementwise_kernel<128, 4, Mul>"
    assert (src.streaming(vectorized), src.streaming(unrolled), src.streaming(strided)) == (3e12, 2e12, 1.5e12)
    assert Rates.of(SRC).streaming(unrolled) == 3e12  # no path figure: the bandwidth
    moved = 3 * 2 * n  # 100.7 MB

    def time(name, work_us, dims=shape, cls="elementwise", op="aten::mul"):
        row = {"class": cls, "dur_us": work_us, "op": op, "op_dims": dims, "op_types": types, "name": name}
        return kernel_seconds(row, src, dst) * 1e6

    at_roofline = moved / 3e12 * 1e6  # 33.55 µs: scales 3 → 4.5 TB/s
    assert time(vectorized, at_roofline) == pytest.approx(at_roofline * 3 / 4.5)
    assert time(unrolled, moved / 2e12 * 1e6) == pytest.approx(moved / 2.5e12 * 1e6)  # its own path's rates
    assert time(strided, moved / 1.5e12 * 1e6) == pytest.approx(moved / 1.5e12 * 1e6)  # same rate on both
    assert time(vectorized, 2 * at_roofline) == pytest.approx(2 * at_roofline)  # at half the roofline: stays
    # a reduction keeps its class ratio (its bytes are a lower bound); so does an unknown operator
    assert time(vectorized, 100, "[[8,1024,2048],[],[],[]]", "reduction", "aten::mean") == pytest.approx(100 / 1.5)
    assert time(vectorized, 100, shape, "copy", "aten::mm") == pytest.approx(100 / 1.5)


def test_the_host_speed_is_the_host_step_figure_else_the_same_host():
    from tunebench.projection.project import host_ratio

    a = Gpu("a", (), {"host_step_us": 20.0, "host_cpu_op_us": 3.0, "host_launch_us": 8.0})
    b = Gpu("b", (), {"host_step_us": 30.0, "host_cpu_op_us": 4.5, "host_launch_us": 6.0})
    assert host_ratio(a, b)[0] == pytest.approx(1.5) and "host step 20.00 → 30.00" in host_ratio(a, b)[1]
    # single-call figures are not a host's speed: without host_step_us on both, the same host
    assert host_ratio(Gpu("c", (), {"host_cpu_op_us": 3.0, "host_launch_us": 8.0}), b)[0] == 1.0
    assert host_ratio(Gpu("c"), b)[1].startswith("host time kept as measured")


def test_the_synthetic_step_on_the_target_has_its_known_answer(tmp_path):
    folder, _ = make_results(tmp_path / "r")
    row = measured_row("x", kernel_rows())
    yaml = tmp_path / "gpus.yaml"
    yaml.write_text("gpus:\n  - name: dst\n    bf16_tflops: 400\n    memory_tb_per_s: 6.0\n    kernel_floor_us: 2\n"
                    "    host_link_gb_per_s: 64\n    power_w: 500\n"
                    f"  - name: {H100}\n    bf16_tflops: 800\n    memory_tb_per_s: 3.0\n")
    frame = _project(pd.DataFrame([row]), "dst", str(yaml), tmp_path / "r", gpu_hour_usd=2.0)
    assert frame.loc[0, "proj_note"].startswith("roofline per kernel: scan_kernel_<phase>_<class>_time columns")
    # per phase, the additive model: host gap kept + kernels scaled (µs): forward 56 + (1998 + 252 + 22), backward
    # 98 + 6002, optimizer 502, other 134 + 66; the steady median (5900) scaled by Σ projected ÷ Σ timed (5902)
    expected_phases = {"forward": 56 + 2272, "backward": 98 + 6002, "clip": 0, "optimizer": 502, "other": 134 + 66}
    scale = STEADY_US / sum(PHASE_US.values())
    with_file = _project(pd.DataFrame([{**row, "experiment_id": _id(folder)}]), "dst", str(yaml), tmp_path / "r",
                         gpu_hour_usd=2.0).iloc[0]
    assert with_file["proj_note"].startswith("roofline per kernel: 6 kernels of the scanned step")
    # with the kernel file, the replay: launches at 0, 200, 1200, 1702, 1800, 4900 µs × s; the measured kernels
    # then end at 4900 s + 1002 = 5900 (the steady median), so s = 4898/4900. On the target the transfer (66) runs
    # at 0, the matmul at 200 s, and every later kernel waits for its predecessor, not for its launch: the step
    # is 200 s + 1998 + 252 + 22 + 6002 + 502 µs, the host's gaps hidden but the first (200 s − 66)
    s = 4898 / 4900
    step = (200 * s + 1998 + 252 + 22 + 6002 + 502) * 1e-6
    assert "host scale calibrated to it: 1.00)" in with_file["proj_note"]
    assert with_file["proj_step_time"] == pytest.approx(step, rel=1e-9)
    for phase, us in expected_phases.items():  # the additive phases, scaled to the replayed step
        assert with_file[f"proj_time_{phase}"] == pytest.approx(us / sum(expected_phases.values()) * step, rel=1e-9,
                                                                abs=1e-15)
    assert with_file["proj_steady_tokens_per_second"] == pytest.approx(TOKENS / step, rel=1e-9)
    assert with_file["proj_gpu_busy_time"] == pytest.approx((66 + 2272 + 6002 + 502) * 1e-6, rel=1e-12)
    assert with_file["proj_host_gap_time"] == pytest.approx((200 * s - 66) * 1e-6, rel=1e-9)
    # cost: 2 USD an hour for TOKENS / step tokens a second; energy: 500 W for the same
    assert with_file["proj_usd_per_million_tokens"] == pytest.approx(2.0 / 3600 / (TOKENS / step) * 1e6, rel=1e-9)
    assert with_file["proj_joules_per_token"] == pytest.approx(500 * step / TOKENS, rel=1e-9)
    # from the columns alone (no kernel file): by class, without shapes or fixed cost, the thin matmul and the
    # elementwise kernel are the only differences: the square matmul and the LoRA product both × 2, no floors
    by_class = frame.iloc[0]
    forward = 56 + 1000 * 2 + 42 * 2 + 502 * 0.5
    assert by_class["proj_time_forward"] == pytest.approx(forward * scale * 1e-6, rel=1e-12)


def _id(folder):
    return folder.name.rpartition("_")[2]


@given(durations=st.lists(st.floats(0.1, 5000), min_size=6, max_size=6),
       gaps=st.lists(st.floats(0, 500), min_size=5, max_size=5), steady=st.floats(0.5, 1.5))
@settings(max_examples=60, deadline=None)
def test_projection_onto_the_measured_gpu_returns_the_measurement(durations, gaps, steady):
    """Any profile, any host gaps, any steady median: onto its own GPU the projection is the measurement (the
    acceptance asks within 1 %; the model gives it exactly)."""
    profile = tuple((p, c, d, op, dims) for (p, c, _, op, dims), d in zip(PROFILE, durations, strict=True))
    rows = kernel_rows(profile)
    busy = {p: sum(d for q, _, d, _, _ in profile if q == p) for p in PHASE_US}
    phase_us = {p: busy[p] + g for p, g in zip(PHASE_US, gaps, strict=True)}
    row = measured_row("x", rows, phase_us=phase_us, steady_us=sum(phase_us.values()) * steady)
    table = load_table()
    out = project_one(row, None, table, table.lookup(H100))
    measured = row["steady_tokens_per_second"]
    assert out["proj_steady_tokens_per_second"] == pytest.approx(measured, rel=1e-9)
    assert abs(out["proj_steady_tokens_per_second"] / measured - 1) < 0.01


def test_phase_whose_kernels_outlast_it_is_scaled_whole():
    measured = Measured(1.0, 100, 100, {"forward": 0.5, "backward": 0.5}, {"forward": 0.6, "backward": 0.2})
    out = project_step(measured, {"forward": (0.6, 0.3), "backward": (0.2, 0.4)})
    assert out.phase_time["forward"] == pytest.approx(0.25)  # 0.5 × (0.3/0.6)
    assert out.phase_time["backward"] == pytest.approx(0.3 + 0.4)  # gap 0.3 kept + busy 0.2 × 2
    assert out.clamped == ("forward",) and out.step_time == pytest.approx(0.95)


def test_rows_that_cannot_be_projected_say_why(tmp_path):
    table = load_table()
    target = table.lookup("NVIDIA H200")
    cases = {
        "not projected: status oom: nothing measured": {"status": "oom"},
        "not projected: no kernel split (scan_kernel_*: no GPU kernels: the step ran on cpu)":
            {"scan_kernel_busy_time": None, "scan_kernel_note": "no GPU kernels: the step ran on cpu"},
        "not projected: the measured GPU 'Mystery GPU' is not in the GPU table (add it with --gpu_table)":
            {"gpu_name": "Mystery GPU"},
        "not projected: no steady step time (steady_step_time_median)": {"steady_step_time_median": math.nan},
    }
    for note, change in cases.items():
        row = {**measured_row("x", kernel_rows()), **change}
        assert project_one(row, None, table, target)["proj_note"] == note


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
def test_plan_project_from_writes_projection_csv_and_bad_input_exits_2(tmp_path):
    results = tmp_path / "measured"
    folder, _ = make_results(results)
    out = tmp_path / "out"
    command = [sys.executable, str(REPO / "benchmark.py"), "plan", "--project_from", str(results),
               "--results_output_path", str(out)]
    done = subprocess.run([*command, "--plan_device", "NVIDIA H200", "--gpu_hour_usd", "3.5"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    frame = pd.read_csv(out / "projection.csv")
    row = frame.iloc[0]
    assert row["proj_device"] == "NVIDIA H200" and row["proj_source_device"] == H100
    assert row["proj_steady_tokens_per_second"] > TOKENS / (STEADY_US * 1e-6)  # more bandwidth, ~same compute
    # the H200's memory as `plan --plan_device "NVIDIA H200"` has it (the one GPU table: nvidia-smi's 143771 MiB)
    assert row["pred_capacity_bytes"] == 143771 * 1024**2 and bool(row["proj_fits"]) is True
    assert row["proj_usd_per_million_tokens"] == pytest.approx(3.5 / 3600 / row["proj_steady_nonpad_tokens_per_second"]
                                                               * 1e6)
    for bad, key in ((["--plan_device", "Imaginary 9000"], "--plan_device"), (["--plan_device", "NVIDIA H200",
                     "--gpu_hour_usd", "nan"], "--gpu_hour_usd"), (["--plan_device", "NVIDIA H200",
                     "--project_num_gpus", "4"], "--project_parallelism")):
        target = tmp_path / f"bad-{key.strip('-')}"
        done = subprocess.run([*command[:-1], str(target), *bad], capture_output=True, text=True, timeout=300)
        assert done.returncode == 2 and key in done.stderr, done.stderr[-2000:]
        assert not (target / "projection.csv").exists()


def test_the_report_compares_gpu_kinds_from_projection_csv(tmp_path):
    from tests.fixtures.report import parse
    from tunebench.results.report import projection as report_projection

    base = {"scenario": "proj", "framework_config": "none", "proj_source_device": H100, "proj_num_gpus": 1,
            "steady_tokens_per_second": 1000.0}
    pd.DataFrame([{**base, "proj_device": "NVIDIA H200", "proj_steady_tokens_per_second": 1100.0},
                  {**base, "proj_device": "NVIDIA L40S", "proj_steady_tokens_per_second": 300.0},
                  {**base, "scenario": "cpu-row", "proj_device": "NVIDIA L40S", "proj_steady_tokens_per_second": None,
                   "proj_note": "not projected: no kernel split"}]).to_csv(tmp_path / "projection.csv", index=False)
    assert report_projection.section(tmp_path / "raw_summary.csv").count("<img") == 1
    page = parse(report_projection.section(tmp_path / "raw_summary.csv"))
    assert page.tables["projection"] == [
        ["experiment", f"1× {H100} (measured)", "1× NVIDIA H200", "1× NVIDIA L40S"],
        ["proj · none", "1,000", "1,100", "300"]]
    assert report_projection.section(tmp_path / "elsewhere" / "raw_summary.csv") == ""


def test_tune_ranks_points_for_the_gpu_it_projects_to_and_prunes_what_would_not_fit_it(tmp_path):
    """tune --project_to: the objective is the run projected onto the other GPU (kernel split of each run), a run
    that cannot be projected has no objective and says why, and a point must fit the other GPU's memory too."""
    import math

    from tunebench.tuning import prune
    from tunebench.tuning.options import TuneOptions
    from tunebench.tuning.runs import projected
    from tunebench.tuning.search import Search, score
    from tunebench.tuning.space import Point

    folder, experiment = make_results(tmp_path / "r")
    table = tmp_path / "gpus.yaml"
    table.write_text(f"gpus:\n  - name: dst\n    bf16_tflops: 400\n    memory_tb_per_s: 6.0\n    kernel_floor_us: 2\n"
                     f"    host_link_gb_per_s: 64\n  - name: {H100}\n    bf16_tflops: 800\n    memory_tb_per_s: 3.0\n"
                     "    kernel_floor_us: 2\n    host_link_gb_per_s: 64\n")
    options = TuneOptions(model="preset:llama-tiny", project_to="dst", gpu_table=str(table),
                          results_output_path=str(tmp_path / "r"))
    good = {"experiment_id": experiment, "repeat": 1, **measured_row(experiment, kernel_rows())}
    lost = {**good, "experiment_id": "elsewhere", "gpu_name": "Some Other GPU"}
    rows = projected([good, lost], options)
    expected = _project(pd.DataFrame([good]), "dst", str(table), tmp_path / "r")
    value = expected.loc[0, "proj_steady_nonpad_tokens_per_second"]
    assert value > 0 and value != good["steady_nonpad_tokens_per_second"]
    assert score(rows[0], options) == pytest.approx(math.log(value))
    assert score(rows[0], TuneOptions(model="m")) == pytest.approx(math.log(good["steady_nonpad_tokens_per_second"]))
    assert score(rows[1], options) is None and rows[1]["proj_note"].startswith("not projected")
    # memory: fits here (10 of 20 GiB usable) but not on the target (10 of 8): pruned, saying where
    here = {"pred_mem_peak": 10 * 2**30, "pred_fit_margin_bytes": 10 * 2**30}
    there = {"pred_mem_peak": 10 * 2**30, "pred_fit_margin_bytes": -2 * 2**30}
    points = [Point("lora", 16, False, mb, 1, False, "adamw_torch", False, False, None) for mb in (1, 2)]
    search = Search(points, {points[0]: {**here, "target": here}, points[1]: {**here, "target": there}}, options,
                    "cuda", prune.Margin(0.0, "test"))
    search._prune()
    states = [search.states[p] for p in points]
    assert states[0].state == "not run" and states[1].state == "pruned" and "on the dst" in states[1].reason


def test_a_row_whose_phases_took_no_time_is_not_projected(tmp_path):
    """A ZeroDivisionError before: every scan_time_* at 0 s (a hand-edited row) is a note, never a rate of 1/0."""
    import tunebench
    from tests.fixtures.projection import make_results

    make_results(tmp_path / "m", **{f"scan_time_{p}": 0.0 for p in ("forward", "backward", "clip", "optimizer",
                                                                     "other")})
    row = tunebench.project(tunebench.ProjectionOptions(project_from=str(tmp_path / "m"), plan_device="NVIDIA H200",
                                                        memory=False)).iloc[0]
    assert row["proj_note"] == "not projected: its phase times (scan_time_*) add up to no time: no step was timed"
    assert pd.isna(row.get("proj_steady_tokens_per_second"))
