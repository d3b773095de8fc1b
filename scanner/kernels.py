"""Which attention kernel a step really ran, read from the profiler's operator names.

`attn_implementation="sdpa"` only says PyTorch's scaled_dot_product_attention is called; the dispatcher then
picks a backend per call (flash, memory-efficient, cuDNN, or the unfused math path), and a padding mask or
an unsupported shape moves it off the fastest one without a word. The profiler records the backend's own
operator for every call, so the step's backend is known from what ran rather than from what was asked.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable

logger = logging.getLogger(__name__)

# Operator name prefix → backend, first match wins. Forward operators only: each call has exactly one.
_FORWARD_OPS = (
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "flash"),
    ("aten::_scaled_dot_product_flash_attention", "flash"),
    ("aten::_scaled_dot_product_efficient_attention", "efficient"),
    ("aten::_scaled_dot_product_cudnn_attention", "cudnn"),
    ("aten::_scaled_dot_product_fused_attention_overrideable", "fused"),
    ("aten::_scaled_dot_product_attention_math", "math"),
    ("flash_attn::_flash_attn_forward", "flash_attention_2"),
    ("flash_attn::_flash_attn_varlen_forward", "flash_attention_2"),
    ("flash_attn_3::", "flash_attention_3"),
)


def backend_of(op_name: str) -> str | None:
    if "backward" in op_name:
        return None
    return next((backend for prefix, backend in _FORWARD_OPS if op_name.startswith(prefix)), None)


def attention_summary(op_names: Iterable[str]) -> dict:
    """{"backend": "flash" | "efficient" | ... | "math+flash" (mixed) | "none", "calls": n, "by_backend": {..}}.

    "none" means no fused attention operator ran: eager attention (matmul + softmax) or a model without
    attention. `op_names` holds one entry per operator call (CPU-side profiler events).
    """
    counts = Counter(b for b in map(backend_of, op_names) if b is not None)
    backend = "+".join(sorted(counts)) if counts else "none"
    return {"backend": backend, "calls": sum(counts.values()), "by_backend": dict(sorted(counts.items()))}
