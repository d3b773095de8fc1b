"""The scanner's category rules applied to a MemTracker-tracked step: the fake step (the prediction splits its
peak as the scanner will) and verify's oracle (MemTracker's peak, split as the scanner splits).

MemTracker files a tensor by when it was made (forward: activation, backward: temporary). The scanner files by
what holds it at the peak: storages saved for backward (and checkpointed layers' inputs) are activations, plus,
while a checkpointed layer is being recomputed, what its recompute has allocated so far; gradients once
accumulated; the rest temporaries. Near the end of a checkpointed backward the two rules differ by hundreds of
MB at the same peak (granite-3.1-2b: activations 405 MB by MemTracker's rule, 201 MB by the scanner's, on H100).

`ScannerRules` mirrors scanner/memory_probe.py and scanner/alloc_trace.py event for event: every event that
changes a category starts a new interval; an event that adds memory made just before it (a saved tensor, a
gradient, a recomputed child's output) claims the interval that ended at it; the peak takes the categories
of the interval it fell in.
"""

from __future__ import annotations

import contextlib
import logging
import weakref

logger = logging.getLogger(__name__)


# The scanner's memory categories -> the MemTracker reference types that make each up (verify's oracle reads a
# real step's peak this way; the fake step adds the batch it makes: planning.fake_step).
MEMTRACKER_TYPES = {
    "params": ("Parameter",),
    "buffers": ("Buffer",),
    "grads": ("Gradient",),
    "optimizer": ("Optstate",),
    "activations": ("Activation",),
    "temporaries": ("Temp", "Other"),
}


def rounded(nbytes: int, block: int) -> int:
    """`nbytes` in whole `block`-byte blocks, as the CUDA caching allocator sizes a storage (block 512; 1: as is)."""
    return -(-nbytes // block) * block


def observed_tracker(tracker_class):
    """MemTracker calling `after_op` after every op it tracked (ScannerRules.after_op)."""

    class ObservedMemTracker(tracker_class):
        after_op = None

        def _update_peak_stats(self, peak_state) -> None:
            if self.after_op is not None:
                self.after_op()
            return super()._update_peak_stats(peak_state)

    return ObservedMemTracker if hasattr(tracker_class, "_update_peak_stats") else tracker_class


def tracked_total(tracker) -> int:
    """Bytes a MemTracker counts as allocated now, all devices."""
    from torch.distributed._tools import mem_tracker

    key = getattr(mem_tracker, "_TOTAL_KEY", None)
    return sum(snapshot.get(key, 0) for snapshot in tracker._curr_mem_snap.values())


class StorageKeys:
    """Storages told apart by address (`_cdata`), each address one storage's for the step: every storage keyed is
    weakly referenced, which keeps its address from going to a storage made later. Without that, a storage made where
    a dead one was took the dead one's place (a parameter's: not an activation; a saved one's: its size), which
    depended on where the allocator put it: an FSDP1 plan's activations moved by 512 KiB from run to run."""

    def __init__(self):
        self.pins: dict = {}

    def __call__(self, storage) -> int:
        key = storage._cdata
        if key not in self.pins:
            from torch.multiprocessing.reductions import StorageWeakRef

            self.pins[key] = StorageWeakRef(storage)
        return key


class ScannerRules:
    """Category state of the scanner's rules and the peak interval's owner, fed by the step's hooks."""

    def __init__(self, current_total, block: int):
        self.current_total = current_total  # () -> bytes allocated now (the tracker's running total)
        self.block = block
        self.saved = 0  # bytes of saved storages (and checkpoint inputs) alive
        self.grads = 0
        self.grad_storages: set[int] = set()
        self.key = StorageKeys()
        self.rc_base: int | None = None  # allocated when the current layer's recompute began
        self.rc_upto: int | None = None  # allocated after its latest recomputed child
        self.recompute_layer: int | None = None
        self.backward_open = False
        self.interval_peak = 0
        self.ops = 0  # after_op calls: none means the tracker could not report (other torch internals)
        self.best = -1
        self.best_state = (0, 0)  # (activations, grads) of the interval holding the peak

    def _state(self) -> tuple[int, int]:
        live = 0
        if self.rc_base is not None and self.rc_upto is not None:
            live = max(0, self.rc_upto - self.rc_base)
        return self.saved + live, self.grads

    def after_op(self) -> None:
        """Every op's outputs are allocated: the running total may be a new maximum of this interval."""
        self.ops += 1
        total = self.current_total()
        if total > self.interval_peak:
            self.interval_peak = total

    def event(self, change, claims_previous: bool = False) -> None:
        """Close the interval (its owner: the state after `change` if the event claims it), apply `change`."""
        before = self._state()
        change()
        owner = self._state() if claims_previous else before
        if self.interval_peak > self.best:
            self.best, self.best_state = self.interval_peak, owner
        self.interval_peak = self.current_total()

    def finish(self) -> None:
        self.event(lambda: None)

    # ------------------------------------------------------------ gradients
    def grad_hook(self, param) -> None:
        grad = getattr(param.grad, "_local_tensor", param.grad)  # a DTensor (FSDP2): this rank's shard
        if grad is None or self.key(grad.untyped_storage()) in self.grad_storages:
            return

        def add() -> None:
            self.grad_storages.add(self.key(grad.untyped_storage()))
            self.grads += rounded(grad.untyped_storage().nbytes(), self.block)

        self.event(add, claims_previous=True)

    def count_existing_grads(self, params) -> None:
        for p in params:
            grad = getattr(p.grad, "_local_tensor", p.grad)
            if grad is not None and self.key(grad.untyped_storage()) not in self.grad_storages:
                self.grad_storages.add(self.key(grad.untyped_storage()))
                self.grads += rounded(grad.untyped_storage().nbytes(), self.block)

    # ------------------------------------------------------------ recompute of checkpointed layers
    def recompute_pre(self, layer: int) -> None:
        if not self.backward_open or layer == self.recompute_layer:
            return

        def begin() -> None:
            self.recompute_layer = layer
            self.rc_base, self.rc_upto = self.current_total(), None

        self.event(begin)

    def recompute_post(self) -> None:
        if not self.backward_open or self.recompute_layer is None:
            return

        def grow() -> None:
            self.rc_upto = self.current_total()

        self.event(grow, claims_previous=True)

    def end_backward(self) -> None:
        def reset() -> None:
            self.backward_open = False
            self.recompute_layer = self.rc_base = self.rc_upto = None

        self.event(reset)


class SavedTensorMeter:
    """The scanner's saved-for-backward storages under fake tensors: tensors saved by autograd (parameters and
    their views excluded) plus the inputs that gradient-checkpointed layers keep for their recompute, each
    storage counted once while anything holds it. `max` is the CPU scanner's `activations` (the step's
    maximum); with `rules`, every change is an event of the scanner's rules."""

    def __init__(self, model, rules: ScannerRules | None = None, block: int = 1):
        import torch

        self.rules, self.block = rules, block
        self.key = StorageKeys()
        # (a DTensor, FSDP2's shard, holds no storage of its own: its local tensor does)
        self.excluded = {self.key(getattr(t, "_local_tensor", t).untyped_storage())
                         for t in (*model.parameters(), *model.buffers())}
        self.live: dict[int, list[int]] = {}  # storage → [holders, bytes]
        self.total = self.max = 0
        self.forward_open = False
        layers = [m for m in model.modules() if getattr(m, "gradient_checkpointing", False) is True
                  and not any(getattr(c, "gradient_checkpointing", False) is True for c in m.modules() if c is not m)]
        self.handles = [m.register_forward_pre_hook(self._checkpoint_inputs, with_kwargs=True) for m in layers]
        self.finalizers: list[weakref.finalize] = []
        if rules is not None:
            # Recompute runs a checkpointed layer's children again inside backward (the scanner hooks them too)
            for layer in layers:
                begin = _recompute_begin(rules, id(layer))
                for child in layer.children():
                    self.handles.append(child.register_forward_pre_hook(begin))
                    self.handles.append(child.register_forward_hook(lambda m, a, o: rules.recompute_post()))
        self._parameter = torch.nn.Parameter

    @contextlib.contextmanager
    def hooks(self):
        """The forward: saved tensors are packed through the meter, checkpointed layers' inputs held. Hooks already
        in force (the scanner's, when verify runs both on one step) still see every tensor: only the innermost
        pair of saved-tensor hooks is called, so the meter calls them itself."""
        import torch

        outer = torch._C._autograd._top_saved_tensors_default_hooks(False)
        outer_pack, outer_unpack = outer if outer else (None, None)

        def pack(tensor):
            held = self._pack(tensor)
            if outer_pack is None:
                return held
            return _Outer(outer_pack(tensor), held)

        def unpack(packed):
            if isinstance(packed, _Outer):
                _unpack(packed.held)
                return outer_unpack(packed.outer)
            return _unpack(packed)

        self.forward_open = True
        try:
            with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
                yield
        finally:
            self.forward_open = False

    def _hold(self, tensor) -> bool:
        key = self.key(tensor.untyped_storage())
        # a parameter made after the meter began (FSDP2's gathered weights) or a view of one: not an activation
        if key in self.excluded or isinstance(tensor._base if tensor._base is not None else tensor, self._parameter):
            return False
        entry = self.live.get(key)
        if entry is None or entry[0] == 0:
            # sized now: a dead storage's address (the key) is reused by the next storage made there, of any size
            entry = self.live[key] = [0, rounded(tensor.untyped_storage().nbytes(), self.block)]
        if entry[0] == 0:
            self._change(entry[1], claims_previous=True)
        entry[0] += 1
        return True

    def _release(self, key: int) -> None:
        entry = self.live[key]
        entry[0] -= 1
        if entry[0] == 0:
            self._change(-entry[1], claims_previous=False)

    def _change(self, delta: int, claims_previous: bool) -> None:
        def apply() -> None:
            self.total += delta
            self.max = max(self.max, self.total)
            if self.rules is not None:
                self.rules.saved = self.total

        if self.rules is None:
            apply()
        else:
            self.rules.event(apply, claims_previous)

    def _pack(self, tensor):
        return _Held(tensor, self) if self._hold(tensor) else tensor

    def _checkpoint_inputs(self, module, args, kwargs):
        import torch

        if not self.forward_open:  # a recompute that runs the layer's own hooks again (older transformers)
            return
        for value in (*args, *kwargs.values()):
            if isinstance(value, torch.Tensor) and self._hold(value):
                self.finalizers.append(weakref.finalize(value, self._release, self.key(value.untyped_storage())))

    def remove(self) -> None:
        """Stop metering. Held tensors die later (a checkpoint input when the step's graph goes, at the latest at
        exit), when the rules' tracker has been torn down: from here their release only updates this meter."""
        for handle in self.handles:
            handle.remove()
        for finalizer in self.finalizers:
            finalizer.detach()
        self.finalizers.clear()
        self.rules = None


def _recompute_begin(rules: ScannerRules, layer: int):
    def hook(module, args) -> None:
        rules.recompute_pre(layer)

    return hook


class _Outer:
    """A tensor packed by outer hooks and by the meter: the meter's holder lives (and dies) with it."""

    __slots__ = ("outer", "held")

    def __init__(self, outer, held):
        self.outer, self.held = outer, held


def _unpack(held):
    return held.tensor if isinstance(held, _Held) else held


class _Held:
    __slots__ = ("tensor", "meter", "key")

    def __init__(self, tensor, meter: SavedTensorMeter):
        self.tensor, self.meter, self.key = tensor, meter, meter.key(tensor.untyped_storage())

    def __del__(self):
        self.meter._release(self.key)


class _NoHandle:
    def remove(self) -> None:
        pass


def ignore_frozen_parameters(tracker, model) -> None:
    """Let MemTracker enter over a model with frozen weights (LoRA, prompt tuning): it registers a gradient hook
    on every parameter, which a parameter without requires_grad refuses; give those a handle that does nothing.
    Parameters made during the step (FSDP2's gathered weights) get one as MemTracker first meets them."""
    handles = tracker._param_to_grad_hook_handles
    kind = type(handles)

    class FrozenAware(kind):
        def get(self, param, default=None):
            found = super().get(param, default)
            frozen = not param.requires_grad or not param.is_leaf  # a view (FSDP1's parameters) takes no hook
            return (_NoHandle(), _NoHandle()) if found is None and frozen else found

    aware = FrozenAware()
    aware.update(handles)
    tracker._param_to_grad_hook_handles = aware
    for p in model.parameters():
        if not p.requires_grad:
            aware[p] = (_NoHandle(), _NoHandle())
