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
