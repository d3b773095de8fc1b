"""Liger's kernels in the fake step: what each allocates and saves, from liger-kernel 0.8.5's own source.

Liger's kernels are Triton (GPU only), so the fake step replaces each with a stand-in that allocates and saves
exactly what Liger's Python around the kernel allocates and saves on CUDA, and does no arithmetic:
  * RMSNorm (LigerRMSNormFunction, llama casting, in place): forward allocates Y (input dtype) and a float32 RSTD
    per row and saves X, W, RSTD; backward writes dX into dY in place and, for a trainable weight, sums a float32
    (SMs × hidden) partial dW;
  * RoPE (LigerRopeFunction): rotates q and k in place (no copy when their memory is (B, L, H, D), as after the
    projections) and saves cos and sin; backward rotates the incoming gradients in place;
  * SwiGLU (LigerSiLUMulFunction): allocates c, saves a and b; backward writes da and db into a and b;
  * fused linear cross-entropy (LigerFusedLinearCrossEntropyFunction): no logits, chunks of
    next_pow2(ceil(BT / ceil(V / H))) rows, the input's and the head's gradients computed in forward and saved.
  * GeGLU (LigerGELUMulFunction) as SwiGLU; squared ReLU (LigerReLUSquaredFunction): allocates Y, saves X;
    backward allocates dX.
Which of them replace which layers of a model type is read from Liger's own apply function (planning.liger_patches),
so every type Liger supports is planned from what it patches; a patch without a stand-in here (MoE experts,
multimodal RoPE, the non-fused cross-entropy) is left out, an upper bound the note names.
How TRL's SFTTrainer applies them decides which run: TRL 1.x applies Liger with `fused_linear_cross_entropy`
False (its own fused LM head replaces the model's forward), so the harness's loss is the model's own and the logits
are materialised (H100, TRL 1.16: the Liger rows' temporaries equal the baseline's, 8.41 GB on the 1B).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math

logger = logging.getLogger(__name__)

LIGER_VERSION = "0.8.5"
SM_COUNT = 132  # the partial dW's rows: the GPU's SMs (H100 SXM); 132 × hidden × 4 B, a transient of backward
# the patch kinds with a stand-in here (planning.liger_patches.KINDS)
MODELLED = ("rms_norm", "rope", "swiglu", "swiglu_fused", "geglu", "relu_squared", "fused_linear_cross_entropy")


def type_patches(model_type: str | None) -> tuple:
    """Liger's patches of the type as the harness's trainer applies them (planning.liger_patches)."""
    from tunebench.planning.liger_patches import patches

    return patches(model_type, fused_linear_cross_entropy_applied())


def modelled(model_type: str | None) -> bool:
    """Whether any of Liger's patches of the type has a stand-in."""
    return any(p.kind in MODELLED for p in type_patches(model_type))


@functools.lru_cache(maxsize=1)
def fused_linear_cross_entropy_applied() -> bool:
    """Whether the harness's trainer lets Liger replace the model's forward by its fused linear cross-entropy: TRL's
    SFTTrainer (1.x) sets `fused_linear_cross_entropy` False in `liger_kernel_config` and refuses True."""
    import inspect

    try:
        from trl import SFTTrainer

        return '"fused_linear_cross_entropy": False' not in inspect.getsource(SFTTrainer.__init__)
    except (ImportError, OSError, TypeError):
        return True  # Liger's own default


def flce_chunk_size(tokens: int, hidden: int, vocab: int) -> int:
    """Rows of logits Liger's fused linear cross-entropy materialises at once: its transient logits are bounded
    by tokens × hidden elements (chunk_mem_const 1)."""
    increase = math.ceil(vocab / hidden)
    return min(1 << max(0, math.ceil(math.log2(math.ceil(tokens / increase)))), tokens)


@functools.lru_cache(maxsize=1)
def _norm_function():
    import torch

    class RMSNorm(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, in_place=True):
            ctx.in_place = in_place
            x = x.contiguous()
            rows = x.view(-1, x.shape[-1])
            y = torch.empty_like(rows)
            rstd = torch.empty(rows.shape[0], dtype=torch.float32, device=x.device)
            ctx.save_for_backward(rows, weight, rstd)
            return y.view(x.shape)

        @staticmethod
        def backward(ctx, grad):
            grad = grad.contiguous()  # dX is written into it, or into zeros of its shape
            grad = grad if ctx.in_place else torch.zeros_like(grad)
            rows, weight, _ = ctx.saved_tensors
            grad_weight = None
            if ctx.needs_input_grad[1]:
                partial = torch.empty((SM_COUNT, rows.shape[1]), dtype=torch.float32, device=grad.device)
                grad_weight = partial.sum(dim=0).to(weight.dtype)
            return grad, grad_weight, None

    return RMSNorm


@functools.lru_cache(maxsize=1)
def _silu_mul_function():
    import torch

    class SiLUMul(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            a, b = a.contiguous(), b.contiguous()
            ctx.save_for_backward(a, b)
            return torch.empty_like(a)

        @staticmethod
        def backward(ctx, grad):
            grad.contiguous()
            a, b = ctx.saved_tensors
            return a, b  # written in place into the saved inputs

    return SiLUMul


@functools.lru_cache(maxsize=1)
def _rope_function():
    import torch

    class Rope(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, cos, sin):
            q, k = q.transpose(1, 2).contiguous(), k.transpose(1, 2).contiguous()
            ctx.save_for_backward(cos.contiguous(), sin.contiguous())
            return q.transpose(1, 2), k.transpose(1, 2)

        @staticmethod
        def backward(ctx, dq, dk):
            return dq.transpose(1, 2).contiguous().transpose(1, 2), dk.transpose(1, 2).contiguous().transpose(1, 2), \
                None, None

    return Rope


@functools.lru_cache(maxsize=1)
def _cross_entropy_function():
    import torch

    class FusedLinearCrossEntropy(torch.autograd.Function):
        @staticmethod
        def forward(ctx, hidden, weight, target):
            tokens, vocab = hidden.shape[0], weight.shape[0]
            chunk = flce_chunk_size(tokens, hidden.shape[1], vocab)
            grad_input = torch.zeros_like(hidden)
            grad_weight = torch.zeros_like(weight) if weight.requires_grad else None
            loss_rows = torch.zeros(tokens, dtype=torch.float32, device=hidden.device)
            mask = target != -100  # counted on the host (`.item()`), then dropped
            del mask
            # mm(out=) into one chunk buffer when the operands are autocast's dtype, else a new product per chunk
            autocast = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else hidden.dtype
            if hidden.dtype == weight.dtype == autocast:
                logits = torch.empty((chunk, vocab), dtype=hidden.dtype, device=hidden.device)
                del logits
            else:
                for _ in range(math.ceil(tokens / chunk)):
                    logits = torch.empty((min(chunk, tokens), vocab), dtype=autocast, device=hidden.device)
                    del logits
            ctx.save_for_backward(grad_input, *((grad_weight,) if grad_weight is not None else ()))
            return loss_rows.sum()

        @staticmethod
        def backward(ctx, grad):
            saved = ctx.saved_tensors  # scaled in place by the loss's gradient
            return saved[0], saved[1] if len(saved) > 1 else None, None

    return FusedLinearCrossEntropy


def _norm_forward(self, hidden_states, in_place: bool = True):
    return _norm_function().apply(hidden_states, self.weight, in_place)


def _swiglu_forward(self, x):
    """SwiGLU and GeGLU as Liger's MLPs run them (LigerGELUMulFunction allocates and saves as LigerSiLUMulFunction);
    Mixtral's v4 experts name their projections w1, w3, w2."""
    gate, up, down = (self.gate_proj, self.up_proj, self.down_proj) if hasattr(self, "gate_proj") else \
        (self.w1, self.w3, self.w2)
    return down(_silu_mul_function().apply(gate(x), up(x)))


def _swiglu_fused_forward(self, x):
    """LigerPhi3SwiGLUMLP: one gate-and-up projection, chunked (the halves made contiguous by the kernel's wrapper)."""
    gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
    return self.down_proj(_silu_mul_function().apply(gate, up))


@functools.lru_cache(maxsize=1)
def _relu_squared_function():
    import torch

    class ReLUSquared(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x = x.contiguous()
            ctx.save_for_backward(x)
            return torch.empty_like(x)

        @staticmethod
        def backward(ctx, grad):
            return torch.empty_like(grad.contiguous())

    return ReLUSquared


def _relu_squared_forward(self, x):
    return _relu_squared_function().apply(x)


_FORWARDS = {"swiglu": _swiglu_forward, "geglu": _swiglu_forward, "swiglu_fused": _swiglu_fused_forward,
             "relu_squared": _relu_squared_forward}


def _rope(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    return _rope_function().apply(q, k, cos, sin)


def _lce_forward(self, input_ids=None, attention_mask=None, labels=None, **kwargs):
    """The causal LM's forward as Liger's lce_forward trains it: no logits, the fused linear cross-entropy over the
    shifted labels (padded with -100, as LigerForCausalLMLoss shifts them)."""
    import torch
    from transformers.modeling_outputs import CausalLMOutputWithPast

    kwargs.pop("use_cache", None)
    hidden = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **kwargs)[0]
    shifted = torch.nn.functional.pad(labels, (0, 1), value=-100)[..., 1:].contiguous()
    loss = _cross_entropy_function().apply(hidden.reshape(-1, hidden.shape[-1]), self.lm_head.weight, shifted.view(-1))
    return CausalLMOutputWithPast(loss=loss)


@contextlib.contextmanager
def applied(model, model_type: str | None = None):
    """Liger's kernels on `model` where Liger's own patching of the instance puts them (planning.liger_patches), each
    a stand-in: a replaced layer's forward that of its kind, a replaced RoPE function ours, the model's forward
    Liger's fused loss where the trainer lets it; a replacement without a stand-in is undone (the model's own layer,
    an upper bound).
    Yields {name: kind} of what Liger replaced."""
    import types
    from unittest import mock

    from tunebench.planning.liger_patches import liger_applied

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    with liger_applied(base, fused_linear_cross_entropy_applied(), MODELLED) as replaced, \
            contextlib.ExitStack() as stack:
        for name, (kind, owner) in replaced.items():
            if kind == "rope":
                stack.enter_context(mock.patch.object(owner, name.rsplit(".", 1)[1], _rope))
            elif kind == "fused_linear_cross_entropy":
                owner.forward = types.MethodType(_lce_forward, owner)
            elif kind == "rms_norm":
                in_place = getattr(owner, "in_place", True) is not False
                owner.forward = types.MethodType(functools.partial(_norm_forward, in_place=in_place), owner)
            elif kind in _FORWARDS:
                owner.forward = types.MethodType(_FORWARDS[kind], owner)
        yield {name: kind for name, (kind, _) in replaced.items()}
