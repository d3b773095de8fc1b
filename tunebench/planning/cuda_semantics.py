"""Where a CUDA step keeps different tensors from the CPU ops the fake step runs: autocast's float32 ops, dropout,
an embedding's backward (planning.cuda_embedding).

The fake step dispatches CPU kernels under fake tensors. Two CPU rules decide memory differently from CUDA:
- autocast: CUDA's policy runs normalisations, softmax, exp/log/pow, sums and losses in float32 (so a
  LayerNorm keeps a float32 copy of its bf16 input, a MoE router's softmax keeps float32 probabilities); CPU's
  policy leaves them in bf16. Measured on H100 (docs/evidence/prediction-conformance-h100/saved_probe.py, two
  layers, bf16 autocast): starcoder2 saved 898.7 MB for backward, the CPU policy 785.3 MB; gpt-bigcode 721.9 MB against
  700.8 MB.
- dropout: CUDA's fused kernel keeps a one-byte mask; the CPU path multiplies by a noise tensor of the
  input's dtype and keeps that.
For a CUDA target the fake step therefore applies CUDA's rules on top of the CPU kernels: a function mode
that sees the model's Python calls. Autograd's backward does not carry function modes, so the recompute of a
checkpointed layer enters its own through the checkpoint's `context_fn` (`recompute_context`).
"""

from __future__ import annotations

import contextlib
import functools
import logging

logger = logging.getLogger(__name__)

# torch's CUDA autocast float32 list (aten/src/ATen/autocast_mode.cpp), by the name the Python call carries.
# "Set dtype" ops take dtype=float32 instead of a cast of their input, as CUDA's fp32_set_opt_dtype policy does.
FP32_CAST = frozenset({
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
    "sinh", "tan", "pow", "__pow__", "__rpow__", "layer_norm", "rms_norm", "group_norm", "frobenius_norm",
    "nuclear_norm", "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d",
    "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss",
    "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
    "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "softplus",
    # Composite ops (ATen's or Python's) that CUDA's autocast reaches through their decomposition, found by
    # asking CUDA (docs/evidence/layer-families-h100/autocast_probe.py -> autocast_cuda.csv, replayed by
    # tests/tunebench/planning/test_cuda_semantics.py).
    # `square` is `pow(x, 2)` in ATen: a squared-ReLU MLP keeps a float32 copy of its activation.
    "square", "ldexp", "mvlgamma", "norm_except_dim", "pairwise_distance", "trapezoid", "trapz",
    "multilabel_soft_margin_loss", "gumbel_softmax", "linalg_vector_norm", "linalg_matrix_norm", "linalg_norm",
    "special_erfinv", "special_expm1", "special_log1p", "special_logsumexp", "special_multigammaln",
})
FP32_SET_DTYPE = frozenset({"prod", "softmax", "log_softmax", "cumprod", "cumsum", "sum", "norm",
                            "softmin", "special_softmax", "special_log_softmax"})
# Where a call of those can give its dtype positionally (its index in the call's args, the input first):
# torch.softmax / Tensor.softmax (input, dim, dtype), log_softmax alike. The others' dtype is keyword-only
# (sum, prod, cumsum, cumprod: native_functions.yaml), and F.softmax, F.log_softmax, torch.norm and
# Tensor.norm hand every argument but the input on by keyword.
_DTYPE_POSITION = {"softmax": 2, "log_softmax": 2, "special_softmax": 2, "special_log_softmax": 2, "softmin": 3}
_LOWER = None  # (torch.float16, torch.bfloat16), set on first use: importing torch here would slow start-up
_ACTIVE: list[bool] = []  # whether the fake step now runs for a CUDA target (read by recompute_context)


@contextlib.contextmanager
def applied(enabled: bool):
    """The forward under CUDA's rules (when `enabled`); checkpointed layers' recomputes follow the same choice."""
    _ACTIVE.append(enabled)
    try:
        with cuda_rules() if enabled else contextlib.nullcontext(), \
                (_autocast_asked_of_the_target() if enabled else contextlib.nullcontext()):
            yield
    finally:
        _ACTIVE.pop()


@contextlib.contextmanager
def _autocast_asked_of_the_target():
    """`torch.is_autocast_enabled()` without a device asks about CUDA, whose autocast the fake step's CPU autocast
    stands in for: answered from the CPU's. PEFT asks so before a LoRA layer, and casts the input to the adapter's
    dtype only without autocast: with float32 adapters (FSDP1's upcast), a CUDA run computes the adapter in bf16
    from its bf16 input, while a CPU step that said "no autocast" would keep a float32 copy and a bf16 recast of
    every adapter's input."""
    import torch

    original = torch.is_autocast_enabled

    def is_autocast_enabled(device_type=None):
        return original("cpu" if device_type is None else device_type)

    torch.is_autocast_enabled = is_autocast_enabled
    try:
        yield
    finally:
        torch.is_autocast_enabled = original


def recompute_context():
    """The checkpoint's `context_fn`: (forward context, recompute context), CUDA's rules in the recompute when
    the fake step applies them."""
    active = bool(_ACTIVE and _ACTIVE[-1])
    return contextlib.nullcontext(), cuda_rules() if active else contextlib.nullcontext()


def _lower_precision(value) -> bool:
    import torch

    global _LOWER
    if _LOWER is None:
        _LOWER = (torch.float16, torch.bfloat16)
    return isinstance(value, torch.Tensor) and value.dtype in _LOWER


def _autocast_on() -> bool:
    import torch

    return torch.is_autocast_enabled("cpu")


def cuda_rules():
    """A torch function mode applying CUDA's autocast float32 policy and CUDA's dropout to CPU fake tensors."""
    return _rules_class()()


@functools.lru_cache(maxsize=1)
def _rules_class():
    """The mode's class, made once: torch.compile guards on the types of the function modes in force, so every step
    (a compiled model's warm-up and its measured step) must see the same class."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_map

    from tunebench.planning.cuda_embedding import embedding_as_cuda

    global _LOWER
    _LOWER = (torch.float16, torch.bfloat16)  # set before any tracing: a global set while dynamo traces is a guard

    def to_fp32(value):
        return value.float() if _lower_precision(value) else value

    class CudaRules(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = getattr(func, "__name__", "")
            if name == "dropout" and func is torch.nn.functional.dropout:
                return _dropout(*args, **kwargs)
            if name == "embedding" and func is torch.nn.functional.embedding:
                return embedding_as_cuda(*args, **kwargs)
            if _autocast_on():
                if name in FP32_CAST and any(_lower_precision(a) for a in (*args, *kwargs.values())):
                    args, kwargs = tree_map(to_fp32, args), tree_map(to_fp32, kwargs)
                elif name in FP32_SET_DTYPE and args and _lower_precision(args[0]) and kwargs.get("dtype") is None:
                    given = _float32_unless_given(name, args, kwargs)
                    try:
                        return func(*given[0], **given[1])
                    except TypeError:  # an overload without a dtype (torch.norm(x) has none): cast instead
                        args, kwargs = tree_map(to_fp32, args), tree_map(to_fp32, kwargs)
            return func(*args, **kwargs)

    return CudaRules


def _float32_unless_given(name: str, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """A "set dtype" op's arguments with dtype float32, unless the call gives a dtype positionally (left alone,
    as CUDA's autocast leaves an explicit dtype); a positional None is replaced (a keyword would clash with it)."""
    import torch

    position = _DTYPE_POSITION.get(name)
    if position is None or len(args) <= position:
        return args, {**kwargs, "dtype": torch.float32}
    if args[position] is not None:
        return args, kwargs
    return (*args[:position], torch.float32, *args[position + 1:]), kwargs


def _dropout(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    """F.dropout as CUDA runs it: the fused kernel, which keeps a boolean mask for backward."""
    import torch

    if not training or p == 0 or input.numel() == 0:
        return input
    if p == 1:
        return input.mul(0) if not inplace else input.mul_(0)
    out = torch.native_dropout(input, p, True)[0]
    return input.copy_(out) if inplace else out

