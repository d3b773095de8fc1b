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
How TRL's SFTTrainer applies them decides which run: TRL 1.x applies Liger with `fused_linear_cross_entropy`
False (its own fused LM head replaces the model's forward), so the harness's loss is the model's own and the logits
are materialised (H100, TRL 1.16: the Liger rows' temporaries equal the baseline's, 8.41 GB on the 1B). The model
types modelled are those Liger patches the llama way; another Liger model type is planned eagerly with a note.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import math

logger = logging.getLogger(__name__)

LIGER_VERSION = "0.8.5"
# Liger's apply_liger_kernel_to_<type> of these types: the module's apply_rotary_pos_emb, every <Type>RMSNorm and
# every <Type>MLP (gated SiLU) replaced; cross-entropy left alone unless the fused linear one is asked for.
LLAMA_LIKE = ("llama", "mistral", "ministral", "qwen2", "qwen3", "smollm3")
SM_COUNT = 132  # the partial dW's rows: the GPU's SMs (H100 SXM); 132 × hidden × 4 B, a transient of backward


def modelled(model_type: str | None) -> bool:
    return model_type in LLAMA_LIKE


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
        def forward(ctx, x, weight):
            x = x.contiguous()
            rows = x.view(-1, x.shape[-1])
            y = torch.empty_like(rows)
            rstd = torch.empty(rows.shape[0], dtype=torch.float32, device=x.device)
            ctx.save_for_backward(rows, weight, rstd)
            return y.view(x.shape)

        @staticmethod
        def backward(ctx, grad):
            grad = grad.contiguous()  # dX is written into it
            rows, weight, _ = ctx.saved_tensors
            grad_weight = None
            if ctx.needs_input_grad[1]:
                partial = torch.empty((SM_COUNT, rows.shape[1]), dtype=torch.float32, device=grad.device)
                grad_weight = partial.sum(dim=0).to(weight.dtype)
            return grad, grad_weight

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


def _norm_forward(self, hidden_states):
    return _norm_function().apply(hidden_states, self.weight)


def _swiglu_forward(self, x):
    return self.down_proj(_silu_mul_function().apply(self.gate_proj(x), self.up_proj(x)))


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
def applied(model, model_type: str):
    """Liger's kernels on `model` (its norms and MLPs, and its loss where the trainer lets Liger replace the
    forward) and its family's RoPE, while the step runs."""
    import types
    from unittest import mock

    module = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    if fused_linear_cross_entropy_applied():
        causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
        causal_lm.forward = types.MethodType(_lce_forward, causal_lm)
    for sub in model.modules():
        name = type(sub).__name__
        if name.endswith("RMSNorm") and type(sub).__module__ == module.__name__:
            sub.forward = types.MethodType(_norm_forward, sub)
        elif name.endswith("MLP") and type(sub).__module__ == module.__name__:
            sub.forward = types.MethodType(_swiglu_forward, sub)
    with mock.patch.object(module, "apply_rotary_pos_emb", _rope):
        yield
