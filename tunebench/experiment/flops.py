"""Model and hardware FLOPs utilisation: analytic training FLOPs (and checkpoint recompute) ÷ time ÷ peak FLOP/s."""

from __future__ import annotations

import logging
import math

logger = logging.getLogger(__name__)

# Peak dense (no sparsity) tensor-core FLOP/s for bf16/fp16, from NVIDIA's datasheets. Matched by substring
# of torch.cuda.get_device_name(); the first match wins, so more specific names come first.
PEAK_DENSE_FLOPS: list[tuple[str, float]] = [
    ("H200", 989.4e12),
    ("H100 PCIe", 756.0e12),
    ("H100 NVL", 835.0e12),
    ("H100", 989.4e12),  # SXM
    ("H800", 989.4e12),
    ("GH200", 989.4e12),
    ("B200", 2250e12),
    ("A100", 312e12),
    ("A800", 312e12),
    ("L40S", 362.05e12),
    ("L40", 181.05e12),
    ("L4", 121e12),
    ("A10G", 70e12),
    ("A10", 125e12),
    ("V100", 125e12),
]


def peak_flops_for(device_name: str | None) -> float | None:
    if not device_name:
        return None
    for key, flops in PEAK_DENSE_FLOPS:
        if key in device_name:
            return flops
    return None


def routed_fraction(config) -> float | None:
    """The share of a mixture-of-experts layer's experts a token goes through (experts per token ÷ experts), for
    the config names the families use (num_local_experts, num_experts, n_routed_experts); None without experts."""
    experts = (getattr(config, "num_local_experts", None) or getattr(config, "num_experts", None)
               or getattr(config, "n_routed_experts", None))
    if not experts:
        return None
    return getattr(config, "num_experts_per_tok", experts) / experts


def logical_numel(param) -> int:
    """The weight's elements as the matmul uses them: a 4-bit packed weight stores two in a byte (its numel is
    half), its QuantState keeps the original shape; every other parameter (8-bit too) is its numel."""
    shape = getattr(getattr(param, "quant_state", None), "shape", None)
    return math.prod(shape) if shape is not None else param.numel()


def _per_token(name: str, param, fraction: float | None) -> float:
    """A parameter's matmul work per token: routed experts (`.experts.` in its name) count at their routed share;
    shared experts and the router count whole."""
    count = logical_numel(param)
    return count * fraction if fraction is not None and ".experts." in f".{name}" else count


def matmul_parameter_counts(model) -> tuple[int, int]:
    """(params that take part in matmuls per token, of which trainable), MoE counted at its routed experts.

    The input embedding is a lookup, not a matmul, so it is excluded unless tied to the output head.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = base.config
    embedding = base.get_input_embeddings() if hasattr(base, "get_input_embeddings") else None
    embedding_ids = {id(p) for p in embedding.parameters()} if embedding is not None else set()
    tied = bool(getattr(config, "tie_word_embeddings", False))
    fraction = routed_fraction(config)
    total = trainable = 0.0
    seen: set[int] = set()
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in seen:
            continue
        seen.add(id(param))
        if id(param) in embedding_ids and not tied:
            continue
        count = _per_token(name, param, fraction)
        total += count
        if param.requires_grad:
            trainable += count
    return int(total), int(trainable)


def training_flops(model, nonpad_tokens: int, sum_squared_lengths: int) -> float:
    """Model FLOPs of training on these tokens (recompute under checkpointing is not model work).

    Matmuls: forward 2·N per token, backward 2·N for activation gradients + 2·N_trainable for weight
    gradients, so 6·N for full fine-tuning and 4·N + 2·N_trainable with frozen weights (LoRA).
    Attention scores and context (PaLM appendix B convention, no causal discount): forward 4·L·d per
    token-pair, backward twice that, i.e. 12·L·d·len² per sequence.
    """
    total, trainable = matmul_parameter_counts(model)
    layers, attention_width = _attention_shape(model)
    matmul = (4 * total + 2 * trainable) * nonpad_tokens
    attention = 12 * layers * attention_width * sum_squared_lengths
    return float(matmul + attention)


def _attention_shape(model) -> tuple[int, int]:
    """(layers, heads × head_dim) of the attention, from the model's config."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = base.config
    layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", 0)
    heads = getattr(config, "num_attention_heads", None) or getattr(config, "n_head", 0)
    hidden = getattr(config, "hidden_size", None) or getattr(config, "n_embd", 0)
    return layers, (getattr(config, "head_dim", None) or hidden // max(heads, 1)) * heads


def checkpointed_layers(model) -> list:
    """Modules whose forward is recomputed in backward: transformers' gradient-checkpointed layers and FSDP's
    activation-checkpoint wrappers. transformers also sets `gradient_checkpointing = True` on the model that
    holds those layers, so only the innermost flagged modules count."""

    def flagged(module) -> bool:
        return getattr(module, "gradient_checkpointing", False) is True or type(module).__name__ == "CheckpointWrapper"

    return [m for m in model.modules()
            if flagged(m) and not any(flagged(inner) for inner in m.modules() if inner is not m)]


def recompute_flops(model, nonpad_tokens: int, sum_squared_lengths: int) -> float:
    """Extra hardware FLOPs of gradient checkpointing: the checkpointed layers' forward again (2·N_ckpt per
    token for their matmuls, MoE experts at their routed share as in the model FLOPs; 4·d·len² per sequence and
    layer for attention). HFU counts these, MFU does not."""
    layers = checkpointed_layers(model)
    if not layers:
        return 0.0
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    fraction = routed_fraction(base.config)
    params = sum(_per_token(name, p, fraction) for layer in layers for name, p in layer.named_parameters())
    _, width = _attention_shape(model)
    return float(2 * params * nonpad_tokens + 4 * len(layers) * width * sum_squared_lengths)


def utilisation_problem(mfu_value: float | None, hfu_value: float | None) -> str | None:
    """Why an MFU/HFU pair cannot be right, or None. HFU adds only the recomputed forward, which is at most half
    the model FLOPs (a forward is 2 of the 4-6 FLOPs per parameter and token), so HFU/MFU <= 1.5."""
    if mfu_value is None or hfu_value is None:
        return None
    if hfu_value > 1.0:
        return f"HFU {100 * hfu_value:.1f} % exceeds 100 % (a wrong peak FLOP/s for this GPU, or miscounted FLOPs)"
    if mfu_value > hfu_value * (1 + 1e-9):
        return f"MFU {100 * mfu_value:.1f} % exceeds HFU {100 * hfu_value:.1f} %"
    if mfu_value > 0 and hfu_value / mfu_value > 1.5 + 1e-3:
        return (f"HFU/MFU = {hfu_value / mfu_value:.2f} exceeds 1.5, the most recompute can add (miscounted "
                "recompute FLOPs)")
    return None


def mfu(total_flops: float, seconds: float, num_devices: int, device_name: str | None) -> float | None:
    peak = peak_flops_for(device_name)
    if not peak or seconds <= 0 or num_devices <= 0:
        return None
    return total_flops / seconds / (peak * num_devices)
