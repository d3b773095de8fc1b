"""Which kind of work a GPU kernel does (matmul, attention, memory-bound, communication), from its name.

The classes are what a projection to another GPU needs to tell apart: matmuls and fused attention are bound by
the tensor cores' rate (unless their shapes are thin), elementwise, reduction, norm, optimizer and copy kernels by
memory bandwidth, collectives by the link between GPUs, and host<->device copies by PCIe. The rules are regular
expressions over the kernel's (demangled) name, tried in order, first match wins; the order matters where a
name holds another class's word (PyTorch's flash attention kernels are cutlass templates, cuDNN's fused
attention uses wgmma instructions, `splitKreduce` finishes a matmul, a fused AdamW runs in
`multi_tensor_apply_kernel`, a dtype cast is an `unrolled_elementwise_kernel` of `direct_copy`).
tests/scanner/test_kernel_classes.py holds them to real kernel names of H100 traces.
"""

from __future__ import annotations

import logging
import re

logger = logging.getLogger(__name__)

GEMM, ATTENTION, COMM, OPTIMIZER, NORM, REDUCTION, COPY, ELEMENTWISE, TRANSFER, OTHER = (
    "gemm", "attention", "comm", "optimizer", "norm", "reduction", "copy", "elementwise", "transfer", "other")
CLASSES = (GEMM, ATTENTION, COMM, OPTIMIZER, NORM, REDUCTION, COPY, ELEMENTWISE, TRANSFER, OTHER)
# Bound by the GPU's memory bandwidth, as a class (a thin matmul can be too: that needs its shapes, not its name).
MEMORY_BOUND = (OPTIMIZER, NORM, REDUCTION, COPY, ELEMENTWISE)

_RULES: tuple[tuple[str, str], ...] = (
    # NCCL's kernels and the custom all-reduce kernels of inference engines
    (COMM, r"^nccl|ncclDevKernel|ncclKernel|cross_device_reduce|all_?reduce_kernel|allgather_kernel"),
    # fused attention: PyTorch's flash (pytorch_flash::flash_fwd/bwd_*), FlashAttention-2/3, memory-efficient
    # (fmha_cutlassF/B), cuDNN's SDPA graphs, FlexAttention's compiled templates
    (ATTENTION, r"flash_fwd|flash_bwd|flash::|FlashAttn|flash_attn|fmha|_sdpa_|sdpa_|fprop_wgmma|bprop_wgmma|"
                r"attention_kernel|AttentionKernel|triton_tem_fused_flex|flex_attention"),
    # optimizers: fused AdamW/Adam/SGD functors (multi_tensor_apply), apex-style and bitsandbytes' 8-bit ones
    (OPTIMIZER, r"Adam|(?<!h)adam|Lion|lion_|SGDFunctor|FusedSgd|kOptimizer|optimizer_?\d*bit|LAMB|lamb_"),
    # matmuls: cuBLAS/cuBLASLt (nvjet, sm90_xmma, ampere_*gemm, gemv, splitK), CUTLASS, Triton templates,
    # bitsandbytes' 4-bit inference gemv and int8 matmuls
    (GEMM, r"nvjet|xmma_gemm|[a-z0-9]gemm|^gemm|gemm_|Gemm|gemv|Gemv|splitKreduce|cublas|cutlass|tensorop|"
           r"s16816|s1688|h16816|i16832|wgmma|triton_tem_fused_(?:mm|addmm|bmm)|kgemm|igemmlt|int8_?matmul"),
    # norms: layer norm, RMSNorm (fused or Liger/Triton), their backward kernels
    (NORM, r"layer_norm|LayerNorm|rms_norm|RMSNorm|rmsnorm|GammaBeta|group_norm|batch_norm|"
           r"_norm_(?:fwd|bwd|forward|backward)"),
    # reductions: sums, means, softmax / log-softmax, losses, norms of gradients (clipping), Triton reductions
    (REDUCTION, r"reduce_kernel|Reduce|reduction|softmax|SoftMax|Softmax|cross_entropy|CrossEntropy|nll_loss|"
                r"LpNorm|lpnorm|norm_kernel|cub::|scan_|triton_red_|triton_per_|argmax|topk|_sum_|sum_functor"),
    # copies: casts and contiguous copies, concatenation, gathers / scatters / indexing, embeddings, fills
    (COPY, r"direct_copy|copy_kernel|CopyKernel|Memcpy DtoD|Memset|memset|CatArray|cat_|transpose|permute|"
           r"index_elementwise|indexSelect|index_select|indexing_backward|index_put|IndexKernel|index_kernel|"
           r"gather|scatter|embedding|Embedding|FillFunctor|fill_kernel"),
    # elementwise: PyTorch's elementwise loops, Triton pointwise kernels, activations, (de)quantization
    (ELEMENTWISE, r"elementwise|Elementwise|vectorized|unrolled|pointwise|triton_poi_|silu|gelu|swiglu|geglu|"
                  r"rope|rotary|dropout|Dropout|quantize|Quantize|dequant|Dequant|kInt8|kdequant|"
                  r"multi_tensor_apply|Functor|_kernel_with_index|clamp|where"),
)
_COMPILED = tuple((cls, re.compile(pattern)) for cls, pattern in _RULES)
_HOST_COPY = re.compile(r"HtoD|DtoH|Pinned|Pageable|HtoH|PtoP")


def classify(name: str, category: str = "kernel") -> str:
    """The class of one GPU activity: `category` is the chrome trace's `cat` (kernel, gpu_memcpy, gpu_memset)."""
    if category == "gpu_memcpy":
        return TRANSFER if _HOST_COPY.search(name) else COPY
    if category == "gpu_memset":
        return COPY
    for cls, pattern in _COMPILED:
        if pattern.search(name):
            return cls
    return OTHER
