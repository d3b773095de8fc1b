"""The fused attention kernel the fake step assumes a GPU picks (planning.attention_kernels.choose_kernel), against
the kernel torch's own selector picked on an H100 for 864 inputs (scripts/gpu/sdpa_probe.py ->
tunebench/planning/sdpa_choice_cuda.csv): dtypes, query/key and value head sizes, masks, grouped-query heads,
dropout and lengths."""

import csv

import torch

from tests.fixtures.harness import REPO
from tunebench.planning.attention_kernels import HOPPER, choose_kernel

TABLE = REPO / "tunebench" / "planning" / "sdpa_choice_cuda.csv"
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def test_the_assumed_kernel_is_the_one_an_h100_picked_for_every_probed_input():
    rows = list(csv.DictReader(TABLE.open()))
    assert len(rows) == 864
    wrong = []
    for row in rows:
        dtype, length = DTYPES[row["dtype"]], int(row["length"])
        kv_heads = 2 if row["gqa"] == "True" else 8
        query = torch.empty(1, 8, length, int(row["qk_head_dim"]), dtype=dtype, device="meta")
        key = torch.empty(1, kv_heads, length, int(row["qk_head_dim"]), dtype=dtype, device="meta")
        value = torch.empty(1, kv_heads, length, int(row["v_head_dim"]), dtype=dtype, device="meta")
        mask = {"bool": torch.empty(1, 1, length, length, dtype=torch.bool, device="meta"),
                "additive": torch.empty(1, 1, length, length, dtype=dtype, device="meta")}.get(row["mask"])
        got = choose_kernel(query, key, value, mask, float(row["dropout"]), HOPPER, row["gqa"] == "True")
        if got != row["cuda_kernel"]:
            wrong.append((row, got))
    assert not wrong, wrong[:5]


BACKWARD = REPO / "docs" / "evidence" / "gpu-counts-h100" / "sdpa-backward" / "sdpa_backward_h100.csv"


def test_the_backward_workspace_is_what_an_h100_allocated_for_every_probed_shape():
    """scripts/gpu/sdpa_backward_probe.py on an H100: each fused kernel forced in turn, bf16, causal, the
    allocator's peak during backward beyond the returned gradients. The fake kernels' workspace must match it:
    flash exactly, cuDNN within 1 MiB (it keeps its row statistics twice from 1 MiB on), the memory-efficient
    kernel within 64 KiB up to head size 128 (above it 16 MiB more, documented as not modelled)."""
    from tunebench.planning.kernel_ops import backward_workspace_bytes

    rows = [row for row in csv.DictReader(BACKWARD.open()) if not row["error"]]
    assert len(rows) == 34
    for row in rows:
        batch, heads, kv_heads, length, dim = (int(row[k]) for k in ("batch", "heads", "kv_heads", "length",
                                                                      "head_dim"))
        query = torch.empty(batch, heads, length, dim, dtype=torch.bfloat16, device="meta")
        key = torch.empty(batch, kv_heads, length, dim, dtype=torch.bfloat16, device="meta")
        measured, planned = int(row["extra_bytes"]), backward_workspace_bytes(query, key, key, row["kernel"])
        tolerance = {"flash": 0, "cudnn": 2**20, "efficient": 2**16 if dim <= 128 else 2**24 + 2**16}[row["kernel"]]
        assert 0 <= measured - planned <= tolerance, (row, planned)
