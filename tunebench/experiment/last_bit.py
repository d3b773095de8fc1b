"""A loss-band run's rounding noise in every token's arithmetic: each linear layer's output moved by one unit in the
last place, up or down, on a seeded random half of its elements.

Why: reordering a micro-batch's rows (trainer.RowOrder) changes only the sums over rows (weight gradients, the
loss), so every token's own activations stay bitwise the same. A kernel that computes the same math with other
rounding (Liger's fused RMSNorm, SwiGLU and RoPE; another matmul tiling) moves every token's activations in the last
bit instead, and in float32 that grows past a rows-only band (H100, llama-3.1-8b LoRA: Liger 10.5 x it,
docs/evidence/loss-parity-h100.md). A band run with `loss_band_kind: last_bit` injects that rounding itself. The
gradient passes through unchanged (the move is a constant added to the output).
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

KINDS = ("rows", "last_bit")


class LastBitNoise:
    """Forward hooks on every `torch.nn.Linear` of `model` (LoRA's, quantized ones and the LM head included)."""

    def __init__(self, model, seed: int):
        import torch

        self.seed = seed
        self.generators: dict = {}
        self.handles = [module.register_forward_hook(self._moved) for module in model.modules()
                        if isinstance(module, torch.nn.Linear)]
        logger.info("loss band: the last bit of %d linear layers' outputs moved at random (seed %d)",
                    len(self.handles), seed)

    def _generator(self, device):
        import torch

        key = str(device)
        if key not in self.generators:
            self.generators[key] = torch.Generator(device=device).manual_seed(self.seed)
        return self.generators[key]

    def _moved(self, module, args, output):
        import torch

        if not isinstance(output, torch.Tensor) or not output.is_floating_point():
            return None
        with torch.no_grad():
            draw = torch.randint(0, 4, output.shape, generator=self._generator(output.device), device=output.device,
                                 dtype=torch.uint8)
            value = output.detach()
            toward = torch.where(draw == 0, float("-inf"), float("inf")).to(value.dtype)
            moved = torch.where(draw < 2, torch.nextafter(value, toward), value)
            delta = moved - value
        return output + delta

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []
