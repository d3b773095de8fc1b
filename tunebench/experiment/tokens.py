"""Token counts per optimizer step (padded, non-padding, Σ length², sequences), kept on the device until the end."""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

FIELDS = ("padded_tokens", "nonpad_tokens", "sum_squared_lengths", "sequences")


class TokenCounter:
    """Counts what each training forward receives, closed into one entry per optimizer step by `end_step()`.

    Everything stays a device tensor (no host sync) until `per_step()` at the end of training, which also sums
    over ranks: token figures are global, never a per-rank mean.
    """

    def __init__(self):
        self._current = None  # tensor [padded, nonpad, sum_sq, sequences] of the open step
        self._steps: list = []
        self._handle = None

    def attach(self, module) -> None:
        self._handle = module.register_forward_pre_hook(self._hook, with_kwargs=True)

    def detach(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def _hook(self, module, args, kwargs):
        import torch

        if not (module.training and torch.is_grad_enabled()):
            return
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        if input_ids is None:
            return
        mask, positions = kwargs.get("attention_mask"), kwargs.get("position_ids")
        if mask is not None and mask.dim() == 2:
            lengths = mask.sum(-1)
            nonpad, sum_sq, sequences = lengths.sum(), (lengths.long() ** 2).sum(), lengths.new_tensor(lengths.numel())
        elif positions is not None:
            # Packed rows restart positions at 0 for every sequence: Σ over a sequence of (2p + 1) = len², so
            # Σ length² needs no boundary search (which would force a device sync).
            flat = positions.reshape(-1).long()
            nonpad, sum_sq, sequences = flat.new_tensor(flat.numel()), (2 * flat + 1).sum(), (flat == 0).sum()
        else:
            nonpad = input_ids.new_tensor(input_ids.numel())
            sum_sq = input_ids.new_tensor(input_ids.shape[0] * input_ids.shape[-1] ** 2)
            sequences = input_ids.new_tensor(input_ids.shape[0])
        step = torch.stack([input_ids.new_tensor(input_ids.numel()), nonpad.long(), sum_sq.long(), sequences.long()])
        self._current = step if self._current is None else self._current + step

    def end_step(self) -> None:
        """Close the optimizer step that just ended (an empty step counts zeros)."""
        self._steps.append(self._current)
        self._current = None

    def per_step(self) -> list[dict[str, int]]:
        """One dict per closed step (FIELDS), summed over all ranks when torch.distributed is up."""
        import torch
        import torch.distributed as dist

        device = next((t.device for t in self._steps if t is not None), torch.device("cpu"))
        rows = [t if t is not None else torch.zeros(len(FIELDS), dtype=torch.long, device=device) for t in self._steps]
        table = torch.stack(rows) if rows else torch.zeros((0, len(FIELDS)), dtype=torch.long, device=device)
        if dist.is_available() and dist.is_initialized():
            table = table.clone()
            dist.all_reduce(table)
        return [dict(zip(FIELDS, (int(x) for x in row), strict=True)) for row in table.tolist()]


def totals(steps: list[dict[str, int]]) -> dict[str, int]:
    """Field-wise sum over steps."""
    return {name: sum(step[name] for step in steps) for name in FIELDS}
