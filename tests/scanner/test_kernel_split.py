"""The kernel split: synthetic traces with known answers, and a real CPU run (markers in place, columns, memory).

Reached through the modules it calls (the attention kernel read from the profiler): scanner/kernels.py."""

import gzip
import json

import pytest

from scanner import Scanner
from scanner.kernel_split import (
    flat_kernels,
    kernel_rows,
    locate,
    marker_name,
    phase_timeline,
    read_rows,
    summarise_kernels,
    union_seconds,
    write_rows,
)
from tests.fixtures.scanner import lm_dataset, tiny_llama, train

GEMM = "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>"
FLASH_BWD = "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<64>>"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
NORM = "void at::native::lpnorm_cleanup<float, (at::native::NormType)1, float, float>"
ADAM = "void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor<float, 4>>"


def marker(ts, event, phase, tid=1):
    return {"ph": "X", "cat": "user_annotation", "name": marker_name(event, phase), "ts": ts, "dur": 0, "tid": tid}


def launch(ts, corr, cat="cuda_runtime", tid=1, ext=None):
    args = {"correlation": corr, **({"External id": ext} if ext is not None else {})}
    return {"ph": "X", "cat": cat, "name": "cudaLaunchKernel", "ts": ts, "dur": 2, "tid": tid, "args": args}


def kernel(name, ts, dur, corr=None, stream=7, cat="kernel", **args):
    extra = {"correlation": corr} if corr is not None else {}
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "tid": stream,
            "args": {"stream": stream, **extra, **args}}


def one_step(t0=0.0, corr0=0):
    """A step with known answers (µs): markers from the Python and the autograd thread, launches by the runtime and
    the driver API, a kernel linked only through its operator, and kernels from outside the step."""
    c = corr0
    return [
        marker(t0 + 0, "step_start", "other"), marker(t0 + 10, "forward_start", "forward"),
        marker(t0 + 100, "forward_end", "other"), marker(t0 + 110, "backward_start", "backward", tid=2),
        marker(t0 + 300, "backward_end", "after_backward", tid=2), marker(t0 + 310, "optimizer_start", "optimizer"),
        marker(t0 + 350, "optimizer_end", "other"), marker(t0 + 400, "step_end", "other"),
        launch(t0 + 4, c + 10), kernel("Memcpy HtoD (Pinned -> Device)", t0 + 5, 3, c + 10, cat="gpu_memcpy", bytes=64),
        launch(t0 + 20, c + 1, ext=c + 500), kernel(GEMM, t0 + 30, 50, c + 1),
        launch(t0 + 25, c + 2), kernel(ADD, t0 + 80, 10, c + 2),
        launch(t0 + 120, c + 3, tid=2), kernel(FLASH_BWD, t0 + 130, 100, c + 3),
        launch(t0 + 150, c + 4, tid=2), kernel(NCCL, t0 + 150, 100, c + 4, stream=20),
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": t0 + 18, "dur": 5, "tid": 1,  # holds the GEMM's launch
         "args": {"External id": c + 900, "Input Dims": [[8192, 2048], [2048, 2048]]}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": t0 + 115, "dur": 3, "tid": 2,
         "args": {"External id": c + 7, "Input Dims": [[8, 4], [8, 4]], "Input type": ["c10::BFloat16"] * 2}},
        kernel(ADD, t0 + 200, 10, c + 99, **{"External id": c + 7}),  # no launch event: its operator's time
        launch(t0 + 302, c + 5), kernel(NORM, t0 + 305, 3, c + 5),  # after backward, before the optimizer: clip
        launch(t0 + 320, c + 6, cat="cuda_driver"), kernel(ADAM, t0 + 320, 25, c + 6),
        launch(t0 - 5, c + 8), kernel(ADD, t0 + 2, 1, c + 8),  # queued before the step: outside
        launch(t0 + 410, c + 9), kernel(ADD, t0 + 420, 1, c + 9),  # after the step's end: outside
        kernel(ADD, t0 + 430, 1),  # nothing links it to a launch: unmatched
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "ts": t0 + 360, "dur": 7, "tid": 1,
         "args": {"correlation": c + 50}},  # the host waits for the GPU: a sync row, no GPU time
    ]


def test_synthetic_step_sums_by_class_and_phase_exactly():
    rows, left_out = kernel_rows({"traceEvents": one_step()})
    assert left_out == {"unmatched": 1, "outside": 2}
    s = summarise_kernels(rows, steps=1, left_out=left_out)
    us = 1e-6
    assert s["count"] == 8 and s["host_sync_s"] == pytest.approx(7 * us)
    syncs = [r for r in rows if r["class"] == "sync"]
    assert [(r["name"], r["phase"], r["dur_us"]) for r in syncs] == [("cudaStreamSynchronize", "other", 7)]
    assert s["classes"] == pytest.approx({"gemm": 50 * us, "attention": 100 * us, "comm": 100 * us,
                                          "optimizer": 25 * us, "norm": 0.0, "reduction": 3 * us, "copy": 0.0,
                                          "elementwise": 20 * us, "transfer": 3 * us, "other": 0.0})
    assert s["time_s"] == pytest.approx(301 * us)
    # union: 5-8, 30-90, 130-250 (flash and NCCL overlap on two streams; the add inside), 305-308, 320-345
    assert s["busy_s"] == pytest.approx((3 + 60 + 120 + 3 + 25) * us)
    assert s["span_s"] == pytest.approx(340 * us)
    phases = s["phases"]
    assert list(phases) == ["forward", "backward", "clip", "optimizer", "other"]
    assert phases["forward"]["classes"] == pytest.approx({"gemm": 50 * us, "elementwise": 10 * us})
    assert phases["backward"]["classes"] == pytest.approx({"attention": 100 * us, "comm": 100 * us,
                                                           "elementwise": 10 * us})
    assert phases["backward"]["busy_s"] == pytest.approx(120 * us)
    assert phases["clip"]["classes"] == pytest.approx({"reduction": 3 * us})
    assert phases["optimizer"]["classes"] == pytest.approx({"optimizer": 25 * us})
    assert phases["other"]["classes"] == pytest.approx({"transfer": 3 * us})
    by_name = {r["name"]: r for r in rows}
    assert by_name[GEMM]["launch_us"] == 20 and by_name[GEMM]["start_us"] == 30
    assert by_name["Memcpy HtoD (Pinned -> Device)"]["bytes"] == 64
    assert by_name[GEMM]["op"] == "aten::mm" and by_name[GEMM]["op_dims"] == "[[8192,2048],[2048,2048]]"
    linked = [r for r in rows if r["op"] == "aten::add"]
    assert len(linked) == 1 and linked[0]["phase"] == "backward" and linked[0]["op_dims"] == "[[8,4],[8,4]]"


def test_two_scanned_steps_are_averaged_per_step():
    events = one_step() + one_step(t0=1000, corr0=1000)
    rows, _ = kernel_rows({"traceEvents": events})
    assert {r["step"] for r in rows} == {1, 2}
    one = summarise_kernels(kernel_rows({"traceEvents": one_step()})[0], steps=1)
    two = summarise_kernels(rows, steps=2)
    for key in ("count", "time_s", "busy_s", "span_s"):
        assert two[key] == pytest.approx(one[key])
    assert two["phases"]["backward"]["classes"] == pytest.approx(one["phases"]["backward"]["classes"])


def test_after_backward_is_clip_before_the_optimizer_and_other_before_the_next_micro_batch():
    markers = [(0, "step_start", "other"), (1, "forward_start", "forward"), (2, "forward_end", "other"),
               (3, "backward_start", "backward"), (4, "backward_end", "after_backward"),
               (5, "forward_start", "forward"), (6, "forward_end", "other"), (7, "backward_start", "backward"),
               (8, "backward_end", "after_backward"), (9, "optimizer_start", "optimizer"),
               (10, "optimizer_end", "other"), (11, "step_end", "other")]
    starts, labels = phase_timeline(markers)
    assert locate(4.5, starts, labels) == ("other", 1)
    assert locate(8.5, starts, labels) == ("clip", 1)
    assert locate(9.5, starts, labels) == ("optimizer", 1)
    assert locate(-1, starts, labels) is None and locate(11.5, starts, labels) is None


def test_union_of_nested_and_disjoint_intervals():
    assert union_seconds([(0, 10), (2, 3), (5, 12), (20, 21)]) == pytest.approx(13e-6)
    assert union_seconds([]) == 0


def test_rows_file_round_trips(tmp_path):
    rows, _ = kernel_rows({"traceEvents": one_step()})
    path = tmp_path / "kernels.csv.gz"
    write_rows(str(path), rows)
    back = read_rows(str(path))
    assert [(r["name"], r["phase"], r["class"], r["dur_us"], r["step"]) for r in back] == \
        [(r["name"], r["phase"], r["class"], r["dur_us"], r["step"]) for r in rows]
    first = path.read_bytes()
    write_rows(str(path), rows)
    assert path.read_bytes() == first  # the same rows give the same bytes


def test_a_real_cpu_run_has_its_phase_markers_a_note_and_undisturbed_memory(tmp_path):
    """On CPU there are no GPU kernels: the columns say so; the markers are in the trace, in the right phases, and
    the memory figures equal those of a scan without the split (CPU categories come from tensors, CUDA ones from
    the allocator, which CUPTI never allocates through)."""
    trace_path = tmp_path / "trace.json"
    with_split = Scanner(steps=2, time_steps="off", output=None, log_to_trainer=False, kernels=True,
                         profile_trace=str(trace_path))
    train(tiny_llama(), with_split, dataset=lm_dataset(seq=16), max_steps=2, optim="adamw_torch_fused")
    plain = Scanner(steps=2, time_steps="off", output=None, log_to_trainer=False)
    train(tiny_llama(), plain, dataset=lm_dataset(seq=16), max_steps=2, optim="adamw_torch_fused")
    flat = with_split.flat_metrics()
    assert flat["scan_kernel_note"] == "no GPU kernels: the step ran on cpu"
    assert not any(k.startswith("scan_kernel_") and k != "scan_kernel_note" for k in flat)
    memory = {k: v for k, v in plain.flat_metrics().items() if k.startswith("scan_mem_") and "rss" not in k}
    assert memory and {k: flat[k] for k in memory} == memory
    events = json.loads(trace_path.read_text())["traceEvents"]
    markers = sorted((e["ts"], e["name"]) for e in events if e.get("name", "").startswith("scanner.phase:"))
    names = [n.removeprefix("scanner.phase:") for _, n in markers]
    assert names == ["step_start:other", "forward_start:forward", "forward_end:other", "backward_start:backward",
                     "backward_end:after_backward", "optimizer_start:optimizer", "optimizer_end:other",
                     "step_end:other"]
    starts, labels = phase_timeline([(ts, *n.removeprefix("scanner.phase:").split(":")) for ts, n in markers])
    ops = [(e["name"], locate(e["ts"], starts, labels)) for e in events if e.get("cat") == "cpu_op"]
    assert ("aten::_fused_adamw_", ("optimizer", 1)) in ops
    phases_of = {}
    for name, where in ops:
        phases_of.setdefault(name, set()).add(where)
    # the model's backward nodes run in backward (the Trainer's loss scaling before the model's output gets its
    # gradient is "other", as in scan_time_*)
    for node in ("MmBackward0", "EmbeddingBackward0", "NllLossBackward0"):
        assert phases_of[f"autograd::engine::evaluate_function: {node}"] == {("backward", 1)}
    assert phases_of["aten::embedding"] == {("forward", 1)}
    assert phases_of["aten::nll_loss_forward"] == {("forward", 1)}  # the model's own loss, inside its forward


def test_a_failing_split_leaves_a_note_not_a_failed_scan(monkeypatch, tmp_path):
    from scanner import step_profiler

    profiler = step_profiler.StepProfiler("cuda", collectives=False, kernels=True)
    monkeypatch.setattr(step_profiler, "kernel_rows", lambda trace: 1 / 0)
    summary = profiler._kernel_split({"traceEvents": []})
    assert summary["source"] is None and summary["note"].startswith("kernel split failed: ZeroDivisionError")
    monkeypatch.undo()
    rows_file = tmp_path / "k.csv.gz"
    ok = step_profiler.StepProfiler("cuda", collectives=False, kernels=True, kernel_rows_path=str(rows_file))
    ok.steps = 1
    summary = ok._kernel_split({"traceEvents": one_step()})
    assert summary["count"] == 8 and summary["file"] == str(rows_file)
    flat = flat_kernels(summary)
    assert flat["scan_kernel_note"] == "left out: 1 with no launch or operator in the trace, 2 launched outside the " \
        "scanned step"
    assert flat["scan_kernel_gemm_time"] == pytest.approx(50e-6) and flat["scan_kernel_norm_time"] == 0
    assert flat["scan_kernel_backward_comm_time"] == pytest.approx(100e-6)
    assert flat["scan_kernel_backward_busy_time"] == pytest.approx(120e-6)
    assert "scan_kernel_forward_comm_time" not in flat  # a class the phase did not run: absent (read as 0)
    with gzip.open(rows_file, "rt") as handle:
        assert handle.readline().startswith("step,phase,class,start_us")


def test_kernels_option_takes_true_false_or_a_csv_gz_path():
    assert Scanner(kernels=True).options.kernels is True
    assert Scanner(kernels="out/kernels.csv.gz").options.kernels == "out/kernels.csv.gz"
    with pytest.raises(ValueError, match=r"Scanner\(kernels='k.csv'\): the file name must end with one of .csv.gz"):
        Scanner(kernels="k.csv")
