"""torch's MemTracker over exactly one optimizer step of a Trainer run: the independent oracle for the scanner.

MemTracker hooks every tensor creation through a dispatch mode, so its step is far slower than a real one: it
is run on the same step as the scanner's memory scan (one peak instant for both), never on a timed step.
On CUDA the peak MemTracker measures is also split by the scanner's rules (planning.peak_rules: what holds a
tensor, not when it was made): MemTracker's own split files a forward tensor that is alive but not saved (the
logits) as an activation, the scanner as a temporary, which is a difference of definition, not of measurement.
"""

from __future__ import annotations

import logging

from transformers import TrainerCallback

from tunebench.planning.peak_rules import MEMTRACKER_TYPES, ignore_frozen_parameters

logger = logging.getLogger(__name__)

# scanner column -> MemTracker reference types (the scanner's categories, as MemTracker names what it tracks)
CATEGORY_MAP = {f"scan_mem_{category}": types for category, types in MEMTRACKER_TYPES.items()}


class MemTrackerStep(TrainerCallback):
    """Enter MemTracker at the end of step `step - 1`, leave at the end of `step`; `peak` holds its snapshot."""

    def __init__(self, step: int, split_by_holder: bool = False):
        self.step = step
        self.split_by_holder = split_by_holder
        self.tracker = None
        self.peak: dict[str, int] | None = None
        self.split: dict[str, int] | None = None  # activations, grads at the peak by the scanner's rules
        self._rules = self._meter = self._forward = None
        self._handles: list = []

    def _enter(self, model, optimizer) -> None:
        from torch.distributed._tools.mem_tracker import MemTracker

        from scanner.record import unwrap_optimizer
        from tunebench.planning.peak_rules import observed_tracker

        self.tracker = observed_tracker(MemTracker)()
        ignore_frozen_parameters(self.tracker, model)
        self.tracker.track_external(model, unwrap_optimizer(optimizer))
        if self.split_by_holder:
            self._follow_holders(model)
        self.tracker.__enter__()

    def _follow_holders(self, model) -> None:
        """Feed the scanner's rules from this step: saved tensors and checkpoint inputs during each forward,
        gradients as they accumulate, MemTracker's running total after every op."""
        from tunebench.planning.peak_rules import SavedTensorMeter, ScannerRules, tracked_total

        rules = ScannerRules(lambda: tracked_total(self.tracker), block=512)
        self.tracker.after_op = rules.after_op
        meter = SavedTensorMeter(model, rules, block=512)
        trainable = [p for p in model.parameters() if p.requires_grad]
        rules.count_existing_grads(trainable)

        def forward_begins(module, args):
            if rules.backward_open:
                rules.end_backward()  # the previous micro-batch's backward is over
            self._forward = meter.hooks()
            self._forward.__enter__()

        def forward_ends(module, args, output):
            if self._forward is not None:
                self._forward.__exit__(None, None, None)
                self._forward = None
            rules.backward_open = True

        self._handles = [model.register_forward_pre_hook(forward_begins), model.register_forward_hook(forward_ends)]
        self._handles += [p.register_post_accumulate_grad_hook(rules.grad_hook) for p in trainable]
        self._rules, self._meter = rules, meter

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if self._rules is not None and self._rules.backward_open:
            self._rules.end_backward()

    def _leave_holders(self) -> None:
        rules, self._rules = self._rules, None
        if rules is None:
            return
        rules.finish()
        self._meter.remove()
        for handle in self._handles:
            handle.remove()
        if rules.ops:
            self.split = {"activations": rules.best_state[0], "grads": rules.best_state[1], "peak": rules.best}

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
            self._leave_holders()
            self.tracker.__exit__(None, None, None)
            snapshot = self.tracker.get_tracker_snapshot("peak")
            device = next(iter(snapshot)) if snapshot else None
            self.peak = {getattr(k, "value", str(k)): int(v) for k, v in (snapshot[device] if device else {}).items()}
            self.tracker = None


def compare(scan: dict, peak: dict[str, int], cuda: bool, split: dict[str, int] | None = None) -> list[dict]:
    """One row per category the scanner measured here: scanner, MemTracker, relative difference.

    On CPU there is no allocator peak: the scanner reports each category's maximum over the step, MemTracker
    its value at its own peak. Gradients (all of them at the step's end, none at a forward peak) are then not
    the same quantity and are compared on CUDA only. With `split` (MemTracker's peak split by the scanner's
    rules), activations, gradients and temporaries are that split of MemTracker's bytes.
    """
    by_holder = {}
    if split is not None:
        named = sum(peak.get(r, 0) for r in ("Parameter", "Buffer", "Optstate"))
        by_holder = {
            "scan_mem_activations": split["activations"],
            "scan_mem_grads": split["grads"],
            "scan_mem_temporaries": max(0, peak.get("Total", 0) - named - split["activations"] - split["grads"]),
        }
    rows = []
    for column, refs in CATEGORY_MAP.items():
        measured = scan.get(column)
        if measured is None or (column == "scan_mem_grads" and not cuda):
            continue
        reference = by_holder.get(column, sum(peak.get(r, 0) for r in refs))
        diff = (measured - reference) / reference if reference else (0.0 if measured == 0 else None)
        rows.append({"category": column.removeprefix("scan_mem_"), "scanner_bytes": measured,
                     "memtracker_bytes": reference, "difference": diff})
    return rows
