"""An embedding's backward as CUDA runs it, for the fake step: the buffers CUDA's kernel allocates beside the
gradient it returns, which the CPU kernel the fake step dispatches does not.

CUDA's `embedding_dense_backward` (aten/src/ATen/native/cuda/Embedding.cu, EmbeddingBackwardKernel.cu) takes a
fast path for at most 3 072 indices. Above that it sorts the indices and sums the gradient rows of equal indices
in float32 partial sums first, sized for the worst case whatever the data: (indices / 10 + min(indices, rows))
partial rows of the embedding's width, besides the sorted indices and their segment bookkeeping. An 8B model at
4 x 1024 tokens holds 70.6 MiB of them at its full fine-tune's last backward op (H100: the one-GPU checkpointed
row of docs/evidence/gpu-counts-h100.md measured 70.55 MiB more temporaries than planned without them).
"""

from __future__ import annotations

import functools
import logging

logger = logging.getLogger(__name__)

FAST_PATH_INDICES = 3072  # Embedding.cu: the atomic kernel, no sort, no partial sums
ROWS_PER_PARTIAL = 10  # EmbeddingBackwardKernel.cu: NROWS_PER_THREAD


def workspace_shapes(indices: int, rows: int, width: int) -> list[tuple[int, str]]:
    """(elements, kind) of every buffer CUDA's backward holds with the returned gradient while its partial sums are
    alive: `index` buffers take the indices' dtype, `accumulator` the gradient's accumulation type (float32 for
    16-bit gradients), `count` int64."""
    if indices <= FAST_PATH_INDICES:
        return []
    segments = min(indices, rows)
    partials = indices // ROWS_PER_PARTIAL + segments
    return [(indices, "index"), (indices, "index"),  # sorted indices, their original positions
            (indices, "index"),  # segment offsets
            (1, "count"), (segments, "index"), (segments, "index"), (1, "count"),  # partials per segment
            (partials, "index"),  # partial segment offsets
            (partials * width, "accumulator")]  # the partial sums


def embedding_as_cuda(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
                      sparse=False):
    """F.embedding whose backward also allocates (and frees) CUDA's workspace; the forward is the original's.
    Cases CUDA runs otherwise (sparse gradients, max_norm, a frozen weight, a compiled graph: inductor writes its
    own kernel) go to F.embedding unchanged."""
    import torch
    import torch.nn.functional as F

    if (sparse or max_norm is not None or scale_grad_by_freq or not weight.requires_grad
            or torch.compiler.is_compiling()):
        return F.embedding(input, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse)
    if padding_idx is None:
        padding_idx = -1
    elif padding_idx < 0:  # as F.embedding counts a negative padding index
        padding_idx = weight.shape[0] + padding_idx
    return _function().apply(input, weight, padding_idx)


@functools.lru_cache(maxsize=1)
def _function():
    import torch

    class CudaEmbedding(torch.autograd.Function):
        """The embedding's lookup forward; backward: CUDA's gradient and, while it is made, its workspace."""

        @staticmethod
        def forward(ctx, input, weight, padding_idx: int):
            ctx.save_for_backward(input)
            ctx.rows, ctx.padding_idx = weight.shape[0], padding_idx
            return torch.ops.aten.embedding(weight, input, padding_idx)

        @staticmethod
        def backward(ctx, grad):
            (input,) = ctx.saved_tensors
            grad_weight = torch.ops.aten.embedding_dense_backward(grad, input, ctx.rows, ctx.padding_idx, False)
            accumulate = torch.float32 if grad.dtype in (torch.float16, torch.bfloat16) else grad.dtype
            kinds = {"index": input.dtype, "count": torch.int64, "accumulator": accumulate}
            workspace = [torch.empty(n, dtype=kinds[kind], device=grad.device)
                         for n, kind in workspace_shapes(input.numel(), ctx.rows, grad.shape[-1])]
            del workspace
            return None, grad_weight, None

    return CudaEmbedding
