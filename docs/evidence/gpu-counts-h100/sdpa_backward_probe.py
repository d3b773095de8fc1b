"""What a fused SDPA kernel's backward allocates beyond the gradients it returns, per kernel and shape, on the GPU.

    python3 docs/evidence/gpu-counts-h100/sdpa_backward_probe.py OUT_CSV

The fake step sizes a fused kernel's backward by the gradients it returns, plus flash's float32 dQ accumulator
(tunebench/planning/kernel_ops.fused_gradients). This measures instead: each kernel forced in turn (cuDNN, flash,
memory-efficient), causal, bf16, inputs that need gradients; the allocator's peak during the backward minus what
was allocated before it and the three gradients. One row per kernel and shape (batch, heads, key/value heads,
length, head size), `extra_bytes` the transient workspace.
"""

from __future__ import annotations

import csv
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

KERNELS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
           "efficient": SDPBackend.EFFICIENT_ATTENTION}
# (batch, heads, kv heads, length, head size): the gpu-counts rows (8B: 4 x 32 x 128; 1B: 8 x 32 x 64) and around
SHAPES = [(4, 32, 32, 1024, 128), (8, 32, 32, 1024, 64), (4, 32, 32, 1024, 64), (8, 32, 32, 1024, 128),
          (1, 32, 32, 1024, 128), (4, 32, 32, 2048, 128), (4, 16, 16, 1024, 128), (2, 32, 32, 4096, 128),
          (4, 32, 32, 1024, 96), (4, 32, 32, 1024, 256), (4, 32, 8, 1024, 128), (8, 32, 8, 1024, 64)]


def probe(kernel: str, batch: int, heads: int, kv_heads: int, length: int, dim: int) -> dict:
    make = dict(device="cuda", dtype=torch.bfloat16, requires_grad=True)
    q = torch.randn(batch, heads, length, dim, **make)
    k = torch.randn(batch, kv_heads, length, dim, **make)
    v = torch.randn(batch, kv_heads, length, dim, **make)
    row = {"kernel": kernel, "batch": batch, "heads": heads, "kv_heads": kv_heads, "length": length,
           "head_dim": dim, "forward_extra_bytes": "", "extra_bytes": "", "grads_bytes": "", "error": ""}
    try:
        with sdpa_kernel([KERNELS[kernel]]):
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                   enable_gqa=kv_heads != heads)
            torch.cuda.synchronize()
            row["forward_extra_bytes"] = torch.cuda.max_memory_allocated() - before - out.untyped_storage().nbytes()
            grad_out = torch.randn_like(out)
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            grads = torch.autograd.grad(out, (q, k, v), grad_out)
            torch.cuda.synchronize()
            returned = sum(g.untyped_storage().nbytes() for g in grads)
            row["extra_bytes"] = torch.cuda.max_memory_allocated() - before - returned
            row["grads_bytes"] = returned
    except Exception as error:  # a kernel that does not take the shape: the row says so
        row["error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"
    return row


def main(out: str) -> int:
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    rows = [probe(kernel, *shape) for shape in SHAPES for kernel in KERNELS]
    with open(out, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    for row in rows:
        print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
