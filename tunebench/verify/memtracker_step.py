"""torch's MemTracker over exactly one optimizer step of a Trainer run: the independent oracle for the scanner.

MemTracker hooks every tensor creation through a dispatch mode, so its step is far slower than a real one: it
is run on the same step as the scanner's memory scan (one peak instant for both), never on a timed step.
"""

from __future__ import annotations

import logging

from transformers import TrainerCallback

logger = logging.getLogger(__name__)

CATEGORY_MAP = {  # scanner column -> MemTracker reference types
    "scan_mem_params": ("Parameter",),
    "scan_mem_buffers": ("Buffer",),
    "scan_mem_grads": ("Gradient",),
    "scan_mem_optimizer": ("Optstate",),
    "scan_mem_activations": ("Activation",),
    "scan_mem_temporaries": ("Temp", "Other"),
}


class _NoHandle:
    def remove(self) -> None:
        pass


def ignore_frozen_parameters(tracker, model) -> None:
    """Let MemTracker enter over a model with frozen weights (LoRA, prompt tuning): it registers a gradient hook
    on every parameter, which a parameter without requires_grad refuses; give those a handle that does nothing."""
    for p in model.parameters():
        if not p.requires_grad:
            tracker._param_to_grad_hook_handles[p] = (_NoHandle(), _NoHandle())


class MemTrackerStep(TrainerCallback):
    """Enter MemTracker at the end of step `step - 1`, leave at the end of `step`; `peak` holds its snapshot."""

    def __init__(self, step: int):
        self.step = step
        self.tracker = None
        self.peak: dict[str, int] | None = None

    def _enter(self, model, optimizer) -> None:
        from torch.distributed._tools.mem_tracker import MemTracker

        from scanner.record import unwrap_optimizer

        self.tracker = MemTracker()
        ignore_frozen_parameters(self.tracker, model)
        self.tracker.track_external(model, unwrap_optimizer(optimizer))
        self.tracker.__enter__()

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        if self.step == 1:
            self._enter(model, optimizer)

    def on_substep_end(self, args, state, control, **kwargs):
        if self.tracker is not None:
            self.tracker.reset_mod_stats()  # the same modules run again in the next micro-batch

    def on_step_end(self, args, state, control, model=None, optimizer=None, **kwargs):
        if state.global_step == self.step - 1 and self.tracker is None:
            self._enter(model, optimizer)
        elif state.global_step == self.step and self.tracker is not None:
            self.tracker.__exit__(None, None, None)
            snapshot = self.tracker.get_tracker_snapshot("peak")
            device = next(iter(snapshot)) if snapshot else None
            self.peak = {getattr(k, "value", str(k)): int(v) for k, v in (snapshot[device] if device else {}).items()}
            self.tracker = None


def compare(scan: dict, peak: dict[str, int], cuda: bool) -> list[dict]:
    """One row per category the scanner measured here: scanner, MemTracker, relative difference.

    On CPU there is no allocator peak: the scanner reports each category's maximum over the step, MemTracker
    its value at its own peak. Gradients (all of them at the step's end, none at a forward peak) are then not
    the same quantity and are compared on CUDA only.
    """
    rows = []
    for column, refs in CATEGORY_MAP.items():
        measured = scan.get(column)
        if measured is None or (column == "scan_mem_grads" and not cuda):
            continue
        reference = sum(peak.get(r, 0) for r in refs)
        diff = (measured - reference) / reference if reference else (0.0 if measured == 0 else None)
        rows.append({"category": column.removeprefix("scan_mem_"), "scanner_bytes": measured,
                     "memtracker_bytes": reference, "difference": diff})
    return rows
