"""Token counts per optimizer step (padded, non-padding, Σ length², sequences), kept on the device until the end."""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

FIELDS = ("padded_tokens", "nonpad_tokens", "sum_squared_lengths", "sequences")


class TokenCounter:
    """Counts what each training forward receives, closed into one entry per optimizer step by `end_step()`.

    What the host already knows (tokens fed = numel, rows = batch size) stays a Python int; only what
    depends on the data (a padding mask's sums) is a device tensor, accumulated without a host sync until
    `per_step()` at the end of training, which also sums over ranks: token figures are global. (Making a
    device tensor from a Python number is a blocking host-to-device copy, i.e. a sync per forward.)
    """

    def __init__(self):
        self._host = [0, 0, 0, 0]  # of the open step, FIELDS order
        self._device = None  # device tensor [0, nonpad, sum_sq, sequences] of the open step, or None
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
        rows, length = (input_ids.shape[0], input_ids.shape[-1]) if input_ids.dim() > 1 else (1, input_ids.numel())
        self._host[0] += input_ids.numel()
        mask, positions = kwargs.get("attention_mask"), kwargs.get("position_ids")
        if mask is not None and mask.dim() == 2:
            lengths = mask.sum(-1)
            zero = lengths.sum() * 0
            measured = torch.stack([zero, lengths.sum(), (lengths.long() ** 2).sum(), (lengths > 0).sum()])
        elif positions is not None:
            # Packed rows restart positions at 0 for every sequence: Σ over a sequence of (2p + 1) = len², so
            # Σ length² needs no boundary search (which would force a device sync).
            flat = positions.reshape(-1).long()
            self._host[1] += flat.numel()
            measured = torch.stack([flat.sum() * 0, flat.sum() * 0, (2 * flat + 1).sum(), (flat == 0).sum()])
        else:
            self._host[1] += rows * length
            self._host[2] += rows * length**2
            self._host[3] += rows
            return
        measured = measured.long()
        self._device = measured if self._device is None else self._device + measured

    def end_step(self) -> None:
        """Close the optimizer step that just ended (an empty step counts zeros)."""
        self._steps.append((tuple(self._host), self._device))
        self._host, self._device = [0, 0, 0, 0], None

    def per_step(self) -> list[dict[str, int]]:
        """One dict per closed step (FIELDS), summed over all ranks when torch.distributed is up."""
        import torch
        import torch.distributed as dist

        device = next((d.device for _, d in self._steps if d is not None), None)
        if device is None:  # nothing on a device: use the backend's device for the rank sum
            on_nccl = dist.is_available() and dist.is_initialized() and dist.get_backend() == "nccl"
            device = torch.device("cuda", torch.cuda.current_device()) if on_nccl else torch.device("cpu")
        rows = [torch.tensor(host, dtype=torch.long) for host, _ in self._steps]
        table = torch.stack(rows).to(device) if rows else torch.zeros((0, len(FIELDS)), dtype=torch.long, device=device)
        for i, (_, measured) in enumerate(self._steps):
            if measured is not None:
                table[i] += measured
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(table)
        return [dict(zip(FIELDS, (int(x) for x in row), strict=True)) for row in table.tolist()]


def totals(steps: list[dict[str, int]]) -> dict[str, int]:
    """Field-wise sum over steps."""
    return {name: sum(step[name] for step in steps) for name in FIELDS}
