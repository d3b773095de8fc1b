"""The contexts the fake step runs under: what a real step on the target does that CPU fake tensors would not do by
themselves (the CUDA allocator's blocks, a CUDA target's kernels without a CPU counterpart, the data-dependent
choices transformers makes from values fake tensors lack), and MemTracker without the per-module peaks it would
compute and nobody reads."""

from __future__ import annotations

import contextlib
import logging

from tunebench.planning.peak_rules import rounded

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def kernels_as_the_gpu(shape, model, config, gpu_arch: int | None):
    """A CUDA target's kernels that have no CPU counterpart, as stand-ins that allocate and save what they do:
    flex attention (planning.kernel_ops) and Liger's (planning.liger_kernels, for the model types modelled)."""
    from tunebench.planning import kernel_ops, liger_kernels

    with contextlib.ExitStack() as stack:
        if gpu_arch and shape.attn_implementation == "flex_attention":
            stack.enter_context(kernel_ops.flex_attention_as_gpu())
        model_type = getattr(config, "model_type", None)
        if shape.liger and liger_kernels.modelled(model_type):
            stack.enter_context(liger_kernels.applied(model, model_type))
        yield


@contextlib.contextmanager
def band_noise(model, last_bit: bool):
    """A last-bit band run's hooks on every linear layer (experiment.last_bit), as the run's trainer registers them:
    each output's random draw, its moved copy and the sum that replaces it are allocated at every layer, the LM
    head's logits-sized ones included (a float32 band run's peak was 41 % above a plan without them)."""
    if not last_bit:
        yield
        return
    from tunebench.experiment.last_bit import LastBitNoise

    noise = LastBitNoise(model, seed=1)  # the seed moves values, which fake tensors have not
    try:
        yield
    finally:
        noise.remove()


@contextlib.contextmanager
def packed_rows_only_if(packed: bool):
    """transformers tells packed rows from their position ids by reading values, which fake tensors cannot give:
    it then assumes packed rows and builds a block mask (SDPA with a mask repeats GQA's keys and values). The
    rows' layout is known here, so the fake step answers for it: not packed unless the experiment packs."""
    try:
        from transformers import masking_utils
    except ImportError:
        masking_utils = None
    if packed or masking_utils is None or not hasattr(masking_utils, "find_packed_sequence_indices"):
        yield
        return
    original = masking_utils.find_packed_sequence_indices
    masking_utils.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = original


@contextlib.contextmanager
def grouped_mm_fallback_unless_bf16(dtype: str):
    """Mixture-of-experts layers multiply through torch's grouped_mm, whose shape function (what fake tensors
    run) accepts bf16 only, while the CPU kernel takes float32 too. For other dtypes the fake step takes
    transformers' own fallback op (registered with a fake implementation), which allocates and saves the same
    tensors: the routed tokens' outputs, and the input and weight for backward."""
    try:
        from transformers.integrations import moe
    except ImportError:
        moe = None
    if dtype == "bfloat16" or moe is None or not hasattr(moe, "_can_use_grouped_mm"):
        yield
        return
    original = moe._can_use_grouped_mm
    moe._can_use_grouped_mm = lambda *args, **kwargs: False
    try:
        yield
    finally:
        moe._can_use_grouped_mm = original


def peak_only(tracker_class):
    """MemTracker without its per-module peaks, which we never read: after every op it walks all tracked modules
    (weak references, O(modules) per op) to update each active module's own peak: 95 % of the 8B LoRA + GC step's
    prediction time (118.6 s -> 5.9 s without it). The device-wide peak snapshot, the only thing read here, is
    updated exactly as before."""
    from torch.distributed._tools import mem_tracker

    total_key = getattr(mem_tracker, "_TOTAL_KEY", None)
    if total_key is None or not hasattr(tracker_class, "_update_peak_stats"):
        return tracker_class  # a torch whose internals differ: correct, only slower

    class PeakOnlyMemTracker(tracker_class):
        def _update_peak_stats(self, peak_state) -> None:
            if not all(hasattr(self, name) for name in ("_curr_mem_snap", "_peak_mem", "_peak_mem_snap")):
                return super()._update_peak_stats(peak_state)  # other internals: the original, slower path
            for device, snapshot in self._curr_mem_snap.items():
                if self._peak_mem.get(device, 0) < snapshot[total_key]:
                    self._peak_mem[device] = snapshot[total_key]
                    # {reference type: bytes}: int values, so a shallow copy is a whole copy
                    self._peak_mem_snap[device] = dict(snapshot)

    return PeakOnlyMemTracker


@contextlib.contextmanager
def cuda_block_rounding(enabled: bool):
    """Size every storage as the CUDA caching allocator would (512-byte blocks) although the fake tensors
    are on the CPU: MemTracker rounds only for CUDA devices (a private method, patched for the step)."""
    from torch.distributed._tools import mem_tracker

    info = getattr(mem_tracker, "_WeakRefInfo", None)
    if not enabled or info is None or not hasattr(info, "_calculate_mem_consumed"):
        yield
        return
    original = info._calculate_mem_consumed

    def consumed(self) -> int:
        return rounded(self.size * self.element_size, mem_tracker._PYTORCH_MIN_ALLOCATE)

    info._calculate_mem_consumed = consumed
    try:
        yield
    finally:
        info._calculate_mem_consumed = original
