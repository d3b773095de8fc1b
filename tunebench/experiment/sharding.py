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
WORDS = (*STRATEGIES, "offload", "auto_wrap")
VERSIONS = (1, 2)


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
    """The FSDP setting of a training group's typed values (or a results row's), None when the run does not shard.
    Both forms transformers reads: `fsdp: true` with everything in `fsdp_config` (FSDP1's strategy as its
    `reshard_after_forward`), and the deprecated words (`fsdp: full_shard auto_wrap offload`), which it turns into
    the same `fsdp_config` entries where the config does not already give them (setdefault: the config wins)."""
    words = _words(training.get("fsdp"))
    if words is None:
        return None
    config = config_dict(training.get("fsdp_config"))
    version = _version(config.get("version", 2))
    reshard = config.get("reshard_after_forward")
    strategy = next((w for w in words if w in STRATEGIES), "full_shard")
    if version == 1 and isinstance(reshard, str) and reshard.lower() in STRATEGIES:
        strategy = reshard.lower()
    if version == 1 or reshard is None:
        reshard = strategy != "shard_grad_op"
    prefetch = str(config.get("backward_prefetch") or "NO_PREFETCH").upper()
    return Fsdp(version=version, strategy=strategy, reshard_after_forward=_true(reshard),
                activation_checkpointing=_true(config.get("activation_checkpointing", False)),
                offload="offload" in words or _true(config.get("cpu_offload", False)),
                backward_prefetch=prefetch if prefetch in ("BACKWARD_PRE", "BACKWARD_POST") else "NO_PREFETCH",
                forward_prefetch=_true(config.get("forward_prefetch", False)))


def _words(value: Any) -> list[str] | None:
    """`fsdp` as its words ([] for `true`: everything is in fsdp_config); None when the run does not shard (unset:
    None, False, an empty or `false` text, or a CSV's empty cell, NaN)."""
    if value is True:
        return []
    if isinstance(value, (list, tuple)):
        value = " ".join(str(w) for w in value)
    if not isinstance(value, str) or value.strip().lower() in ("", "false", "none", "0", "no"):
        return None
    words = value.lower().split()
    return [] if words in (["true"], ["1"], ["yes"]) else words


def _version(value: Any) -> int:
    """fsdp_config's version as transformers reads it (int(...)); 2 for anything fsdp_problems refuses."""
    try:
        version = int(value)
    except (TypeError, ValueError, OverflowError):
        return 2
    return version if version in VERSIONS else 2


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


# transformers' str_to_bool, which reads fsdp_config's switches as str(value).lower()
TRUE_WORDS, FALSE_WORDS = ("y", "yes", "t", "true", "on", "1"), ("n", "no", "f", "false", "off", "0")


def _true(value: Any) -> bool:
    return str(value).strip().lower() in TRUE_WORDS if isinstance(value, str) else bool(value)


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
    if fsdp.version == 1 and weights_dtype == "auto":
        # auto is the checkpoint's dtype, known only once it loads: no storage can be chosen to match it
        return ("FSDP1 flattens a layer's parameters into one tensor of one dtype, and with torch_dtype auto the "
                "weights' dtype is the checkpoint's, unknown until it loads, so the 4-bit weights' storage cannot be "
                "matched to it: set torch_dtype (e.g. bfloat16; bnb_4bit_quant_storage auto then follows it), or "
                "use FSDP2 (fsdp2)")
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


# fsdp_config's keys as TrainingArguments._process_fsdp_args reads them (an `fsdp_` prefix is dropped first); any
# other key it ignores without a word, so one is refused here. By the value each takes:
_SWITCHES = ("activation_checkpointing", "cpu_offload", "use_orig_params", "sync_module_states", "forward_prefetch",
             "limit_all_gathers", "cpu_ram_efficient_loading", "xla", "xla_fsdp_v2", "xla_fsdp_grad_ckpt")
_CHOICES = {"auto_wrap_policy": ("TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"),
            "backward_prefetch": ("BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"),
            "state_dict_type": ("FULL_STATE_DICT", "LOCAL_STATE_DICT", "SHARDED_STATE_DICT")}
CONFIG_KEYS = ("version", "reshard_after_forward", *_SWITCHES, *_CHOICES, "min_num_params",
               "transformer_layer_cls_to_wrap", "xla_fsdp_settings")
CONFIG_FIX = ("e.g. fsdp: true with fsdp_config: {version: 2, reshard_after_forward: true} (FSDP1: version: 1, "
              "reshard_after_forward: full_shard or shard_grad_op)")


def _switch(value: Any) -> bool:
    """What transformers reads as true or false (str_to_bool of the value's text)."""
    return str(value).lower() in (*TRUE_WORDS, *FALSE_WORDS) and isinstance(value, (bool, int, str))


def _shown(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _config_problems(config: dict, version: int) -> list[tuple[str, str, str]]:
    found = []
    for raw_key, value in config.items():
        key = str(raw_key).removeprefix("fsdp_")
        where = f"fsdp_config.{str(raw_key)[:60]}"
        if key not in CONFIG_KEYS:
            found.append((where, "unknown key: transformers reads no fsdp_config key of that name (it would be "
                                 "ignored)", f"one of {', '.join(CONFIG_KEYS)}"))
        elif key == "reshard_after_forward" and version == 1:
            if not (isinstance(value, str) and value.strip().lower() in STRATEGIES):
                found.append((where, f"FSDP1 takes a sharding strategy, got {_shown(value)}",
                              f"one of {', '.join(STRATEGIES)}"))
        elif key == "reshard_after_forward" and not _switch(value):
            found.append((where, f"FSDP2 takes true or false, got {_shown(value)}",
                          "true (free a layer's gathered weights after its forward) or false"))
        elif key in _SWITCHES and not _switch(value):
            found.append((where, f"expected true or false, got {_shown(value)}", "true or false"))
        elif key in _CHOICES and not (isinstance(value, str) and value.upper() in _CHOICES[key]):
            found.append((where, f"expected one of {', '.join(_CHOICES[key])}, got {_shown(value)}",
                          f"one of {', '.join(_CHOICES[key])}"))
        elif key == "min_num_params" and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            found.append((where, f"expected a whole number >= 0, got {_shown(value)}",
                          "e.g. min_num_params: 100000000"))
        elif key == "transformer_layer_cls_to_wrap" and not (
                isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))):
            found.append((where, f"expected a class name or a list of them, got {_shown(value)}",
                          "e.g. [LlamaDecoderLayer]"))
        elif key == "xla_fsdp_settings" and not isinstance(value, dict):
            found.append((where, f"expected a mapping, got {_shown(value)}", "a mapping of XLA FSDP settings"))
    return found


def fsdp_problems(values: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(key, message, fix) for every part of `fsdp` / `fsdp_config` (a training group's values, or a results row's,
    where fsdp_config is JSON text) that transformers would refuse with a bare error (`int()` of a list, of 'two')
    or ignore without a word: the one checker of these nested arguments, for the matrix and for a results folder."""
    found: list[tuple[str, str, str]] = []
    raw = values.get("fsdp")
    if raw is not None and not isinstance(raw, (bool, str, list, tuple)) and raw == raw:  # NaN: a CSV's empty cell
        found.append(("fsdp", f"expected true, false or transformers' words, got {_shown(raw)}", CONFIG_FIX))
    words = _words(raw) if isinstance(raw, (bool, str, list, tuple)) else None
    for word in [w for w in words or () if w not in WORDS][:3]:
        found.append(("fsdp", f"unknown word {word[:40]!r}", f"{CONFIG_FIX}; the words transformers still reads: "
                                                            f"{', '.join(WORDS)}"))
    config = values.get("fsdp_config")
    if config is None or (isinstance(config, float) and config != config) or config == "":
        return found
    parsed = config_dict(config)
    if not parsed and config not in ({}, "{}"):
        return [*found, ("fsdp_config", f"expected a mapping, got {_shown(config)}", CONFIG_FIX)]
    version = parsed.get("version", parsed.get("fsdp_version", 2))
    if isinstance(version, bool) or str(version).strip() not in ("1", "2"):
        found.append(("fsdp_config.version", f"expected 1 or 2, got {_shown(version)}",
                      "version: 2 (FSDP2, fully_shard) or version: 1 (FullyShardedDataParallel)"))
    version = _version(version)
    found += _config_problems(parsed, version)
    only_fsdp1 = [w for w in words or () if w in STRATEGIES and w not in ("full_shard", "shard_grad_op")]
    if version == 2 and only_fsdp1:
        found.append(("fsdp", f"{only_fsdp1[0]} is FSDP1's strategy", "fsdp_config: {version: 1} for it, or "
                                                                       "full_shard / shard_grad_op with FSDP2"))
    return found
