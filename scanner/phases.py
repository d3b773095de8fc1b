"""Phase marks of a training step (forward, backward, clip, optimizer) and its token counts, from light hooks.

`PhaseProbe` alone times a step with a handful of hooks: the model's forward pre/post hooks, a gradient hook
on the loss (backward start), an autograd end-of-backward callback and the optimizer's step pre/post hooks.
Each boundary records a clock mark (a CUDA event or `perf_counter_ns`), nothing else: no host sync, no
memory reading. `scanner.memory_probe.MemoryProbe` extends it with the memory hooks of a scanned step.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import torch

from .clock import make_clock
from .record import StepRecord, model_device, unwrap_optimizer

logger = logging.getLogger(__name__)

# Phase labels. "after_backward" becomes "clip" when the next boundary is the optimizer step (clipping +
# on_pre_optimizer_step callbacks) and "other" otherwise.
OTHER, FORWARD, BACKWARD, AFTER_BACKWARD, CLIP, OPTIMIZER = (
    "other",
    "forward",
    "backward",
    "after_backward",
    "clip",
    "optimizer",
)


class PhaseProbe:
    """Installs the phase hooks in `__init__` and removes all of them in `remove()`."""

    aborted = False

    def __init__(self, model: torch.nn.Module, optimizer: Any):
        self.on_abort = None  # called after the hooks were removed because a forward raised
        self.listener = None  # called with (boundary, phase entered) after each boundary (the kernel split's marker)
        self.model = model
        self.optimizer = unwrap_optimizer(optimizer)
        self.device = model_device(model)
        self.clock = make_clock(self.device)
        self._handles: list = []
        self._rec: StepRecord | None = None
        self._phase = OTHER
        self._fwd_depth = 0
        self._pending_fwd = 0
        self._bwd_open = False

    # ---------------------------------------------------------------- install / remove
    def install(self) -> None:
        m = self.model
        self._handles.append(m.register_forward_pre_hook(self._fwd_pre, with_kwargs=True))
        self._handles.append(m.register_forward_hook(self._fwd_post, always_call=True))
        if self.optimizer is not None:
            self._handles.append(self.optimizer.register_step_pre_hook(self._opt_pre))
            self._handles.append(self.optimizer.register_step_post_hook(self._opt_post))

    def remove(self) -> None:
        """Remove every hook; idempotent, safe mid-step (used on errors and at train end)."""
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._rec = None

    @property
    def installed(self) -> bool:
        return bool(self._handles)

    @property
    def open_record(self) -> StepRecord | None:
        return self._rec

    # ---------------------------------------------------------------- step boundaries
    def begin_step(self, step: int, start_mark: Any = None) -> None:
        """Open the record of `step`; its window starts at `start_mark` (default: now)."""
        self._rec = StepRecord(step=step, start=start_mark if start_mark is not None else self.clock.mark())
        self._cross("step_start", OTHER)

    def restart(self, start_mark: Any) -> None:
        """Move the window start of the open record (e.g. to on_epoch_begin), keeping nothing else."""
        if self._rec is not None:
            self.begin_step(self._rec.step, start_mark)

    def end_step(self) -> tuple[StepRecord, Any]:
        """Close the open record; returns it and the end mark (the next step's window start)."""
        rec = self._rec
        rec.end = self.clock.mark()
        # zero_grad, scheduler, callbacks (or a skipped optimizer step) are "other"
        self._cross("step_end", OTHER)
        self._rec = None
        return rec, rec.end

    def _cross(self, name: str, next_phase: str | None = None, then=None) -> None:
        """Every phase boundary goes through here: the boundary itself, then the listener, if any."""
        self._boundary(name, next_phase, then)
        if self.listener is not None and self._rec is not None:
            self.listener(name, self._phase)

    def _boundary(self, name: str, next_phase: str | None = None, then=None) -> None:
        """A phase boundary: apply `then` (changes belonging to the next interval) and enter `next_phase`.

        The memory probe overrides this to sample or tag the allocator at every boundary.
        """
        if then is not None:
            then()
        if next_phase is not None:
            self._phase = next_phase

    # ---------------------------------------------------------------- forward
    def _enter_forward(self) -> None:
        """Called once the outermost training forward has started (memory probe: saved-tensor hooks)."""

    def _exit_forward(self) -> None:
        """Called when the outermost training forward returns or raises."""

    def _fwd_pre(self, module, args, kwargs):
        if self._rec is None or not module.training or not torch.is_grad_enabled():
            return None
        self._fwd_depth += 1
        if self._fwd_depth > 1:  # the model re-entered itself; only the outermost call is a phase
            return None
        self._count_tokens(args, kwargs)
        if self._phase == AFTER_BACKWARD:
            self._phase = OTHER  # between micro-batches: the interval is not clipping
        self._cross("forward_start", FORWARD)
        self._rec.forward.append([self.clock.mark(), None])
        self._enter_forward()
        return None

    def _fwd_post(self, module, args, output):
        if self._fwd_depth == 0:
            return None
        self._fwd_depth -= 1
        if self._fwd_depth > 0:
            return None
        self._exit_forward()
        if sys.exc_info()[1] is not None:
            # forward raised: this hook runs inside torch's except-block; drop everything now, because no
            # callback will ever tell us the step died.
            logger.warning("scanner: forward raised during a scanned step; hooks removed, no report")
            self.aborted = True
            self.remove()
            if self.on_abort is not None:
                self.on_abort()
            return None
        rec = self._rec
        rec.forward[-1][1] = self.clock.mark()
        self._cross("forward_end", OTHER)  # a loss computed outside the model's forward is "other"
        rec.micro_batches += 1
        self._pending_fwd += 1
        for target in self._grad_targets(output):
            self._handles.append(target.register_hook(self._on_output_grad))
        return None

    @staticmethod
    def _grad_targets(output) -> list[torch.Tensor]:
        """The outputs a loss can be built from: `loss` and every other tensor output that requires grad.

        The loss may be computed outside the model from another output (TRL's fused LM head returns per-token
        log-probabilities), so backward starts at whichever of them first receives a gradient.
        """
        values = list(output.values()) if hasattr(output, "values") else output
        if isinstance(values, torch.Tensor):
            values = [values]
        candidates = [getattr(output, "loss", None), *(values if isinstance(values, (list, tuple)) else [])]
        seen, targets = set(), []
        for v in candidates:
            if isinstance(v, torch.Tensor) and v.requires_grad and id(v) not in seen:
                seen.add(id(v))
                targets.append(v)
        return targets

    def _count_tokens(self, args, kwargs) -> None:
        rec = self._rec
        ids = kwargs.get("input_ids")
        if ids is None and args and isinstance(args[0], torch.Tensor):
            ids = args[0]
        if isinstance(ids, torch.Tensor):
            shape = ids.shape
        else:
            embeds = kwargs.get("inputs_embeds")
            if not isinstance(embeds, torch.Tensor):
                return
            shape = embeds.shape[:-1]
        n = shape.numel()
        rec.tokens += n
        mask = kwargs.get("attention_mask")
        if isinstance(mask, torch.Tensor) and mask.dim() == 2 and mask.shape == shape:
            count = (mask != 0).sum()
            if count.is_cuda:
                # Copied to pinned host memory behind the step's work: readable without a sync once the device
                # has passed the step's end mark (a plain .item() later would wait for the whole queue).
                host = torch.empty((), dtype=count.dtype, pin_memory=True)
                host.copy_(count, non_blocking=True)
                count = host
            rec.nonpad.append(count)
        else:
            # no 2-D padding mask (packed / padding-free batches carry position_ids only): all tokens are real
            rec.nonpad.append(n)

    # ---------------------------------------------------------------- backward
    def _on_output_grad(self, grad):
        if self._pending_fwd and not self._bwd_open and self._rec is not None:
            self._on_backward_start()
        return None

    def _on_backward_start(self) -> None:
        self._cross("backward_start", BACKWARD)
        self._bwd_open = True
        self._pending_fwd = 0
        self._rec.backward.append([self.clock.mark(), None])
        torch.autograd.Variable._execution_engine.queue_callback(self._on_backward_end)

    def _on_backward_end(self) -> None:
        rec = self._rec
        self._bwd_open = False
        if rec is None:
            return
        rec.backward[-1][1] = rec.clip_start = self.clock.mark()
        self._cross("backward_end", AFTER_BACKWARD, then=self._after_backward)

    def _after_backward(self) -> None:
        """Changes that belong to the interval after a backward (memory probe: recompute bookkeeping)."""

    # ---------------------------------------------------------------- optimizer
    def _opt_pre(self, optimizer, args, kwargs):
        rec = self._rec
        if rec is None:
            return
        if self._phase == AFTER_BACKWARD:
            self._phase = CLIP
        else:
            rec.clip_start = None  # no backward right before: nothing to call clipping
        self._cross("optimizer_start", OPTIMIZER)
        rec.optimizer.append([self.clock.mark(), None])

    def _opt_post(self, optimizer, args, kwargs):
        rec = self._rec
        if rec is None or not rec.optimizer:
            return
        rec.optimizer[-1][1] = self.clock.mark()
        self._cross("optimizer_end", OTHER, then=self._after_optimizer)

    def _after_optimizer(self) -> None:
        """Changes that belong to the interval after the optimizer step (memory probe: optimizer bytes)."""
