"""One real training step of the real model under fake tensors: the peak memory by category, without memory.

The model is built inside `FakeTensorMode` (parameters are fake: shapes, dtypes and strides, no storage), PEFT
and gradient checkpointing are applied as the training entry applies them, and two optimizer steps run: the
first creates the optimizer state, the second is measured by torch's `MemTracker`, which sees every tensor's
creation and death and categorises what is alive at the peak — the same categories as the scanner, whose
figures matched MemTracker's to 0.00-0.02 % on GPU (docs/evidence/gpu.md §3b). Fake tensors run on the CPU
dispatch (a CPU-only torch cannot dispatch fake CUDA kernels); the CUDA kernels the harness runs save the same
tensors for backward (flash/cuDNN attention: output + log-sum-exp), which the GPU evidence checks.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

from tunebench.experiment.quantization import Quantization
from tunebench.experiment.sharding import Fsdp
from tunebench.planning.fake_model import meta_model, to_fake
from tunebench.planning.fms_bases import GptqPlan
from tunebench.planning.int8_outliers import OutlierColumns
from tunebench.planning.peak_rules import rounded
from tunebench.planning.quantized import (
    fake_kernels,
    mark_outlier_columns,
    quant_state_bytes,
)
from tunebench.planning.step_categories import categories
from tunebench.planning.step_contexts import (
    band_noise,
    cuda_block_rounding,
    grouped_mm_fallback_unless_bf16,
    kernels_as_the_gpu,
    packed_rows_only_if,
    peak_only,
)

logger = logging.getLogger(__name__)

@dataclass(frozen=True)
class StepShape:
    """What decides one rank's step memory."""

    model: str  # preset:<name> or a local dir with config.json
    dtype: str  # weights' dtype
    micro_batch: int
    seq_len: int  # padded length of a micro-batch
    padded: bool  # a padding mask is passed (transformers then keeps the mask: GQA heads are repeated)
    packed: bool = False  # padding-free packing: several sequences per row, told apart by their position ids
    grad_accum: int = 1
    peft: str = "none"
    lora_r: int = 8
    lora_alpha: int = 16
    lora_targets: tuple = ("q_proj", "v_proj")
    virtual_tokens: int = 20
    checkpointing: bool = False
    autocast_bf16: bool = False  # mixed precision (bf16, or fp16 with autocast_fp16) over float32 weights
    autocast_fp16: bool = False  # the mixed precision is fp16 (GPTQ under fms runs fp16): autocast in float16
    attn_implementation: str | None = None
    optimizer: str = "fused"  # AdamW implementation: fused (adamw_torch_fused), foreach or loop
    quantization: Quantization | None = None  # a bitsandbytes-quantized base (planning.quantized)
    gptq: GptqPlan | None = None  # fms-acceleration's GPTQ base (planning.fms_bases)
    compile_mode: str | None = None  # torch.compile's mode (`default`, ...); None: eager (planning.compiled_step)
    liger: bool = False  # Liger's kernels (planning.liger_kernels)
    int8_outliers: OutlierColumns | None = None  # 8-bit's outlier columns per layer, measured (planning.int8_outliers)
    fsdp: Fsdp | None = None  # FSDP2 over `world` ranks: the step of rank 0 (planning.sharded_step)
    world: int = 1
    last_bit: bool = False  # a last-bit band run: every linear output moved in its last bit (experiment.last_bit)


def mixed_precision(shape: StepShape):
    """The fake step's stand-in for the Trainer's autocast: CPU autocast in the run's lower precision."""
    import torch

    if not shape.autocast_bf16:
        return contextlib.nullcontext()
    return torch.autocast("cpu", dtype=torch.float16 if shape.autocast_fp16 else torch.bfloat16)


def predict_step(shape: StepShape, round_to_cuda_blocks: bool = True, gpu_arch: int | None = None) -> dict:
    """Bytes per category alive at the measured step's peak, plus `peak` (their sum), and the attention kernel
    assumed (`attention`). With `gpu_arch` (a CUDA target's compute capability) attention runs as that GPU's
    fused kernels would (planning.attention_kernels); without, as the CPU runs it."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from tunebench.planning.attention_kernels import summary
    from tunebench.planning.compiled_step import inductor_plans
    from tunebench.planning.sharded_step import fake_ranks, flat_storage_checks, local, rank_holdings, shard

    block = 512 if round_to_cuda_blocks else 1  # the CUDA caching allocator's blocks (1: storages as they are)
    model, config = meta_model(shape)
    sharded = shape.fsdp is not None and shape.world > 1
    compiled = inductor_plans(cuda=bool(gpu_arch)) if shape.compile_mode else contextlib.nullcontext()
    with fake_kernels(shape.quantization, cuda=bool(gpu_arch)), \
            (fake_ranks(shape.world) if sharded else contextlib.nullcontext()) as mesh, flat_storage_checks(), \
            FakeTensorMode(allow_non_fake_inputs=True), grouped_mm_fallback_unless_bf16(shape.dtype), compiled, \
            kernels_as_the_gpu(shape, model, config, gpu_arch), band_noise(model, shape.last_bit):
        to_fake(model)
        mark_outlier_columns(model, shape.int8_outliers)
        if sharded:
            precision = "fp16" if shape.autocast_fp16 else "bf16" if shape.autocast_bf16 else "no"  # as accelerate
            model = shard(model, shape.fsdp, mesh, precision)
        trainable = [p for p in model.parameters() if p.requires_grad]
        # sharded: the warm-up step makes the state, after FSDP's set-up on its first forward (FSDP1's flat
        # parameters are float32 only from then on, and so is the state made over them)
        optimizer = _optimizer_with_state(trainable, shape.optimizer, with_state=not sharded)
        step = _TracedStep(shape, config, gpu_arch, round_to_cuda_blocks, block)
        step.run(model, optimizer, trainable)
        snapshot = step.tracker.get_tracker_snapshot("peak")
        held, kept = rank_holdings(model, block) if sharded else (None, 0)
    if gpu_arch and shape.attn_implementation == "flex_attention":
        step.chosen.append("flex")
    out = categories(snapshot, optimizer, step.rules, block, held)
    # what the rank keeps between steps (FSDP1's flat gradients) is the scanner's `other`, not a temporary
    out["kept"] = min(kept, out["temporaries"])
    out["temporaries"] -= out["kept"]
    out["activations_max"] = step.meter.max  # the CPU scanner's `activations`: the step's maximum
    # CPU scanner's grads
    out["grads_full"] = sum(rounded(local(p).untyped_storage().nbytes(), block) for p in trainable)
    # A quantized weight's state (block scales, code books) exists before the tracker: no tracked tensor holds
    # it. The scanner counts it in params, and so does the prediction, with the part shown on its own.
    out["quant_state"] = quant_state_bytes(model, block) if shape.quantization is not None else 0
    out["params"] += out["quant_state"]
    out["peak"] += out["quant_state"]
    out["attention"] = summary(step.chosen)
    out["autotune_step1"] = step.autotune_step1
    out["compile_unverified"] = step.unverified
    return out


def _optimizer_with_state(trainable: list, kind: str, with_state: bool = True):
    """AdamW as the run configures it, its state already made (step 1 only creates the state: no forward or
    backward is needed for that)."""
    import torch

    options = {"fused": {"fused": True}, "foreach": {"foreach": True}}.get(kind, {"foreach": False})
    optimizer = torch.optim.AdamW(trainable, lr=1e-5, **options)
    if not with_state:
        return optimizer
    for p in trainable:
        p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return optimizer


class _TracedStep:
    """One training step under MemTracker (and, for a CUDA target, the scanner's peak rules): forward under the
    run's autocast and attention kernels, backward, clipping, the optimizer step."""

    def __init__(self, shape: StepShape, config, gpu_arch: int | None, round_to_cuda_blocks: bool, block: int):
        from torch.distributed._tools.mem_tracker import MemTracker

        from tunebench.planning.compiled_step import ignoring_compile
        from tunebench.planning.peak_rules import observed_tracker

        self.shape, self.config, self.gpu_arch = shape, config, gpu_arch
        self.round, self.block = round_to_cuda_blocks, block
        tracker = observed_tracker(peak_only(MemTracker))
        self.tracker = (ignoring_compile(tracker) if shape.compile_mode else tracker)()
        self.compiled = None
        self.autotune_step1 = 0  # max-autotune's step-1 peak (planning.compiled_step.step1_autotune); 0: none
        self.unverified = 0  # a compiled step's eager saves in unverified layer classes (planning.compile_bounds)
        self.chosen: list[str] = []
        self.rules = self.meter = None

    def run(self, model, optimizer, trainable: list) -> None:
        import torch

        from tunebench.planning.peak_rules import (
            SavedTensorMeter,
            ScannerRules,
            ignore_frozen_parameters,
            tracked_total,
        )

        # The batch exists before the tracker looks (as the Trainer's batch does before its step).
        ids = torch.randint(3, self.config.vocab_size, (self.shape.micro_batch, self.shape.seq_len))
        mask = torch.ones_like(ids) if self.shape.padded else None
        if self.shape.compile_mode:
            if self.shape.autocast_bf16:
                _outputs_to_float32(model)
            self._compile(model, trainable, ids, mask)
            self._unverified_saved(model, ids, mask)
        if self.shape.fsdp is not None and self.shape.world > 1:
            self._warm_up(model, optimizer, trainable, ids, mask)
        ignore_frozen_parameters(self.tracker, model)
        with cuda_block_rounding(self.round):
            self.tracker.track_external(model, optimizer)  # sized (and rounded) when registered
        from tunebench.planning import kernel_ops

        kernel_ops.CALLED.clear()
        with cuda_block_rounding(self.round), self.tracker, packed_rows_only_if(self.shape.packed):
            if self.shape.grad_accum > 1:
                # With accumulation the peak is in a micro-batch that starts with every gradient already there
                # (all but the first are alike): simulate that one, with the first micro-batch's gradients.
                for p in trainable:
                    p.grad = torch.zeros_like(p)
            # On a CUDA target the peak is split by the scanner's rules (planning.peak_rules), not MemTracker's
            follow = self.round and hasattr(self.tracker, "_curr_mem_snap")  # else MemTracker's own split
            self.rules = ScannerRules(lambda: tracked_total(self.tracker), block=self.block) if follow else None
            self.tracker.after_op = self.rules.after_op if self.rules is not None else None
            self.meter = SavedTensorMeter(model, self.rules, block=self.block)
            with self._step1_watched(optimizer, trainable):
                self._forward_backward(model, trainable, ids, mask)
            torch.nn.utils.clip_grad_norm_(trainable, 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if self.rules is not None:
                self.rules.finish()
        if self.compiled is not None:
            self.chosen.extend(kernel_ops.CALLED)

    @contextlib.contextmanager
    def _step1_watched(self, optimizer, trainable: list):
        """max-autotune: the measured step's graphs replayed as step 1 autotunes them, without what step 1 does not
        hold yet (the optimizer's state, made by its first update; accumulated gradients)."""
        import torch

        from tunebench.planning.compiled_step import step1_autotune
        from tunebench.planning.peak_rules import tracked_total

        if not (self.shape.compile_mode or "").startswith("max-autotune"):
            yield
            return
        later = sum(rounded(v.untyped_storage().nbytes(), self.block) for state in optimizer.state.values()
                    for v in state.values() if isinstance(v, torch.Tensor))
        later += sum(rounded(p.grad.untyped_storage().nbytes(), self.block) for p in trainable if p.grad is not None)
        with step1_autotune(lambda: tracked_total(self.tracker) - later, split_k=bool(self.gpu_arch)) as watch:
            yield
        self.autotune_step1 = watch.peak

    def _compile(self, model, trainable: list, ids, mask) -> None:
        """torch.compile the model and run one step before the tracker looks: dynamo compiles the forward and
        AOTAutograd the backward (lazily) into memory plans (planning.compiled_step), as a run's step 1 does."""
        import torch

        from tunebench.planning.cuda_semantics import applied

        self.compiled = torch.compile(model)
        autocast = mixed_precision(self.shape)
        attention, _ = self._attention()
        with packed_rows_only_if(self.shape.packed):
            with autocast, attention, applied(bool(self.gpu_arch)):
                loss = _loss(self.compiled, ids, mask)
            loss.backward()
        for p in trainable:
            p.grad = None

    def _unverified_saved(self, model, ids, mask) -> None:
        """An eager forward of the model as the step runs it, measuring what its unverified layer classes save: what
        a compiled step's bound adds (planning.compile_bounds)."""
        from tunebench.planning.compile_bounds import unverified_saved
        from tunebench.planning.cuda_semantics import applied

        _, attention = self._attention()  # the backward's context: records no kernel choice
        with packed_rows_only_if(self.shape.packed), unverified_saved(model, self.block) as saved:
            with mixed_precision(self.shape), attention, applied(bool(self.gpu_arch)):
                loss = _loss(model, ids, mask)
            del loss
        self.unverified = saved.bytes

    def _attention(self):
        """(forward, backward) attention contexts: the GPU's kernels (the same stand-in at every entry, which a
        compiled model's guards need), or the CPU's; a compiled CPU step traces torch's own SDPA, as a CPU run's
        compilation does."""
        from tunebench.planning.attention_kernels import cpu_attention, gpu_attention

        if self.gpu_arch:
            if not hasattr(self, "_gpu_attention"):
                self._gpu_attention = (gpu_attention(self.gpu_arch, self.chosen), gpu_attention(self.gpu_arch, []))
            return self._gpu_attention
        if self.shape.compile_mode:
            return contextlib.nullcontext(), contextlib.nullcontext()
        return cpu_attention(self.chosen), cpu_attention([])

    def _warm_up(self, model, optimizer, trainable: list, ids, mask) -> None:
        """One whole step before the measured one, as the scanner measures a step after warm-up: FSDP sets up on its
        first forward and backward what later steps reuse (with FSDP's activation checkpointing, a first step that
        is measured holds 15 % more than later ones: a real 2-process FSDP2 run, tests/test_fsdp_memory.py)."""
        import torch

        from tunebench.planning.cuda_semantics import applied

        autocast = mixed_precision(self.shape)
        attention, attention_backward = self._attention()
        with packed_rows_only_if(self.shape.packed), applied(bool(self.gpu_arch)):
            with autocast, attention:
                loss = _loss(model, ids, mask)
            with attention_backward:
                loss.backward()
        del loss
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def _forward_backward(self, model, trainable: list, ids, mask) -> None:

        from tunebench.planning.cuda_semantics import applied

        shape, rules = self.shape, self.rules
        grad_hooks = []
        if rules is not None:
            rules.count_existing_grads(trainable)
            grad_hooks = [p.register_post_accumulate_grad_hook(rules.grad_hook) for p in trainable]
        # The Trainer runs the forward under autocast when bf16/fp16 is on, bf16 weights included (it decides
        # e.g. whether PEFT casts inputs to its fp32 adapters' dtype).
        autocast = mixed_precision(shape)
        # Recompute (gradient checkpointing) runs the forward again inside backward: the same kernels.
        attention, attention_backward = self._attention()
        # A CUDA target: CUDA's autocast float32 ops and fused dropout on top of the CPU kernels (cuda_semantics).
        with autocast, self.meter.hooks(), attention, applied(bool(self.gpu_arch)):
            # Like Trainer.training_step: the outputs (logits) are dropped before backward. No KV cache, as
            # TRL's compute_loss asks: a cache keeps concatenated copies of keys and values, which changes
            # what attention saves (phi3's fused qkv: 24 MiB a layer, measured on H100).
            loss = _loss(model if self.compiled is None else self.compiled, ids, mask) / shape.grad_accum
        if rules is not None:
            rules.backward_open = True
        with attention_backward:
            loss.backward()
        del loss
        if rules is not None:
            rules.end_backward()
        self.meter.remove()
        for handle in grad_hooks:
            handle.remove()


def _outputs_to_float32(model) -> None:
    """accelerate's mixed precision wraps the model's forward to return float32 outputs (prepare_model's
    convert_outputs_to_fp32), and torch.compile compiles that wrapped forward: the graph's outputs are float32
    logits, so the tangent autograd materialises for them at backward's entry is float32 too, twice the logits
    (H100, max-autotune on llama-3.2-1b LoRA: a 4 008 MiB float32 block at step 1's peak). An eager step makes the
    float32 copy at the forward's end and drops it with the outputs before backward; that instant is not its peak
    on the rows measured (the llama-3.2-1b flex row's plan moves by 0.2 MiB with it), so only a compiled step
    takes the wrapper here."""
    import types

    from accelerate.utils import convert_outputs_to_fp32

    forward = model.forward
    function = getattr(forward, "__func__", None)
    model.forward = (types.MethodType(convert_outputs_to_fp32(function), model) if function is not None
                     else convert_outputs_to_fp32(forward))


def _loss(model, ids, mask):
    """The model's loss without a KV cache, as TRL's compute_loss asks (a model whose forward takes no
    `use_cache` has none to turn off)."""
    try:
        return model(input_ids=ids, attention_mask=mask, labels=ids, use_cache=False).loss
    except TypeError as error:
        if "use_cache" not in str(error):
            raise
        return model(input_ids=ids, attention_mask=mask, labels=ids).loss
