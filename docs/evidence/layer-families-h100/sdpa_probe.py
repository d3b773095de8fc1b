"""The fused attention kernel CUDA's SDPA picks for each kind of input, for the fake step's kernel choice.

    python3 docs/evidence/layer-families-h100/sdpa_probe.py docs/evidence/layer-families-h100/sdpa_choice_cuda.csv

The fake step predicts what attention keeps for backward by the kernel a GPU would pick
(tunebench.planning.attention_kernels.choose_kernel). This asks the GPU instead of assuming: torch's own selector
(`torch._fused_sdp_choice`) over dtypes, query/key and value head sizes (MLA's 192/128 among them), masks
(none, causal, boolean, additive), grouped-query heads, dropout and lengths, for inputs that need gradients as in
training. tests/tunebench/planning/test_attention_kernels.py replays every row against choose_kernel.
"""

from __future__ import annotations

import csv
import itertools
import sys

import torch

BACKENDS = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn"}
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
HEAD_DIMS = [(64, 64), (80, 80), (96, 96), (128, 128), (192, 128), (192, 192), (256, 256), (320, 320), (72, 72)]
MASKS = ["none", "causal", "bool", "additive"]


def choice(dtype: str, qk: int, v: int, mask: str, gqa: bool, dropout: float, length: int) -> str:
    heads, kv_heads = 8, (2 if gqa else 8)
    make = dict(device="cuda", dtype=DTYPES[dtype], requires_grad=True)
    q = torch.randn(1, heads, length, qk, **make)
    k = torch.randn(1, kv_heads, length, qk, **make)
    value = torch.randn(1, kv_heads, length, v, **make)
    attn_mask = None
    if mask == "bool":
        attn_mask = torch.ones(1, 1, length, length, device="cuda", dtype=torch.bool).tril()
    elif mask == "additive":
        attn_mask = torch.zeros(1, 1, length, length, device="cuda", dtype=DTYPES[dtype])
    backend = torch._fused_sdp_choice(q, k, value, attn_mask=attn_mask, dropout_p=dropout,
                                      is_causal=mask == "causal", enable_gqa=gqa)
    return BACKENDS.get(int(backend), f"other:{int(backend)}")


def main() -> None:
    out = sys.argv[1]
    rows = []
    for dtype, (qk, v), mask, gqa, dropout, length in itertools.product(
            DTYPES, HEAD_DIMS, MASKS, (False, True), (0.0, 0.1), (128, 100)):
        try:
            picked = choice(dtype, qk, v, mask, gqa, dropout, length)
        except RuntimeError as exc:  # no kernel at all for this input
            picked = f"error:{type(exc).__name__}"
        rows.append([dtype, qk, v, mask, gqa, dropout, length, picked])
    with open(out, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["dtype", "qk_head_dim", "v_head_dim", "mask", "gqa", "dropout", "length", "cuda_kernel"])
        writer.writerows(rows)
    print(f"{len(rows)} inputs, torch {torch.__version__}, {torch.cuda.get_device_name()}: {out}")


if __name__ == "__main__":
    main()
