"""Memory hooks of a scanned step: saved-for-backward storages, gradients, optimizer state, the allocator peak."""

from __future__ import annotations

import logging
import weakref
from typing import Any

import torch

from .alloc_trace import PEAK_TOLERANCE, AllocatorTrace, replay, resolve_phases, step_peak
from .alloc_trace import available as trace_available
from .memory import (
    CudaAllocator,
    LiveStorages,
    allocation_bytes,
    exclude_while_alive,
    optimizer_state_tensors,
    parameter_bytes,
    storage_key,
    unique_storage_bytes,
)
from .phases import AFTER_BACKWARD, CLIP, FORWARD, OPTIMIZER, OTHER, PhaseProbe
from .record import StepRecord, flat_tensors

logger = logging.getLogger(__name__)

class _Saved:
    """What autograd stores for a saved tensor while the scan runs; its death marks the storage's release."""

    __slots__ = ("tensor", "ptr", "probe")

    def __init__(self, tensor: torch.Tensor, ptr: int, probe: MemoryProbe):
        self.tensor = tensor
        self.ptr = ptr
        self.probe = probe

    def __del__(self):
        self.probe._on_release(self.ptr)


class MemoryProbe(PhaseProbe):
    """The phase hooks plus every memory hook of a scanned step range; all removed in `remove()`.

    On CUDA the categories are attributed to the allocator's peak in one of two ways. Preferred (torch with
    allocator metadata): every hook event only appends the category totals to `_states` and tags the
    allocator's history with the state's index; the peak instant is located exactly after the scan, by
    replaying the history (`resolve`). Fallback: read the allocator's peak counter at every event (exact at
    event granularity, but each read costs tens of microseconds).
    """

    def __init__(self, model: torch.nn.Module, optimizer: Any, keep_stacks: bool = False):
        super().__init__(model, optimizer)
        self.alloc = CudaAllocator(self.device) if self.device.type == "cuda" else None
        self.trace = AllocatorTrace(self.device, keep_stacks) if trace_available(self.device) else None
        # Per tag: (phase, saved bytes, grad bytes, optimizer bytes, recompute base tag, recompute upto tag,
        # claims_previous). claims_previous: the event added memory allocated just before it (a saved tensor,
        # a grad), so the interval that ended at the event is attributed to the state after it.
        self._states: list[tuple] = []
        self._grads_total = 0
        self._rc_base: int | None = None
        self._rc_upto: int | None = None
        self._saved_ctx = None
        self._saved = LiveStorages(self.device)  # saved tensors + checkpoint inputs
        self._recompute_live = 0
        self._recompute_before = 0
        self._recompute_layer: int | None = None
        self._child_layer: dict[int, int] = {}
        self._grads: dict[int, int] = {}
        self.params_bytes, self.quant_state_bytes, param_ptrs = parameter_bytes(model, self.device)
        buffers = [b for b in model.buffers() if b.device == self.device]
        buffer_ptrs = {k[0] for k in map(storage_key, buffers) if k is not None} - param_ptrs
        self.buffers_bytes = sum(allocation_bytes(k[1], self.device) for k in {storage_key(b) for b in buffers}
                                 if k is not None and k[0] in buffer_ptrs)
        self._excluded = param_ptrs | buffer_ptrs
        self._opt_bytes = self._optimizer_bytes()
        self._opt_state_count = len(self.optimizer.state) if self.optimizer is not None else 0
        self.install()
        self._handles.extend(exclude_while_alive(model, self._excluded, self.device))

    # ---------------------------------------------------------------- install / remove
    def install(self) -> None:
        super().install()
        m = self.model
        for sub in m.modules():
            # transformers' GradientCheckpointingLayer (and compatible layers) flag themselves like this
            if getattr(sub, "gradient_checkpointing", False) is True:
                self._handles.append(sub.register_forward_pre_hook(self._ckpt_pre, with_kwargs=True))
                if self.alloc is None:
                    continue
                # Recompute runs the layer's children again inside backward. transformers >= 5.2x checkpoints
                # `forward` (the layer's own hooks stay outside the recompute), older ones `__call__`; the
                # children's hooks fire during recompute either way.
                for child in sub.children():
                    self._child_layer[id(child)] = id(sub)
                    self._handles.append(child.register_forward_pre_hook(self._recompute_pre))
                    self._handles.append(child.register_forward_hook(self._recompute_post))
        for p in m.parameters():
            if p.requires_grad:
                self._handles.append(p.register_post_accumulate_grad_hook(self._on_grad))

    def remove(self) -> None:
        """Remove every hook; idempotent, safe mid-step (used on errors and at train end)."""
        self._pop_saved_ctx()
        if self.trace is not None:
            self.trace.abandon()
        super().remove()

    # ---------------------------------------------------------------- step boundaries
    def begin_step(self, step: int, start_mark: Any = None) -> None:
        """Open the record of `step`; its window starts at `start_mark` (default: now)."""
        if self.trace is not None and not self.trace.recording:
            self.trace.start()
        if self.alloc is not None:
            self.alloc.reset_peak()
        rec = StepRecord(step=step, start=start_mark if start_mark is not None else self.clock.mark())
        self._set_grads(self._current_grads())
        rec.optimizer_bytes = self._opt_bytes
        self._rec = rec
        self._cross("step_start", OTHER)
        rec.first_tag = len(self._states) - 1
        rec.stats_start = self._stats()  # after the first tag: its start value is this `allocated`
        if rec.stats_start is not None:
            # Memory held before the step that is no parameter, buffer, grad, optimizer state or saved tensor:
            # library workspaces (cuBLAS keeps one per thread and stream), DDP's gradient buckets, tensors kept
            # from earlier steps. No tensor hook can see it, and it persists through the step.
            named = self.params_bytes + self.buffers_bytes + self._grads_total + self._opt_bytes
            allocated = rec.stats_start["allocated_bytes"]["all"]["current"]
            rec.other_start = max(0, allocated - named - self._activations())

    def end_step(self) -> tuple[StepRecord, Any]:
        """Close the open record; returns it and the end mark (the next step's window start)."""
        rec = self._rec
        rec.end = self.clock.mark()
        # zero_grad, scheduler, callbacks (or a skipped optimizer step) are "other"
        self._cross("step_end", OTHER)
        rec.end_tag = len(self._states) - 1
        self._set_grads(self._current_grads())  # zero_grad(set_to_none) has run by now
        rec.grads_end = self._grads_total
        rec.stats_end = self._stats()
        rec.activations_max = max(rec.activations_max, self._saved.max_total)
        self._rec = None
        return rec, rec.end

    def resolve(self, records: list[StepRecord], snapshot_path: str | None = None) -> None:
        """Locate each record's allocator peak in the tagged history (trace mode; after the end-of-scan sync).

        Fills the peak fields of every record and checks the replayed peak against the allocator's own
        peak counter; on a mismatch the counter wins and the attribution is flagged in the log.
        """
        if self.trace is None or not records:
            return
        entries = self.trace.stop(snapshot_path)
        first = records[0]
        start = first.stats_start["allocated_bytes"]["all"]["current"]
        layout = self.trace.layout
        rep = replay(entries, start, first.first_tag, len(self._states) - 1, self.trace.prefix, layout)
        phases = resolve_phases(self._states, AFTER_BACKWARD, CLIP, OPTIMIZER, OTHER)
        for rec in records:
            sp = step_peak(self._states, phases, rep, rec.first_tag, rec.end_tag)
            counter = rec.stats_end["allocated_bytes"]["all"]["peak"]
            rec.peak_reserved = rec.stats_end["reserved_bytes"]["all"]["peak"]
            rec.peak, rec.peak_phase = sp.peak, sp.phase
            rec.peak_tails = sp.tails
            rec.start_tails = layout.start_tails if layout is not None else 0
            rec.peak_activations, rec.peak_grads, rec.peak_optimizer = sp.activations, sp.grads, sp.optimizer
            rec.phase_peaks = sp.phase_peaks
            rec.activations_max = max(rec.activations_max, sp.activations_max)
            for snap in rec.boundaries:
                tag = snap.pop("tag", None)
                if tag in sp.allocated_at:
                    snap["allocated"] = sp.allocated_at[tag]
                    # the categories just before the boundary (the last state of the interval it closes)
                    snap["activations"] = sp.activations_at.get(tag - 1, sp.activations_at[tag])
            if abs(sp.peak - counter) > PEAK_TOLERANCE:
                logger.warning(
                    "scanner: step %d: replayed allocator history peaks at %d B but the allocator's counter says %d B"
                    " (%d stale-tagged entries, %d allocations the block layout did not place); using the counter,"
                    " category attribution may be off", rec.step, sp.peak, counter, rep.stale,
                    layout.unmatched if layout is not None else 0)
            rec.peak = counter  # the counter is the allocator's own figure; the replay located it

    # ---------------------------------------------------------------- memory sampling
    def _stats(self) -> dict | None:
        if self.alloc is None:
            return None
        try:  # the nested dict avoids the Python flattening done by torch.cuda.memory_stats()
            return torch._C._cuda_memoryStats(self.device.index if self.device.index is not None else 0)
        except Exception:
            return None

    def _activations(self) -> int:
        return self._saved.total + self._recompute_live

    def _set_grads(self, grads: dict[int, int]) -> None:
        self._grads = grads
        self._grads_total = sum(grads.values())

    def _sample(self, claims_previous: bool = False) -> None:
        """The categories just changed (or the phase did): start a new attribution interval.

        Category totals only change at hook events, so between two events they are constant; whatever peak
        the allocator reaches in that interval saw exactly those totals.
        """
        rec = self._rec
        if rec is None:
            return
        act = self._activations()
        if act > rec.activations_max:
            rec.activations_max = act
        if self.alloc is None:
            return
        if self.trace is not None:
            self._states.append(
                (
                    self._phase,
                    self._saved.total,
                    self._grads_total,
                    self._opt_bytes,
                    self._rc_base,
                    self._rc_upto,
                    claims_previous,
                )
            )
            self.trace.tag(len(self._states) - 1)
            return
        stats = self._stats()
        if stats is None:
            return
        peak = stats["allocated_bytes"]["all"]["peak"]
        reserved = stats["reserved_bytes"]["all"]["peak"]
        if reserved > rec.peak_reserved:
            rec.peak_reserved = reserved
        if peak > rec.phase_peaks.get(self._phase, -1):
            rec.phase_peaks[self._phase] = peak
        if peak > rec.peak:
            rec.peak = peak
            rec.peak_phase = self._phase
            rec.peak_activations = act
            rec.peak_grads = self._grads_total
            rec.peak_optimizer = self._opt_bytes

    def _boundary(self, name: str, next_phase: str | None = None, then=None) -> None:
        """Close the interval at a phase boundary and open the next one in `next_phase`.

        `then` applies category changes that belong to the next interval. The boundary snapshot records the
        categories and (on CUDA) `allocated` at the boundary.
        """
        rec = self._rec
        if rec is None:
            return
        snap = {"event": name, "activations": self._activations(), "grads": self._grads_total}
        if self.trace is not None:
            # states describe the interval they open: change first, then tag. `allocated` comes in resolve().
            if then is not None:
                then()
            if next_phase is not None:
                self._phase = next_phase
            self._sample()
            snap["tag"] = len(self._states) - 1
        else:
            self._sample()  # samples describe the interval they close: sample first, then change
            if then is not None:
                then()
            if next_phase is not None:
                self._phase = next_phase
            if self.alloc is not None:
                snap["allocated"] = self.alloc.allocated()
                self.alloc.reset_peak()
        rec.boundaries.append(snap)

    def _current_grads(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for p in self.model.parameters():
            g = p.grad
            if g is not None and g.device == self.device:
                key = storage_key(g)
                if key is not None:
                    out[key[0]] = allocation_bytes(key[1], self.device)
        return out

    def _optimizer_bytes(self) -> int:
        if self.optimizer is None:
            return 0
        return unique_storage_bytes(optimizer_state_tensors(self.optimizer), self.device)[0]

    # ---------------------------------------------------------------- forward
    def _enter_forward(self) -> None:
        self._saved_ctx = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._saved_ctx.__enter__()

    def _exit_forward(self) -> None:
        self._pop_saved_ctx()

    def _pop_saved_ctx(self) -> None:
        if self._saved_ctx is not None:
            ctx, self._saved_ctx = self._saved_ctx, None
            ctx.__exit__(None, None, None)

    # ---------------------------------------------------------------- saved tensors
    def _pack(self, t: torch.Tensor):
        if t.device != self.device:
            return t
        key = storage_key(t)
        if key is None or key[0] in self._excluded:  # parameters, buffers and views of them
            return t
        if isinstance(t._base if t._base is not None else t, torch.nn.Parameter):
            # a parameter that did not exist when the scan began: FSDP2's all-gathered (unsharded) weights,
            # which it frees after forward and gathers again for backward (transient: temporaries when alive)
            return t
        self._saved.add(*key)
        self._sample(claims_previous=True)  # allocated just before being saved: live at the peak as saved
        return _Saved(t, key[0], self)

    def _unpack(self, packed):
        if self._pending_fwd and not self._bwd_open and self._rec is not None:
            self._on_backward_start()
        return packed.tensor if type(packed) is _Saved else packed

    def _on_release(self, ptr: int) -> None:
        if self._rec is None:
            self._saved.release(ptr)
        elif self.trace is not None:
            self._saved.release(ptr)  # the storage is freed after this: the new interval sees it released
            self._sample()
        else:
            self._sample()  # the storage is still alive: the wrapper holding it is being torn down
            self._saved.release(ptr)

    # ---------------------------------------------------------------- gradient checkpointing
    def _ckpt_pre(self, module, args, kwargs):
        if self._rec is None:
            return None
        if self._phase == FORWARD:
            # The checkpoint keeps these inputs alive until the layer's backward, outside any saved-tensor
            # hook we can see; count them as activations until the tensors die.
            for t in flat_tensors(args, kwargs):
                key = storage_key(t) if t.device == self.device else None
                if key is None or key[0] in self._excluded:
                    continue
                self._saved.add(*key)
                weakref.finalize(t, self._on_release, key[0])
            self._sample(claims_previous=True)
        return None

    def _recompute_pre(self, module, args):
        if self._rec is None or not self._bwd_open:
            return None
        layer = self._child_layer.get(id(module))
        if layer != self._recompute_layer:
            # A new layer's recompute begins; the previous layer's recomputed tensors were consumed by its
            # backward, which ran before this point (the interval that ends here still had them).
            self._recompute_layer = layer
            if self.trace is not None:
                self._rc_base, self._rc_upto = len(self._states), None  # resolved from the history later
                self._sample()
                return None
            self._sample()
            self._recompute_live = 0
            self._recompute_before = self.alloc.allocated()
        return None

    def _recompute_post(self, module, args, output):
        if self._rec is not None and self._bwd_open:
            # Recomputed activations live until this layer's backward consumes them; the allocator delta
            # since the layer's recompute began is what they hold (CUDA only: no allocator counter on CPU).
            if self.trace is not None:
                self._rc_upto = len(self._states)
            else:
                self._recompute_live = max(0, self.alloc.allocated() - self._recompute_before)
            self._sample(claims_previous=True)
        return None

    # ---------------------------------------------------------------- backward
    def _after_backward(self) -> None:
        self._recompute_live = 0
        self._recompute_layer = self._rc_base = self._rc_upto = None

    def _on_grad(self, p: torch.Tensor) -> None:
        if self._rec is None or p.grad is None:
            return
        key = storage_key(p.grad)
        if key is not None and key[0] not in self._grads and p.grad.device == self.device:
            size = allocation_bytes(key[1], self.device)
            self._grads[key[0]] = size
            self._grads_total += size
            self._sample(claims_previous=True)

    # ---------------------------------------------------------------- optimizer
    def _after_optimizer(self) -> None:
        # AdamW-style state appears lazily at the first step and keeps its storages afterwards; re-sizing it
        # only when the number of parameters with state changed keeps this off the per-step host path.
        count = len(self.optimizer.state) if self.optimizer is not None else 0
        if count != self._opt_state_count:
            self._opt_state_count = count
            self._opt_bytes = self._optimizer_bytes()
        if self._rec is not None:
            self._rec.optimizer_bytes = self._opt_bytes
