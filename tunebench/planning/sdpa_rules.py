"""The kernel CUDA's SDPA picks for one call, by torch's own eligibility rules (torch 2.11's sdp_utils), check by check.

torch picks the first backend of its priority order whose checks all pass (select_sdp_backend in
aten/src/ATen/native/transformers/cuda/sdp_utils.cpp, the shared checks in sdp_utils_cpp.h). The rules here are
those checks as torch 2.11 ships them, the torch of the GPU image the runs use: a plan made on a CPU host with
another torch must pick what the run's torch picks (its checks differ by version: torch 2.13's memory-efficient
kernel takes grouped-query heads, 2.11's does not; 2.13's cuDNN refuses a dropout that is not a multiple of 1/16
and some backward head sizes, 2.11's does not). Checks that read what a training run does not change are left out
and said so: backends switched off by the user, deterministic algorithms, nested tensors, and the cuDNN library's
own version (the image's cuDNN is new enough for every check that reads it; sdpa_choice_cuda.csv shows it).

`arch` is a compute capability as an integer: 90 for sm_90 (H100, H200), 86 for sm_86, 100 for sm_100.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

logger = logging.getLogger(__name__)

CUDNN, FLASH, EFFICIENT, MATH = "cudnn", "flash", "efficient", "math"
# torch's default order; on sm_9x and sm_10x with a recent cuDNN (check_prefer_cudnn_attention) cuDNN comes first
DEFAULT_ORDER = (FLASH, EFFICIENT, MATH, CUDNN)
CUDNN_FIRST = (CUDNN, FLASH, EFFICIENT, MATH)


@dataclass(frozen=True)
class SdpaCall:
    """What the checks read of one SDPA call: shapes (batch, heads, length, head size), last-dimension strides,
    dtypes, the mask, dropout, causality, whether any input needs a gradient, and `enable_gqa`."""

    query: tuple
    key: tuple
    value: tuple
    strides: tuple  # the last dimension's stride of query, key, value
    dtype: str  # torch dtype name of the query ("bfloat16", ...)
    mask_dims: int | None = None  # None: no attn_mask
    mask_last_stride: int = 1
    dropout: float = 0.0
    is_causal: bool = False
    requires_grad: bool = True
    enable_gqa: bool = False

    @classmethod
    def of(cls, query, key, value, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False,
           enable_gqa: bool = False) -> SdpaCall:
        return cls(tuple(query.shape), tuple(key.shape), tuple(value.shape),
                   tuple(t.stride(-1) if t.dim() else 1 for t in (query, key, value)), str(query.dtype).split(".")[-1],
                   None if attn_mask is None else attn_mask.dim(),
                   attn_mask.stride(-1) if attn_mask is not None and attn_mask.dim() else 1, float(dropout_p),
                   bool(is_causal), any(t.requires_grad for t in (query, key, value)), bool(enable_gqa))


HALF = ("float16", "bfloat16")


def choose(call: SdpaCall, arch: int) -> str:
    """The backend torch 2.11 picks for `call` on a GPU of compute capability `arch` (math when no fused one
    passes: it is always enabled)."""
    checks = {CUDNN: use_cudnn, FLASH: use_flash, EFFICIENT: use_efficient, MATH: lambda c, a: True}
    for backend in (CUDNN_FIRST if prefers_cudnn(arch) else DEFAULT_ORDER):
        if checks[backend](call, arch):
            return backend
    return MATH


def prefers_cudnn(arch: int) -> bool:
    """check_prefer_cudnn_attention: cuDNN first on sm_9x and sm_10x (a cuDNN after 9.15, as the image's)."""
    return arch // 10 in (9, 10)


# ---------------------------------------------------------------- checks shared by the fused backends
def four_dimensional(call: SdpaCall) -> bool:
    """check_tensor_shapes: query, key and value 4-dimensional."""
    return len(call.query) == len(call.key) == len(call.value) == 4


def heads_fit(call: SdpaCall, supports_gqa: bool) -> bool:
    """check_batch_size_and_num_heads_dense: one batch size; one head count, unless `enable_gqa` on a backend that
    groups query heads (check_grouped_query_attention: key and value alike, their heads dividing the query's)."""
    (qb, qh), (kb, kh), (vb, vh) = call.query[:2], call.key[:2], call.value[:2]
    if not qb == kb == vb:
        return False
    if call.enable_gqa and supports_gqa:
        return kh == vh and kh > 0 and qh % kh == 0
    return qh == kh == vh


def nonzero_lengths(call: SdpaCall) -> bool:
    """check_nonzero_sequence_lengths_dense."""
    return call.query[2] > 0 and call.key[2] > 0


def unit_last_stride(call: SdpaCall, ignore_singleton: bool) -> bool:
    """check_last_dim_stride_equals_1_dense: the last dimension contiguous (a size-1 one ignored where the backend
    says so); a mask's too."""
    shapes = (call.query, call.key, call.value)
    inputs = all(s == 1 or (ignore_singleton and shape[-1] == 1) for s, shape in zip(call.strides, shapes, strict=True))
    return inputs and (call.mask_dims is None or call.mask_last_stride == 1)


def dense_checks(call: SdpaCall, supports_gqa: bool, ignore_singleton: bool) -> bool:
    return (nonzero_lengths(call) and unit_last_stride(call, ignore_singleton)
            and heads_fit(call, supports_gqa))


# ---------------------------------------------------------------- cuDNN
def use_cudnn(call: SdpaCall, arch: int) -> bool:
    """can_use_cudnn_attention: half precision on sm_80..sm_121, any mask of 2 to 4 dimensions, grouped heads,
    and its head-size and sequence-length limits."""
    return (four_dimensional(call) and call.dtype in low_precision(arch) and 80 <= arch <= 121
            and (call.mask_dims is None or 2 <= call.mask_dims <= 4)
            and dense_checks(call, supports_gqa=True, ignore_singleton=True) and cudnn_shapes(call, arch))


def cudnn_shapes(call: SdpaCall, arch: int) -> bool:
    """check_cudnn_tensor_shapes: batch and heads up to 65 535; head sizes multiples of 8 up to 128 (256 on sm_90
    and sm_10x; 192 / 128 query / value heads on those too); a key length other than 1; a query length other than
    1 with dropout."""
    batch, heads, q_len, d_qk = call.query
    k_len, d_v = call.key[2], call.value[3]
    if batch > 65535 or heads > 65535:
        return False
    limit = 256 if arch == 90 or arch // 10 == 10 else 128
    if not (d_qk <= limit and d_v <= limit and d_qk % 8 == 0 and d_v % 8 == 0):
        return False
    return k_len != 1 and not (call.dropout > 0 and q_len == 1)


# ---------------------------------------------------------------- flash
def use_flash(call: SdpaCall, arch: int) -> bool:
    """can_use_flash_attention: half precision on sm_80..sm_121, no mask, one head size up to 256 for query, key and
    value, no causal mask over unequal lengths, grouped heads; on sm_86..sm_89 and sm_12x no training with head
    sizes in (192, 224], nor in (224, 256] with dropout."""
    return (four_dimensional(call) and call.mask_dims is None and flash_head_size(call) and 80 <= arch <= 121
            and flash_backward_head_size(call, arch) and (not call.is_causal or call.query[2] == call.key[2])
            and call.dtype in low_precision(arch) and dense_checks(call, supports_gqa=True, ignore_singleton=True))


def flash_head_size(call: SdpaCall) -> bool:
    """check_head_dim_size_flash: query, key and value heads of one size, at most 256."""
    return call.query[3] == call.key[3] == call.value[3] and call.query[3] <= 256


def flash_backward_head_size(call: SdpaCall, arch: int) -> bool:
    """check_requires_grad_and_head_dim_gt192_constraints_on_sm86_89 (and sm_120, sm_121)."""
    if not call.requires_grad or not (86 <= arch <= 89 or 120 <= arch <= 121):
        return True
    size = call.query[3]
    return size <= 192 or (call.dropout == 0 and size > 224)


# ---------------------------------------------------------------- memory-efficient
def use_efficient(call: SdpaCall, arch: int) -> bool:
    """can_use_mem_efficient_attention: sm_50..sm_121; float32 too; any mask; one head count for query, key and
    value (torch 2.11's kernel does not group heads); query and key heads of one size, query and value head sizes
    multiples of the GEMM alignment."""
    dtypes = ("float16", "float32", "bfloat16") if arch >= 80 else ("float16", "float32")
    return (50 <= arch <= 121 and four_dimensional(call) and efficient_head_size(call, arch)
            and dense_checks(call, supports_gqa=False, ignore_singleton=False) and call.dtype in dtypes)


def efficient_head_size(call: SdpaCall, arch: int) -> bool:
    """check_head_dim_size_mem_efficient: the query's head size the key's; query and value head sizes positive
    multiples of minimum_gemm_alignment."""
    d_qk, d_v = call.query[3], call.value[3]
    alignment = gemm_alignment(call.dtype, arch)
    return d_qk == call.key[3] and d_qk > 0 and d_v > 0 and d_qk % alignment == 0 and d_v % alignment == 0


def gemm_alignment(dtype: str, arch: int) -> int:
    """minimum_gemm_alignment: 4 elements from sm_80, at least 128 bits where tensor cores run (every dtype from
    sm_80, half precision only on sm_7x)."""
    half = dtype in HALF
    tensor_cores = arch >= 80 or (arch >= 70 and half)
    alignment = 4 if arch >= 80 else 1
    return max(alignment, 128 // (16 if half else 32)) if tensor_cores else alignment


def low_precision(arch: int) -> tuple:
    """check_dtypes_low_precision: float16 and bfloat16 from sm_80, float16 below."""
    return HALF if arch >= 80 else ("float16",)
