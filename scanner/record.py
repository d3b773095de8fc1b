"""Plain records and small helpers of a scan: the raw observations of one step, and model/optimizer lookups."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


def unwrap_optimizer(optimizer: Any) -> torch.optim.Optimizer | None:
    """The real torch optimizer behind accelerate's AcceleratedOptimizer (or similar wrappers).

    AcceleratedOptimizer subclasses torch.optim.Optimizer without initialising it, so follow `.optimizer`
    as long as there is one rather than stopping at the first Optimizer instance.
    """
    for _ in range(8):
        inner = getattr(optimizer, "optimizer", None)
        if inner is None or inner is optimizer:
            break
        optimizer = inner
    return optimizer if isinstance(optimizer, torch.optim.Optimizer) else None


def model_device(model: torch.nn.Module) -> torch.device:
    for p in model.parameters():
        if p.device.type != "meta":
            return p.device
    return torch.device("cpu")


@dataclass
class StepRecord:
    """Raw observations of one step; clock marks are resolved into seconds after the single sync."""

    step: int
    start: Any
    end: Any = None
    forward: list = field(default_factory=list)  # [start_mark, end_mark] per top-level forward
    backward: list = field(default_factory=list)  # [start_mark, end_mark] per backward pass
    optimizer: list = field(default_factory=list)  # [start_mark, end_mark] per optimizer.step()
    clip_start: Any = None  # end of the last backward before the optimizer step
    micro_batches: int = 0
    tokens: int = 0
    nonpad: list = field(default_factory=list)  # ints or 0-dim device tensors (summed lazily: no sync)
    peak: int = -1
    peak_phase: str | None = None
    peak_activations: int = 0
    peak_grads: int = 0
    peak_optimizer: int = 0
    phase_peaks: dict = field(default_factory=dict)
    peak_reserved: int = 0
    activations_max: int = 0
    grads_end: int = 0
    optimizer_bytes: int = 0
    boundaries: list = field(default_factory=list)
    stats_start: dict | None = None
    other_start: int | None = None  # allocated at step start that is none of the categories (CUDA)
    stats_end: dict | None = None
    peak_tails: int = 0  # bytes of blocks beyond their requests at the peak (CUDA without expandable segments)
    start_tails: int = 0  # the same at step start (part of allocated then, none of the categories)
    first_tag: int = -1  # allocator-history tags of the step (trace mode): first..end_tag
    end_tag: int = -1


def flat_tensors(args, kwargs):
    """Tensors among a call's arguments, one level into tuples and lists."""
    for v in (*args, *kwargs.values()):
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (tuple, list)):
            yield from (x for x in v if isinstance(x, torch.Tensor))
