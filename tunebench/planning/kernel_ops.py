"""Kernels the fake step stands in for, as custom ops torch.compile cannot see into.

A stand-in written as an autograd.Function allocates what the kernel allocates, but its backward only reads its
saved tensors' shapes: traced by AOTAutograd, the partitioner would then save nothing for it and recompute the
allocations in backward, which no GPU kernel does. As an opaque op with an opaque backward op, the partitioner
saves exactly the op's backward inputs, as it saves a real fused kernel's (aten's `_scaled_dot_product_*_attention`
ops and their backward ops are opaque to it too), and inductor calls it as an extern kernel whose outputs it
allocates. The ops' implementations only allocate (fake tensors: the step has no data).
"""

import contextlib
import functools
import logging
import math

import torch  # the ops' annotations are read at registration (no `from __future__ import annotations` here)

logger = logging.getLogger(__name__)

# The fused attention kernels a compiled step called (its replayed plan calls the op at run time): the stand-in
# cannot record them while dynamo traces it (a list it appends to becomes a guard of the compiled graph).
CALLED: list[str] = []


def fused_outputs(query, value, kernel: str):
    """The tensors a fused SDPA kernel allocates in its forward: the output, in the query's memory layout (so the
    model's `transpose(1, 2).contiguous()` afterwards copies exactly when it copies on the GPU), and a float32
    log-sum-exp per query row (the memory-efficient kernel pads it to 32 rows)."""
    out = torch.empty_like(query) if value.shape[-1] == query.shape[-1] else query.new_empty(
        (*query.shape[:-1], value.shape[-1]))
    rows = query.shape[-2]
    if kernel == "efficient":
        rows = math.ceil(rows / 32) * 32
    return out, torch.empty((*query.shape[:-2], rows), dtype=torch.float32, device=query.device)


def fused_gradients(query, key, value, kernel: str):
    """The gradients a fused SDPA kernel's backward returns, and the workspace it holds beside them while it runs
    (backward_workspace_bytes), allocated and freed."""
    grads = (torch.empty_like(query), torch.empty_like(key), torch.empty_like(value))
    workspace = torch.empty(backward_workspace_bytes(query, key, value, kernel), dtype=torch.uint8,
                            device=query.device)
    del workspace
    return grads


def backward_workspace_bytes(query, key, value, kernel: str) -> int:
    """What a fused SDPA kernel's backward allocates beyond the gradients it returns, as measured on H100
    (docs/evidence/gpu-counts-h100/: sdpa_backward_probe.py -> sdpa-backward/sdpa_backward_h100.csv,
    replayed by tests/tunebench/planning/test_attention_kernels.py): a float32 accumulator of the query's shape for
    dQ (flash: two; the memory-efficient kernel's head size padded to a multiple of 64), float32 row statistics per
    query row (dO · O), and with fewer key/value heads than query heads, dK and dV at every query head before they
    are summed into their groups. cuDNN keeps up to 1 MiB more (its statistics twice from 1 MiB on), and the
    memory-efficient kernel above head size 128 16 MiB more (4 x 32 heads x 1024 rows): not modelled."""
    batch_heads_rows = math.prod(query.shape[:-1])
    head = query.shape[-1]
    if kernel == "efficient":
        head = math.ceil(head / 64) * 64
    accumulators = 2 if kernel == "flash" else 1
    out = accumulators * batch_heads_rows * head * 4 + batch_heads_rows * 4
    if key.shape[-3] != query.shape[-3]:
        out += (key.shape[-1] + value.shape[-1]) * batch_heads_rows * key.element_size()
    return out


@functools.lru_cache(maxsize=1)
def fused_attention_op():
    """tunebench::fused_attention(query, key, value, bias, kernel) -> (out, logsumexp): a fused SDPA kernel
    (cuDNN, flash, memory-efficient) as fused_outputs sizes it, with its backward op."""
    @torch.library.custom_op("tunebench::fused_attention", mutates_args=())
    def fused_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, bias: torch.Tensor | None,
                        kernel: str) -> tuple[torch.Tensor, torch.Tensor]:
        return fused_outputs(query, value, kernel)

    @fused_attention.register_fake
    def _(query, key, value, bias, kernel):
        CALLED.append(kernel)
        return fused_outputs(query, value, kernel)

    @torch.library.custom_op("tunebench::fused_attention_backward", mutates_args=())
    def fused_attention_backward(grad: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 out: torch.Tensor, lse: torch.Tensor, bias: torch.Tensor | None,
                                 kernel: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return fused_gradients(query, key, value, kernel)

    @fused_attention_backward.register_fake
    def _(grad, query, key, value, out, lse, bias, kernel):
        return fused_gradients(query, key, value, kernel)

    def setup_context(ctx, inputs, output):
        query, key, value, bias, kernel = inputs
        ctx.save_for_backward(query, key, value, *output, bias)
        ctx.kernel = kernel

    def backward(ctx, grad_out, grad_lse):
        query, key, value, out, lse, bias = ctx.saved_tensors
        return (*fused_attention_backward(grad_out, query, key, value, out, lse, bias, ctx.kernel), None, None)

    fused_attention.register_autograd(backward, setup_context=setup_context)
    return fused_attention


def _flex_outputs(query, value):
    """What flex attention's forward kernel allocates: the output in the query's memory layout, a float32
    log-sum-exp per query row, and the row maxima (a second output of the Triton template that nothing reads:
    freed after the kernel)."""
    out = torch.empty_like(query) if value.shape[-1] == query.shape[-1] else query.new_empty(
        (*query.shape[:-1], value.shape[-1]))
    lse = torch.empty(query.shape[:-1], dtype=torch.float32, device=query.device)
    max_scores = torch.empty(query.shape[:-1], dtype=torch.float32, device=query.device)
    del max_scores
    return out, lse


def _flex_gradients(query, key, value):
    """What flex attention's backward allocates (torch/_inductor/kernel/flex/flex_attention.py): a float32 delta
    per query row (Σ out·dout) for the kernel, dQ like the query, dK and dV like the keys and values (grouped-query
    heads are not expanded)."""
    delta = torch.empty(query.shape[:-1], dtype=torch.float32, device=query.device)
    grads = (torch.empty_like(query), torch.empty_like(key), torch.empty_like(value))
    del delta
    return grads


@functools.lru_cache(maxsize=1)
def flex_attention_op():
    """tunebench::flex_attention(query, key, value, mask) -> (out, logsumexp): compiled flex attention as its
    AOTAutograd partition saves it (queries, keys, values, output, log-sum-exp and the block mask's tensors), with
    its backward op."""

    @torch.library.custom_op("tunebench::flex_attention", mutates_args=())
    def flex_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       mask: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return _flex_outputs(query, value)

    @flex_attention.register_fake
    def _(query, key, value, mask):
        return _flex_outputs(query, value)

    @torch.library.custom_op("tunebench::flex_attention_backward", mutates_args=())
    def flex_attention_backward(grad: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                out: torch.Tensor, lse: torch.Tensor,
                                mask: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return _flex_gradients(query, key, value)

    @flex_attention_backward.register_fake
    def _(grad, query, key, value, out, lse, mask):
        return _flex_gradients(query, key, value)

    def setup_context(ctx, inputs, output):
        query, key, value, mask = inputs
        ctx.save_for_backward(query, key, value, *output, *mask)

    def backward(ctx, grad_out, grad_lse):
        query, key, value, out, lse, *mask = ctx.saved_tensors
        return (*flex_attention_backward(grad_out, query, key, value, out, lse, mask), [None] * len(mask))

    flex_attention.register_autograd(backward, setup_context=setup_context)
    return flex_attention


def flex_stand_in(query, key, value, training=False, block_mask=None, **kwargs):
    """transformers' compile_friendly_flex_attention as the GPU runs it: the op above. On a GPU transformers asks
    for the log-sum-exp and casts it to the values' dtype (a transient it returns as attention weights); on the CPU
    tensors of the fake step it asks for the output alone, which is returned."""
    mask = [t for t in (block_mask.as_tuple()[2:-1] if block_mask is not None else ()) if isinstance(t, torch.Tensor)]
    out, lse = flex_attention_op()(query, key, value, mask)
    lse.to(value.dtype)
    return out


@contextlib.contextmanager
def flex_attention_as_gpu():
    """While the fake step runs: flex attention as the GPU's compiled kernels (flex has no backward on the CPU)."""
    from unittest import mock

    from transformers import masking_utils
    from transformers.integrations import flex_attention as integration

    flex_attention_op()
    # A padding mask's values are unknown to fake tensors: a row with padding, as the padded rows the fake step
    # plans for (their block mask then carries the padding mask as a buffer of the mask function)
    with mock.patch.object(integration, "compile_friendly_flex_attention", flex_stand_in), \
            mock.patch.object(masking_utils, "fast_all", lambda tensor: False):
        yield
