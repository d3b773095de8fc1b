"""The SFTTrainer the experiments run, with the per-step loss path chosen by `sft_loss`.

TRL's SFTTrainer.compute_loss computes, on every micro-batch, the loss through its chunked fused LM head plus
the entropy and top-1 accuracy over the full vocabulary, and reads four values back to the host (`.item()`),
which drains the device queue every micro-batch. That is a fine default for a training script and the wrong
one for a benchmark whose subject is the training step. `sft_loss: model` (tunebench's default) computes the
loss exactly as `transformers.Trainer.compute_loss` does — the model's own forward and loss, no extra
reductions, no host sync — so a harness step costs what a plain Trainer step costs; `sft_loss: trl` keeps
TRL's path and its `entropy` / `mean_token_accuracy` logs.

`loss_band_seed` k > 0 permutes the rows of every micro-batch (RowOrder): the same examples in the same steps,
the same padded shapes, the same arithmetic in another order (the weight gradients' sums over rows, the loss's
sum over tokens). Its trajectory differs from the baseline's by rounding alone: the band of "the same numerics"
that loss parity judges other settings by (tunebench.results.parity.band). With `loss_band_kind: last_bit` a band
run also moves every linear layer's output in the last bit (experiment.last_bit): the rounding a kernel that computes
the same math differently leaves in every token's arithmetic, which reordering rows does not.
"""

from __future__ import annotations

import logging
from typing import Any

from transformers import Trainer
from trl import SFTTrainer

logger = logging.getLogger(__name__)

SFT_LOSS_CHOICES = ("model", "trl")


class RowOrder:
    """A data collator whose micro-batches hold their rows in a seeded random order."""

    def __init__(self, collator, seed: int):
        import numpy as np

        self.collator = collator
        self.rng = np.random.default_rng(seed)

    def __call__(self, examples):
        order = self.rng.permutation(len(examples))
        return self.collator([examples[i] for i in order])


class BenchSFTTrainer(SFTTrainer):
    def __init__(self, *args, sft_loss: str = "model", loss_band_seed: int = 0, loss_band_kind: str = "rows",
                 **kwargs):
        if sft_loss not in SFT_LOSS_CHOICES:
            raise ValueError(f"sft_loss: {sft_loss!r} is not one of {SFT_LOSS_CHOICES}")
        self.sft_loss = sft_loss
        # (optimizer step, micro-batch loss as Trainer.training_step returns it), kept on the device: reading
        # each back would sync the host every micro-batch. Read once after training (step_losses()).
        self._micro_losses: list[tuple[int, Any]] = []
        super().__init__(*args, **kwargs)
        self.last_bit = None
        if loss_band_seed:
            self.data_collator = RowOrder(self.data_collator, loss_band_seed)
            if loss_band_kind == "last_bit":
                from tunebench.experiment.last_bit import LastBitNoise

                self.last_bit = LastBitNoise(self.model, loss_band_seed)

    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = super().training_step(model, inputs, num_items_in_batch)
        self._micro_losses.append((self.state.global_step + 1, loss.detach()))
        return loss

    def step_losses(self) -> dict[int, float]:
        """{optimizer step: its loss}, the sum of its micro-batches' returned losses: what the Trainer adds up
        for its logged `loss` (each already scaled by gradient accumulation). One device→host read."""
        import torch

        if not self._micro_losses:
            return {}
        values = torch.stack([loss.float().reshape(()) for _, loss in self._micro_losses]).tolist()
        per_step: dict[int, float] = {}
        for (step, _), value in zip(self._micro_losses, values, strict=True):
            per_step[step] = per_step.get(step, 0.0) + value
        return per_step

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self.sft_loss == "trl":
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        inputs["use_cache"] = False  # as TRL does: no KV cache is built during training
        return Trainer.compute_loss(self, model, inputs, return_outputs, num_items_in_batch)
