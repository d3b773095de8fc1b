"""CUDA-only scanner checks (skipped without a GPU): exact sizes, additive categories, allocator agreement."""

import pytest
import torch

from scanner import Scanner
from tests.fixtures.scanner import lm_dataset, numel_bytes, tiny_llama, train

pytestmark = [
    pytest.mark.gpu,
    # with several GPUs visible the Trainer wraps the model in DataParallel: run these on one GPU
    pytest.mark.skipif(torch.cuda.device_count() > 1, reason="set CUDA_VISIBLE_DEVICES to one GPU"),
]

BLOCK = 512  # the CUDA caching allocator rounds every block up to 512 bytes


def rounded(params) -> int:
    return sum(-(-p.numel() * p.element_size() // BLOCK) * BLOCK for p in {id(p): p for p in params}.values())


def test_cuda_categories_are_exact_and_add_up_to_the_allocator_peak(tmp_path):
    torch.cuda.reset_peak_memory_stats()
    model = tiny_llama(torch.float32).cuda()
    scanner = Scanner(steps=2, output=None)
    trainer = train(model, scanner, lm_dataset(seq=64), use_cpu=False, output_dir=str(tmp_path))
    step = scanner.report.steps[0]
    params = list(trainer.model.parameters())
    assert step.mem_params == rounded(params)
    assert numel_bytes(params) <= step.mem_params < numel_bytes(params) + BLOCK * len(params)
    parts = step.mem_params + step.mem_buffers + step.mem_grads + step.mem_optimizer + step.mem_activations
    assert parts + step.mem_other + step.mem_temporaries == step.mem_peak_allocated  # additive by definition
    assert step.mem_temporaries >= 0 and step.mem_other >= 0
    assert step.mem_peak_allocated <= torch.cuda.max_memory_allocated()
    assert step.mem_peak_reserved >= step.mem_peak_allocated and step.mem_fragmentation >= 0
    assert step.time_forward > 0 and step.time_backward > 0 and step.time_optimizer > 0


@pytest.mark.parametrize("checkpointing", [False, True])
def test_history_replay_and_per_event_sampling_attribute_the_same_peak(
    tmp_path, monkeypatch, caplog, checkpointing
):
    """Two independent mechanisms, one answer: the allocator-history replay (default) and reading the
    allocator's peak counter at every hook event (fallback) must agree byte for byte."""
    import scanner.memory_probe as probe_mod

    def scan(trace: bool):
        if not trace:
            monkeypatch.setattr(probe_mod, "trace_available", lambda device: False)
        torch.manual_seed(0)
        model = tiny_llama(torch.float32).cuda()
        scanner = Scanner(steps=2, output=None)
        train(
            model,
            scanner,
            lm_dataset(seq=64),
            use_cpu=False,
            output_dir=str(tmp_path),
            gradient_checkpointing=checkpointing,
            gradient_accumulation_steps=2,
        )
        monkeypatch.undo()
        return scanner.report.steps[0]

    import gc

    with caplog.at_level("WARNING", logger="scanner.probe"):
        replayed = scan(trace=True)
    assert not [r for r in caplog.records if "replayed allocator history" in r.getMessage()]
    gc.collect()
    torch.cuda.empty_cache()
    sampled = scan(trace=False)
    # Both runs start from whatever the previous one left cached; compare the step's own growth.
    growth = [r.mem_peak_allocated - r.boundaries[0]["allocated"] for r in (replayed, sampled)]
    assert growth[0] == growth[1]
    for f in ("mem_activations", "mem_grads", "mem_optimizer", "peak_phase"):
        assert getattr(replayed, f) == getattr(sampled, f), (f, getattr(replayed, f), getattr(sampled, f))
    assert replayed.mem_temporaries == sampled.mem_temporaries  # "other" takes what the previous run left
    assert replayed.mem_other - replayed.boundaries[0]["allocated"] == (
        sampled.mem_other - sampled.boundaries[0]["allocated"]
    )
    assert replayed.mem_activations > 0 and replayed.mem_temporaries >= 0


def test_other_holds_the_cublas_workspaces_that_no_tensor_hook_sees(tmp_path):
    """cuBLAS allocates a workspace per (handle, stream) through the caching allocator on first use; the
    forward's matmuls run on the Python thread and the backward's on autograd's device thread, so at least two
    exist by the scanned step. torch can drop them: the allocator's drop is an independent measure."""
    torch.manual_seed(0)
    model = tiny_llama(torch.float32).cuda()
    scanner = Scanner(steps=2, output=None)
    train(model, scanner, lm_dataset(seq=64), use_cpu=False, output_dir=str(tmp_path))
    step = scanner.report.steps[0]
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch._C._cuda_clearCublasWorkspaces()
    dropped = before - torch.cuda.memory_allocated()
    print("mem_other", step.mem_other, "cuBLAS workspaces", dropped)
    assert dropped > 0
    # "other" = the workspaces + the few small tensors the Trainer keeps between steps (loss accumulators)
    assert dropped <= step.mem_other <= dropped + (64 << 10), (step.mem_other, dropped)


def test_kernel_split_of_a_cuda_step_has_every_phase_and_leaves_memory_alone(tmp_path):
    """On a GPU: kernels in forward, backward and optimizer, matmuls linked to their operators' shapes, sums that
    match the file, and the same memory categories as a scan without the split."""
    from scanner.kernel_split import read_rows

    rows_path = tmp_path / "kernels.csv.gz"
    with_split = Scanner(steps=2, output=None, time_steps="off", kernels=str(rows_path))
    train(tiny_llama(torch.float32).cuda(), with_split, lm_dataset(seq=64), use_cpu=False, output_dir=str(tmp_path),
          optim="adamw_torch_fused")
    plain = Scanner(steps=2, output=None, time_steps="off")
    train(tiny_llama(torch.float32).cuda(), plain, lm_dataset(seq=64), use_cpu=False, output_dir=str(tmp_path),
          optim="adamw_torch_fused")
    flat = with_split.flat_metrics()
    assert flat["scan_kernel_source"] == "cuda" and flat["scan_kernel_count"] > 0, flat.get("scan_kernel_note")
    rows = [r for r in read_rows(str(rows_path)) if r["class"] != "sync"]
    assert {"forward", "backward", "optimizer"} <= {r["phase"] for r in rows}
    assert {r["class"] for r in rows if r["phase"] == "optimizer"} >= {"optimizer"}
    gemms = [r for r in rows if r["class"] == "gemm" and r["op"] in ("aten::mm", "aten::addmm", "aten::bmm")]
    assert gemms and all(r["op_dims"] for r in gemms)
    assert flat["scan_kernel_time"] == pytest.approx(sum(r["dur_us"] for r in rows) * 1e-6)
    assert 0 < flat["scan_kernel_busy_time"] <= flat["scan_kernel_time"] + 1e-12
    # the tensor categories (what the cache held before, and so reserved/other, differs between two runs in one
    # process: not compared)
    memory = [f"scan_mem_{c}" for c in ("params", "buffers", "grads", "optimizer", "activations")]
    assert {k: flat[k] for k in memory} == {k: plain.flat_metrics()[k] for k in memory}
