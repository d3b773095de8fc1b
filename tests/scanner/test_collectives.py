"""Collective accounting: exact bytes against analytic sizes on gloo (2 processes), and trace parsing."""

import json
import os
import sys
from pathlib import Path

import pytest

from scanner.collectives import flat_collectives, summarise_trace
from tests.fixtures.harness import REPO
from tunebench.execution.launchers.base import LaunchCommand, free_port
from tunebench.execution.launchers.python import PythonLauncher
from tunebench.execution.processes import run_process


def run_workers(mode: str, out_dir: Path) -> tuple[dict, list[dict]]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(free_port()), str(REPO / "tests/dist/collectives_worker.py"), mode, str(out_dir)]
    command = LaunchCommand(cmd, env, {}, str(REPO), [])
    outcome = run_process(PythonLauncher(), command, out_dir / "stdout.log", out_dir / "stderr.log",
                          timeout_seconds=300)
    assert outcome.returncode == 0 and not outcome.timed_out, (out_dir / "stderr.log").read_text()[-4000:]
    expected = json.loads((out_dir / "expected.json").read_text())
    reports = [json.loads((out_dir / f"scan.rank{r}.json").read_text()) for r in (0, 1)]
    return expected, reports


@pytest.mark.slow
def test_ddp_all_reduce_bytes_equal_gradient_bytes(tmp_path):
    expected, reports = run_workers("ddp", tmp_path)
    for report in reports:
        kinds = report["collectives"]["kinds"]
        # The gradient all-reduce (fp32 buckets) carries exactly the gradient bytes; what else DDP all-reduces is
        # integer bookkeeping (one int per parameter), reported under its own dtype.
        assert kinds["all_reduce"]["bytes_by_dtype"]["float"] == expected["grad_bytes"]
        assert kinds["all_reduce"]["bytes"] - expected["grad_bytes"] == 4 * 21
        assert "reduce_scatter" not in kinds
        assert kinds["broadcast"]["bytes"] == 16 * 4  # DDP re-broadcasts buffers (rotary inv_freq, 16 fp32)
        step = report["steps"][0]
        # Each rank holds a full replica: the exact analytic sizes hold on every rank.
        assert step["mem_params"] == step["mem_grads"] == expected["grad_bytes"]
        assert step["mem_optimizer"] == 2 * expected["grad_bytes"] + 4 * 21  # exp_avg, exp_avg_sq + fp32 step per param


@pytest.mark.slow
def test_fsdp2_full_shard_gathers_and_scatters(tmp_path):
    expected, reports = run_workers("fsdp2", tmp_path)
    for report in reports:
        kinds = report["collectives"]["kinds"]
        # reshard_after_forward=True everywhere (root included): every parameter is gathered in forward and
        # re-gathered in backward, 2 × parameter bytes; gradients are reduce-scattered once.
        gathered = kinds["all_gather"]["bytes_by_dtype"]["float"]
        assert gathered == 2 * (expected["layer_param_bytes"] + expected["root_param_bytes"])
        # Gloo has no reduce-scatter of a flat tensor, so FSDP2 reduces gradients with all-reduce there (NCCL
        # runs reduce_scatter); either way the reduced payload is exactly the gradient bytes.
        reduction = kinds.get("reduce_scatter") or kinds["all_reduce"]
        assert reduction["bytes_by_dtype"]["float"] == expected["grad_bytes"]
        # Sharded over 2 ranks (every dimension here is even): each rank holds exactly half.
        assert 2 * report["local_param_bytes"] == expected["grad_bytes"]


def test_summarise_nccl_style_trace():
    trace = {"traceEvents": [
        {"ph": "X", "name": "record_param_comms", "ts": 0, "dur": 5,
         "args": {"Collective name": "allreduce", "In msg nelems": 1000, "Out msg nelems": 1000, "dtype": "BFloat16"}},
        {"ph": "X", "name": "record_param_comms", "ts": 10, "dur": 5,
         "args": {"Collective name": "_allgather_base", "In msg nelems": 50, "Out msg nelems": 100, "dtype": "Float"}},
        {"ph": "X", "name": "record_param_comms", "ts": 20, "dur": 5, "args": {"Collective name": "init"}},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "ts": 100, "dur": 40},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllGather_RING_LL", "ts": 200, "dur": 10},
        {"ph": "X", "cat": "kernel", "name": "ampere_sgemm", "ts": 90, "dur": 30},
    ]}
    summary = summarise_trace(trace, world_size=2)
    assert summary["source"] == "record_param_comms"
    assert summary["kinds"]["all_reduce"] == {"count": 1, "bytes": 2000, "dtypes": ["BFloat16"],
                                              "bytes_by_dtype": {"BFloat16": 2000}, "time_s": 40e-6}
    assert summary["kinds"]["all_gather"]["bytes"] == 400 and summary["count"] == 2
    assert summary["time_s"] == pytest.approx(50e-6)
    # all-reduce kernel 100..140 overlaps the gemm 90..120 for 20 µs → 20 µs exposed, + 10 µs all-gather.
    assert summary["exposed_time_s"] == pytest.approx(30e-6)
    flat = flat_collectives(summary)
    assert flat["scan_comm_all_reduce_bytes"] == 2000 and flat["scan_comm_bytes"] == 2400
