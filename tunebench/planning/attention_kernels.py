"""The attention kernel a GPU run will take, and a stand-in for it in the fake step that keeps what that kernel keeps.

The fake step runs on the CPU dispatcher (a CPU-only torch cannot dispatch fake CUDA kernels), and CPU SDPA
differs from CUDA SDPA exactly where memory is decided: with an attention mask the CPU takes the math path,
which saves the B·H·L² attention probabilities for backward, while CUDA's fused kernels (cuDNN, flash,
memory-efficient) save only the output and a log-sum-exp per query row. A masked or sliding-window model was
predicted at 3.7x its real activations that way. For a CUDA target the fake step therefore replaces
`scaled_dot_product_attention` by a stand-in that picks the kernel as torch does on that GPU and saves for
backward what that kernel saves; for a CPU target the real CPU kernels run, as in the CPU run.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math

logger = logging.getLogger(__name__)

HOPPER = 90  # the compute capability assumed when a target's is unknown: the GPUs the prediction was measured on


def choose_kernel(query, key, value, attn_mask, dropout_p: float, arch: int, enable_gqa: bool = False,
                  is_causal: bool = False) -> str:
    """The kernel torch's SDPA picks on a GPU of compute capability `arch` for these inputs: torch's own eligibility
    rules, check by check (planning.sdpa_rules). On H100 (torch 2.11) they give torch's own selector's choice for
    all 864 inputs of docs/evidence/layer-families-h100/sdpa_choice_cuda.csv
    (tests/tunebench/planning/test_attention_kernels.py)."""
    from tunebench.planning.sdpa_rules import SdpaCall, choose

    return choose(SdpaCall.of(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa), arch)


@functools.lru_cache(maxsize=1)
def _fused_function():
    import torch

    from tunebench.planning.kernel_ops import fused_gradients, fused_outputs

    class FusedAttention(torch.autograd.Function):
        """Shapes, dtypes and saved tensors of a fused SDPA kernel; no arithmetic (the step is fake)."""

        @staticmethod
        def forward(ctx, query, key, value, attn_mask, kernel: str):
            out, lse = fused_outputs(query, value, kernel)
            saved = [query, key, value, out, lse]
            if attn_mask is not None:
                saved.append(attn_mask)  # the bias is an input of the fused kernels' backward
            ctx.save_for_backward(*saved)
            ctx.kernel = kernel
            return out

        @staticmethod
        def backward(ctx, grad_out):
            return (*fused_gradients(*ctx.saved_tensors[:3], ctx.kernel), None, None)

    return FusedAttention


class gpu_attention:  # noqa: N801 - used as `with gpu_attention(arch, chosen):`, a context like the others
    """While the fake step runs: SDPA as the GPU of compute capability `arch` would run it. Every call's kernel
    is appended to `chosen` (the prediction reports them as `pred_attention`). The same stand-in is installed at
    every entry: a compiled model's warm-up and measured step must see the same function (dynamo guards on it).
    Under torch.compile the kernel is an opaque op (planning.kernel_ops), which the partitioner must save for."""

    def __init__(self, arch: int, chosen: list):
        import torch.nn.functional as F

        self.original = F.scaled_dot_product_attention
        self.stand_in = self._stand_in(arch, chosen, self.original)
        _quiet_dropout_mask_warning()

    @staticmethod
    def _stand_in(arch: int, chosen: list, original):
        import torch

        from tunebench.planning.kernel_ops import fused_attention_op

        fused = _fused_function()
        fused_attention_op()  # registered before any tracing (a registration traced by dynamo breaks its graph)

        def stand_in(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
            # Autocast casts at the op's dispatch, which this Python function never reaches: cast as CUDA's autocast
            # casts SDPA's float32 tensors (its lower-precision list), so the kernel saves the copies it would save
            # (float32 queries reach it from an 8-bit layer fed by a float32 LayerNorm: gpt-bigcode lora-int8's peak
            # was over-predicted by 5.9 % on H100 without this cast, 0.01 % with it).
            query, key, value, attn_mask = _autocast_lower(query, key, value, attn_mask)
            kernel = choose_kernel(query, key, value, attn_mask, dropout_p, arch, enable_gqa, is_causal)
            if not torch.compiler.is_compiling():  # a compiled step's kernels are the op's to record (kernel_ops)
                chosen.append(kernel)
            if kernel == "math":
                return math_attention(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                                      cuda=True)
            bias = _as_bias(attn_mask, query.dtype, kernel)
            if torch.compiler.is_compiling():
                return torch.ops.tunebench.fused_attention(query, key, value, bias, kernel)[0]
            return fused.apply(query, key, value, bias, kernel)

        return stand_in

    def __enter__(self):
        import torch.nn.functional as F

        F.scaled_dot_product_attention = self.stand_in
        return self

    def __exit__(self, *exc) -> None:
        import torch.nn.functional as F

        F.scaled_dot_product_attention = self.original


def math_attention(query, key, value, attn_mask, dropout_p: float, is_causal: bool, scale, enable_gqa: bool,
                   cuda: bool):
    """SDPA's math backend as torch runs it: a boolean mask made additive (SDPA's own conversion, before any
    backend), then torch's composite (_scaled_dot_product_attention_math: half precision upcast to float32, grouped
    heads repeated, the float32 probabilities kept for backward). Called by name because F.scaled_dot_product_attention
    under fake CPU tensors runs the CPU's fused flash kernel instead, which keeps only the output and a log-sum-exp:
    a float32 model with grouped-query heads, whose GPU run takes the math path, was planned 29 % under its peak.
    The composite's dropout is the device's: CUDA's fused kernel keeps a boolean mask, the CPU's path a noise tensor
    of the probabilities' dtype; for a CUDA target the composite gets a boolean mask, with which it keeps the same
    bytes as CUDA's fused dropout does (the mask, the dropped probabilities, the values)."""
    import torch

    if attn_mask is not None and attn_mask.dtype == torch.bool:
        attn_mask = torch.where(attn_mask, torch.scalar_tensor(0.0, dtype=query.dtype),
                                torch.scalar_tensor(float("-inf"), dtype=query.dtype))
    dropout_mask = None
    if cuda and dropout_p > 0:
        dropout_mask = torch.empty((*query.shape[:-1], key.shape[-2]), dtype=torch.bool)
    return torch.ops.aten._scaled_dot_product_attention_math(
        query, key, value, attn_mask, dropout_p, is_causal, dropout_mask, scale=scale, enable_gqa=enable_gqa)[0]


@functools.lru_cache(maxsize=1)
def _quiet_dropout_mask_warning() -> None:
    """torch warns once that a dropout mask given to the math composite is for tests; here it stands for CUDA's
    fused dropout (math_attention). Filtered once, before any tracing (a warnings context inside a compiled
    region would break its graph)."""
    import warnings

    warnings.filterwarnings("ignore", message="Dropout mask should only be used for testing")


def _as_bias(attn_mask, dtype, kernel: str):
    """The mask as CUDA SDPA hands it to a fused kernel, which saves it for backward: a boolean mask becomes a new
    additive bias in the queries' dtype at every call (so every layer keeps its own copy: 22 sliding-window
    layers of a Gemma-3-shaped model kept 22 × 4 MiB on H100), and the memory-efficient kernel pads its last
    dimension to a multiple of 16."""
    import torch

    if attn_mask is None or (attn_mask.dtype != torch.bool
                             and (kernel != "efficient" or attn_mask.shape[-1] % 16 == 0)):
        return attn_mask
    shape = list(attn_mask.shape)
    if kernel == "efficient":
        shape[-1] = math.ceil(shape[-1] / 16) * 16
    return torch.zeros(shape, dtype=dtype if attn_mask.dtype == torch.bool else attn_mask.dtype)


def _autocast_lower(*tensors):
    """Float32 tensors in autocast's lower-precision dtype while (the fake step's stand-in for CUDA's) autocast is
    on; everything else as it is."""
    import torch

    if not torch.is_autocast_enabled("cpu"):
        return tensors
    dtype = torch.get_autocast_dtype("cpu")
    return tuple(t.to(dtype) if isinstance(t, torch.Tensor) and t.dtype == torch.float32 else t for t in tensors)


def _cpu_choice(query, key, value, attn_mask, dropout_p: float, is_causal: bool, scale, enable_gqa: bool) -> int:
    """torch's own CPU backend choice for these inputs (1 = its fused flash kernel), asked on tiny real tensors of
    the same dtypes, heads, head sizes and mask pattern: fake tensors do not take the CPU's choice (they run its
    fused flash kernel whatever the inputs), so the fake step cannot ask with its own."""
    import torch
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    def tiny(tensor, length: int = 2):
        shape = (1, tensor.shape[-3] if tensor.dim() >= 3 else 1, length, tensor.shape[-1])
        return torch.empty(shape, dtype=tensor.dtype, requires_grad=tensor.requires_grad)

    with unset_fake_temporarily():
        mask = None
        if attn_mask is not None:
            mask = torch.zeros((1, 1, 2, 2), dtype=attn_mask.dtype)
        return int(torch._fused_sdp_choice(tiny(query), tiny(key), tiny(value), attn_mask=mask, dropout_p=dropout_p,
                                           is_causal=is_causal, scale=scale, enable_gqa=enable_gqa))


@contextlib.contextmanager
def cpu_attention(chosen: list):
    """While the fake step runs for a CPU target: SDPA as the CPU runs it. The kernel is the one torch picks on
    the CPU; its fused flash kernel is called directly (it saves the output and a log-sum-exp per row, keys and
    values without GQA's repeat, and a float copy of a boolean mask), the math composite otherwise
    (math_attention)."""
    import torch
    import torch.nn.functional as F

    original = F.scaled_dot_product_attention

    def as_the_cpu(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if _cpu_choice(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa) != 1:
            chosen.append("math")
            return math_attention(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, cuda=False)
        chosen.append("flash")
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            attn_mask = torch.zeros(attn_mask.shape, dtype=query.dtype).masked_fill(~attn_mask, float("-inf"))
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)[0]

    F.scaled_dot_product_attention = as_the_cpu
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original


def summary(chosen: list) -> str:
    """`cudnn`, `flash`, … as the scanner names them (`a+b` when mixed; `none` when no SDPA call: eager)."""
    kinds = sorted(set(chosen))
    return "+".join(kinds) if kinds else "none"
