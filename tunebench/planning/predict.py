"""Per-experiment memory prediction: the fake step's categories per rank, sharding, allowances, and the fit.

What the fake step cannot see, and how it is accounted for:
  * CUDA allocator rounding: every storage is sized in 512-byte blocks, as the caching allocator allocates;
  * cuBLAS/cuBLASLt workspaces (64 MiB per stream on Hopper) and DDP's gradient buckets: `pred_mem_other`
    (the scanner's `other`; measured 68 357 632 B on H100 for one process);
  * the allocator's slack (reserved − allocated at a GPU's edge, measured: planning.allocator_slack): not
    memory the allocator hands out, so not in `pred_mem_peak`; `pred_mem_reserved` adds it, and the fit judges
    that against the capacity less the CUDA context (CONTEXT_RESERVE);
  * FSDP: the fake step shards the model as accelerate does, over a fake process group (planning.sharded_step).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any

from tunebench.experiment.arguments import DataArguments, ModelArguments, PeftArguments
from tunebench.experiment.quantization import quantization_of
from tunebench.experiment.sharding import fsdp_of
from tunebench.experiment.spec import ExperimentSpec
from tunebench.planning.accelerations import bound_extra, shape_fields
from tunebench.planning.fake_step import StepShape, predict_step
from tunebench.planning.fms_bases import bnb_quantization, gptq_plan

logger = logging.getLogger(__name__)

GIB = 1024**3
CUBLAS_WORKSPACES = 68_357_632  # scan_mem_other of one process on H100 (docs/evidence/throughput-h100)
CONTEXT_RESERVE = GIB  # CUDA context (~780 MiB measured) + allocator fragmentation headroom
CATEGORIES = ("params", "buffers", "grads", "optimizer", "activations", "temporaries")


def memory_text(size: float) -> str:
    """Bytes as a person reads them: GiB from 1 GiB, MiB below (a tiny model's 1.6 MB is not "0.00 GiB")."""
    if abs(size) >= GIB:
        return f"{size / GIB:.2f} GiB"
    return f"{size / 2**20:.1f} MiB" if abs(size) >= 2**20 else f"{size / 2**10:.1f} KiB"


@dataclass(frozen=True)
class Sharding:
    world: int = 1
    fsdp: bool = False
    ddp: bool = False


def shape_and_sharding(spec: ExperimentSpec) -> tuple[StepShape, Sharding]:
    """What decides the memory of one rank's step, read from the experiment's typed values (no parsing, and no
    Trainer object: a GPU experiment is planned on any machine)."""
    from tunebench.experiment.entry_parser import checkpointing_on

    model = ModelArguments(**spec.entry.get("model", {}))
    data = DataArguments(**spec.entry.get("data", {}))
    peft = PeftArguments(**spec.entry.get("peft", {}))
    training = spec.entry.get("training", {})
    fsdp_setting = fsdp_of(training) if spec.num_gpus > 1 else None
    fsdp = fsdp_setting is not None
    dtype = "float32" if model.torch_dtype == "auto" else model.torch_dtype
    padded = not (data.synthetic_length_distribution == "fixed" and data.training_data_path == "synthetic")
    packed = bool(spec.value("training", "packing") and spec.value("training", "padding_free"))
    if packed:
        padded = False
    optim = spec.value("training", "optim")
    quantization = quantization_of(model, sharded=fsdp)
    if not quantization.enabled:  # fms-acceleration's loaders (planning.fms_bases)
        quantization = bnb_quantization(model, dtype, fsdp) or quantization
    shape = StepShape(
        model=model.model_name_or_path, dtype=dtype, micro_batch=spec.value("training", "per_device_train_batch_size"),
        seq_len=data.max_seq_len, padded=padded, packed=packed,
        grad_accum=spec.value("training", "gradient_accumulation_steps"),
        peft=peft.peft_method, lora_r=peft.r, lora_alpha=peft.lora_alpha, lora_targets=tuple(peft.target_modules),
        virtual_tokens=peft.num_virtual_tokens,
        checkpointing=checkpointing_on(training),
        autocast_bf16=bool(spec.value("training", "bf16") or spec.value("training", "fp16")),
        autocast_fp16=bool(spec.value("training", "fp16")),
        attn_implementation=model.attn_implementation,
        optimizer=_optimizer_kind(getattr(optim, "value", str(optim))),
        quantization=quantization if quantization.enabled else None,
        gptq=gptq_plan(model, _model_type(model.model_name_or_path), sharded=fsdp),
        # FSDP runs in the fake step itself (planning.sharded_step)
        fsdp=fsdp_setting, world=spec.num_gpus if fsdp else 1,
        last_bit=bool(spec.value("bench", "loss_band_seed")) and spec.value("bench", "loss_band_kind") == "last_bit",
        **shape_fields(spec, quantization.enabled),
    )
    return shape, Sharding(world=spec.num_gpus, fsdp=fsdp, ddp=spec.num_gpus > 1 and not fsdp)


def _model_type(model_name_or_path: str) -> str | None:
    from tunebench.experiment.models import load_config

    try:
        return getattr(load_config(model_name_or_path), "model_type", None)
    except (OSError, ValueError):  # a hub id without the network: Llama's GPTQ definition
        return None


def predict(shape: StepShape, sharding: Sharding, cuda: bool, cache: dict | None = None,
            gpu_arch: int | None = None) -> dict[str, Any]:
    """`pred_mem_*` columns of one rank (bytes), `pred_attention` and `pred_seconds`. `gpu_arch`: the CUDA
    target's compute capability (the GPU table's, planning.gpu_target; Hopper when unknown)."""
    from tunebench.planning.attention_kernels import HOPPER

    started = time.monotonic()
    arch = (gpu_arch or HOPPER) if cuda else None
    key = (shape, cuda, arch)
    step = cache.get(key) if cache is not None else None
    if step is None:
        step = predict_step(shape, round_to_cuda_blocks=cuda, gpu_arch=arch)
        if cache is not None:
            cache[key] = step
    step = dict(step)
    attention = step.pop("attention")
    activations_max = step.pop("activations_max")
    grads_full = step.pop("grads_full")
    quant_state = step.pop("quant_state", 0)
    kept = step.pop("kept", 0)
    autotune_step1 = step.pop("autotune_step1", 0)
    unverified = step.pop("compile_unverified", 0)
    if not cuda:
        # On CPU there is no allocator peak: the scanner's activations are their maximum over the step, and its
        # gradients every gradient at its full size.
        step["activations"] = activations_max
        step["grads"] = grads_full
    other = (CUBLAS_WORKSPACES if cuda else 0) + kept
    if sharding.ddp and cuda:
        other += step["grads"] or _trainable_bytes(step)  # DDP's buckets hold a copy of every gradient
    row = {f"pred_mem_{name}": step[name] for name in CATEGORIES}
    row["pred_mem_other"] = other
    row["pred_mem_quant_state"] = quant_state  # the part of pred_mem_params that is quantization state
    row["pred_mem_peak"] = sum(step[name] for name in CATEGORIES) + other
    if autotune_step1 and autotune_step1 + other > row["pred_mem_peak"]:
        # max-autotune: the run's peak is step 1's autotuning, above the steady step's; the steady step's
        # categories are kept, and what step 1 adds above them is its benchmarks' buffers (temporaries)
        row["pred_mem_temporaries"] += autotune_step1 + other - row["pred_mem_peak"]
        row["pred_mem_peak"] = autotune_step1 + other
    # what a setting whose figure is not exact adds to the peak's bound (planning.accelerations)
    row["pred_mem_bound_extra"] = bound_extra(row["pred_mem_peak"], shape.compile_mode, unverified)
    row["pred_attention"] = attention
    row["pred_seconds"] = time.monotonic() - started
    return row


def _trainable_bytes(step: dict[str, int]) -> int:
    return step["optimizer"] // 2  # AdamW keeps two states the size of the trainable parameters


def fit_columns(peak: int, capacity: int | None, slack: int = 0) -> dict[str, Any]:
    """`pred_mem_reserved` (the peak plus the allocator's `slack`), and whether it stays within the capacity less
    CONTEXT_RESERVE (a tenth of it for small budgets)."""
    reserved = peak + slack
    if capacity is None:  # no device to judge against (0 bytes is a device where nothing fits)
        return {"pred_mem_reserved": reserved, "pred_capacity_bytes": None, "pred_fits": None,
                "pred_fit_margin_bytes": None}
    usable = capacity - min(CONTEXT_RESERVE, capacity // 10)
    return {"pred_mem_reserved": reserved, "pred_capacity_bytes": capacity, "pred_fits": reserved <= usable,
            "pred_fit_margin_bytes": usable - reserved}


def reserved_bytes(prediction: dict[str, Any]) -> int | None:
    """What a prediction needs reserved (fit_columns): its reserved figure, else its peak (older rows)."""
    for key in ("pred_mem_reserved", "pred_mem_peak"):
        value = prediction.get(key)
        if isinstance(value, (int, float)) and not (isinstance(value, float) and math.isnan(value)):
            return int(value)
    return None


def usable_bytes(prediction: dict[str, Any]) -> int | None:
    """The capacity a prediction was judged against (fit_columns: capacity less the context reserve)."""
    reserved, margin = reserved_bytes(prediction), prediction.get("pred_fit_margin_bytes")
    if reserved is None or not isinstance(margin, (int, float)):
        return None
    return int(reserved + margin)


def _optimizer_kind(optim: str) -> str:
    """The AdamW implementation a TrainingArguments `optim` name selects (its transients differ)."""
    if "fused" in optim:
        return "fused"
    return "foreach" if optim.startswith("adamw") else "loop"
