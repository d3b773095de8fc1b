"""An experiment's FSDP setting, typed once from its training values (`fsdp`, `fsdp_config`): which FSDP, what it
shards, what it keeps, and which quantized bases it can shard."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

# transformers' `fsdp` words (TrainingArguments.fsdp): the sharding strategy, and the two switches beside it.
STRATEGIES = ("full_shard", "shard_grad_op", "hybrid_shard", "hybrid_shard_zero2", "no_shard")


@dataclass(frozen=True)
class Fsdp:
    """What FSDP does to one experiment's parameters (transformers' defaults where the values say nothing)."""

    version: int = 2  # transformers' default: FSDP2 (fully_shard); 1 = FullyShardedDataParallel (flat parameters)
    strategy: str = "full_shard"  # FSDP1's sharding strategy; FSDP2 shards whole (reshard_after_forward decides)
    reshard_after_forward: bool = True  # FSDP2: free a layer's gathered parameters after its forward
    activation_checkpointing: bool = False  # FSDP's own checkpointing of every wrapped layer
    offload: bool = False  # parameters and optimizer state on the host
    # FSDP1: gather the next unit's parameters before this one's backward (`BACKWARD_PRE`) or after it
    # (`BACKWARD_POST`): one more unit's full parameters alive in backward. The Trainer's default: no prefetch.
    backward_prefetch: str = "NO_PREFETCH"
    forward_prefetch: bool = False  # FSDP1: the next unit's parameters gathered during this one's forward

    @property
    def label(self) -> str:
        return f"fsdp{self.version}" if self.version == 2 else f"fsdp1-{self.strategy}"


def fsdp_of(training: dict[str, Any]) -> Fsdp | None:
    """The FSDP setting of a training group's typed values, None when the run does not shard."""
    words = training.get("fsdp")
    if words is True:  # TrainingArguments' own value once it has read the words
        words = "full_shard"
    if not isinstance(words, (str, list, tuple)):  # unset: None, False, or a CSV's empty cell (NaN)
        return None
    if isinstance(words, (list, tuple)):
        words = " ".join(str(w) for w in words)
    if not words or str(words).strip().lower() in ("false", "none"):
        return None
    words = str(words).lower().split()
    config = config_dict(training.get("fsdp_config"))
    strategy = next((w for w in words if w in STRATEGIES), "full_shard")
    version = int(config.get("version", 2) or 2)
    reshard = config.get("reshard_after_forward", strategy != "shard_grad_op")
    prefetch = str(config.get("backward_prefetch") or "NO_PREFETCH").upper()
    return Fsdp(version=version, strategy=strategy, reshard_after_forward=_true(reshard),
                activation_checkpointing=_true(config.get("activation_checkpointing", False)),
                offload="offload" in words or _true(config.get("cpu_offload", False)),
                backward_prefetch=prefetch if prefetch in ("BACKWARD_PRE", "BACKWARD_POST") else "NO_PREFETCH",
                forward_prefetch=_true(config.get("forward_prefetch", False)))


def parallelism_of(num_gpus: int, training: dict[str, Any]) -> str:
    """How a run of `num_gpus` shares its work: `single` (one GPU), `ddp`, `fsdp2` or `fsdp1-<strategy>`."""
    if num_gpus <= 1:
        return "single"
    fsdp = fsdp_of(training)
    return "ddp" if fsdp is None else fsdp.label


def config_dict(value: Any) -> dict:
    """fsdp_config as given: a dict, or JSON text (what argparse leaves for dict-typed Trainer fields)."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value.strip().startswith("{"):
        try:
            loaded = json.loads(value)
        except ValueError:
            return {}
        return loaded if isinstance(loaded, dict) else {}
    return {}


def _true(value: Any) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes") if isinstance(value, str) else bool(value)


def quantized_skip_reason(fsdp: Fsdp | None, quantization, weights_dtype: str) -> str | None:
    """Why FSDP cannot shard this quantized base as asked (the row is `skipped` with it), or None.

    * LLM.int8 weights (bitsandbytes' Int8Params, int8 data with row scales beside it) cannot be sharded.
    * FSDP1 flattens each wrapped layer's parameters into one tensor of one dtype: a 4-bit weight can join it only
      when it is stored in the weights' dtype (`bnb_4bit_quant_storage` = that dtype; `auto` does that).
    FSDP2 takes a uint8-stored 4-bit weight, but leaves it whole on every rank (accelerate excludes it from
    sharding): it runs, and the plan says so; a float-stored one it shards like the rest."""
    if fsdp is None or quantization is None or not quantization.enabled:
        return None
    if quantization.method == "bnb-8bit":
        return ("FSDP cannot shard an 8-bit (LLM.int8) base: its int8 weights keep per-row scales outside the "
                "tensor (run lora-int8 without FSDP, or a 4-bit base: load_in_4bit)")
    if fsdp.version == 1 and quantization.storage != weights_dtype:
        return (f"FSDP1 flattens a layer's parameters into one tensor of one dtype, which "
                f"{quantization.storage}-stored "
                f"4-bit weights beside {weights_dtype} ones cannot join: set bnb_4bit_quant_storage to "
                f"{weights_dtype} (or auto)")
    return None


def fused_fp16_skip_reason(fsdp: Fsdp | None, training: dict[str, Any], device_type: str) -> str | None:
    """Why fp16 under FSDP1 cannot step a fused optimizer on CUDA (the row is `skipped` with it), or None.

    FSDP1 runs fp16 with its ShardedGradScaler, whose `found_inf` is a one-element tensor (`torch.full((1,), ...)`)
    where torch.amp's GradScaler makes a scalar (`torch.full((), ...)`); the fused AdamW kernel takes only the
    scalar: "output with shape [] doesn't match the broadcast shape [1]" at the first step (H200, torch 2.11:
    fms-acceleration's GPTQ configs, which run fp16, under FSDP1; docs/evidence/fms-acceleration-h200.md)."""
    if fsdp is None or fsdp.version != 1 or device_type != "cuda" or not training.get("fp16"):
        return None
    optim = str(getattr(training.get("optim"), "value", training.get("optim")) or "")
    if "fused" not in optim:
        return None
    return (f"fp16 under FSDP1 with the fused optimizer {optim}: FSDP1's ShardedGradScaler hands the fused kernel a "
            "one-element found_inf where it takes a scalar, and the first step fails (set optim: adamw_torch, or "
            "run FSDP2)")
