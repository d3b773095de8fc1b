"""Quantized bases (bitsandbytes 4-bit and 8-bit): the typed setting, its checks, and the loader path.

A user's checkpoint is quantized by transformers' `from_pretrained(..., quantization_config=BitsAndBytesConfig)`.
A preset or a config-only folder has no checkpoint, so its random weights are first written as one (once per
architecture, dtype, seed and init device, in `$TUNEBENCH_CACHE/models`) and then loaded through exactly that
path: the packed weights, their quantization state and the modules are what a real checkpoint would give.
The random weights are the ones the unquantized baseline trains (same seed, same init device), so the loss
parity of a quantized row against its baseline measures the quantization and nothing else.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import logging
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunebench.experiment.arguments import INT8_THRESHOLD, group_value
from tunebench.fileio import cache_dir

logger = logging.getLogger(__name__)

QUANT_FIX = "pip install 'tunebench[quant]' (bitsandbytes)"
# The RNG state right after the random init: restored after loading, so what draws next (LoRA's init) draws
# exactly what it draws after the unquantized baseline's init, whether the checkpoint was written now or reused.
RNG_FILE = "tunebench_rng_state.pt"


@dataclass(frozen=True)
class Quantization:
    """What quantizes the base: `none`, `bnb-4bit` or `bnb-8bit`, and the 4-bit settings."""

    method: str = "none"
    quant_type: str = "nf4"
    double_quant: bool = False
    compute_dtype: str = "bfloat16"
    int8_threshold: float = INT8_THRESHOLD
    storage: str = "uint8"  # 4-bit: the dtype the packed weights are stored in (a float one lets FSDP shard them)

    @property
    def enabled(self) -> bool:
        return self.method != "none"

    def label(self) -> str:
        """The row's `quantization` column: e.g. `bnb-4bit-nf4-dq`, `bnb-8bit`, `none`."""
        if self.method == "bnb-8bit" and self.int8_threshold != INT8_THRESHOLD:
            return f"bnb-8bit-t{self.int8_threshold:g}"  # not bitsandbytes' default split: a different row
        if self.method != "bnb-4bit":
            return self.method
        storage = "" if self.storage == "uint8" else f"-{self.storage}-storage"
        return f"bnb-4bit-{self.quant_type}" + ("-dq" if self.double_quant else "") + storage


FLOAT_STORAGE = ("bfloat16", "float16", "float32")


def bit_widths(model: Mapping[str, Any] | Any) -> tuple[bool, bool]:
    """(load_in_4bit, load_in_8bit) of the model group's typed values (a spec's `entry["model"]`, or ModelArguments):
    the one reader of the two switches."""
    return bool(group_value("model", model, "load_in_4bit")), bool(group_value("model", model, "load_in_8bit"))


def quantization_of(model: Mapping[str, Any] | Any, sharded: bool = False) -> Quantization:
    """The typed setting of the model group's typed values (a spec's `entry["model"]`, or ModelArguments): the
    one reader of the bnb_* keys. `sharded`: the run shards its parameters (FSDP), where
    `bnb_4bit_quant_storage: auto` stores the 4-bit weights in the weights' own dtype, so FSDP shards them like
    the rest (uint8-stored ones it cannot: accelerate leaves them whole on every rank)."""
    four, eight = bit_widths(model)
    setting = functools.partial(group_value, "model", model)
    if four:
        storage = setting("bnb_4bit_quant_storage") or "auto"
        if storage == "auto":
            dtype = str(setting("torch_dtype"))
            storage = (dtype if dtype in FLOAT_STORAGE else "bfloat16") if sharded else "uint8"
        return Quantization("bnb-4bit", setting("bnb_4bit_quant_type"), bool(setting("bnb_4bit_use_double_quant")),
                            setting("bnb_4bit_compute_dtype"), storage=storage)
    if eight:
        return Quantization("bnb-8bit", int8_threshold=float(setting("llm_int8_threshold")))
    return Quantization()


def setting_problem(values: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(key, message, fix) when the typed model values ask for something that cannot be: both bit widths at
    once, or a quantized base without bitsandbytes installed here."""
    four, eight = bit_widths(values)
    if four and eight:
        return ("load_in_8bit", "load_in_4bit and load_in_8bit are both true", "choose one bit width")
    if (four or eight) and importlib.util.find_spec("bitsandbytes") is None:
        return ("load_in_4bit" if four else "load_in_8bit", "a quantized base needs bitsandbytes, which is not "
                "installed", QUANT_FIX)
    return None


def skip_reason(quantization: Quantization, peft_method: str) -> str | None:
    """Why an experiment with a quantized base cannot run as asked: only adapters train on packed weights."""
    if quantization.enabled and peft_method != "lora":
        return (f"a {quantization.label()} base has frozen packed weights: only LoRA adapters train on it "
                f"(peft_method is {peft_method!r}; pair this framework config with a LoRA scenario)")
    return None


def bnb_config(quantization: Quantization):
    """transformers' BitsAndBytesConfig for the setting (None when not quantized)."""
    if not quantization.enabled:
        return None
    import torch
    from transformers import BitsAndBytesConfig

    if quantization.method == "bnb-8bit":
        return BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=quantization.int8_threshold)
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=quantization.quant_type,
                              bnb_4bit_use_double_quant=quantization.double_quant,
                              bnb_4bit_compute_dtype=getattr(torch, quantization.compute_dtype),
                              bnb_4bit_quant_storage=getattr(torch, quantization.storage))


def adapters_in_bfloat16(model) -> None:
    """TRL's SFTTrainer keeps a quantized base's LoRA adapters in bf16 (QLoRA's recipe), where PEFT made them
    float32: the same cast (the fake step applies it to its meta model)."""
    import torch

    for param in model.parameters():
        if param.requires_grad:
            param.data = param.data.to(torch.bfloat16)


def cache_root() -> Path:
    return cache_dir("models")


def _save_pretrained(model, folder: Path) -> None:
    model.save_pretrained(folder, is_main_process=True)


def random_checkpoint(config, dtype, seed: int, init_device: str, build, kind: str = "",
                      save=_save_pretrained) -> Path:
    """A checkpoint folder holding `build()`'s random weights, written by `save(model, folder)` (transformers'
    save_pretrained, or another format named by `kind`) once per (architecture, dtype, seed, init device kind, kind)
    and reused: the random init depends on the first four. Written into a temporary folder and renamed, so a
    concurrent experiment never reads half a checkpoint."""
    device_kind = str(init_device).split(":")[0]
    identity = {"config": config.to_dict(), "dtype": str(dtype), "seed": seed, "device": device_kind}
    if kind:  # absent for transformers' own format: the folders written before kinds existed keep their names
        identity["kind"] = kind
    key = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]
    folder = cache_root() / f"{getattr(config, 'model_type', 'model')}-{kind + '-' if kind else ''}{key}"
    if (folder / "config.json").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        model = build()
        save(model, staging)
        if not (staging / "config.json").is_file() or not any(staging.glob("*.safetensors*")):
            # transformers writes nothing from a distributed rank other than 0 (should_save_on_this_rank): renamed
            # into place, this empty folder would be the checkpoint every later experiment loads. The training
            # entry lets the main process write first (train.py); reaching here is a bug, said as one.
            raise RuntimeError(f"the random checkpoint was not written into {staging} (files: "
                               f"{sorted(p.name for p in staging.iterdir())}); was this a distributed rank other than "
                               f"0?")
        _save_rng_state(staging / RNG_FILE, init_device)
        del model
        _free_device_memory()
        try:
            staging.rename(folder)
        except OSError:  # another experiment renamed its copy first: theirs is the same weights
            shutil.rmtree(staging, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    logger.info("wrote the random weights as a checkpoint for quantized loading: %s", folder)
    return folder


def _save_rng_state(path: Path, init_device: str) -> None:
    import torch

    state = {"cpu": torch.get_rng_state()}
    if str(init_device).startswith("cuda"):
        state["cuda"] = torch.cuda.get_rng_state(init_device)
    torch.save(state, path)


def restore_rng_state(folder: Path, init_device: str) -> None:
    """Put the RNG where the random init left it (see RNG_FILE); a user's checkpoint has no such file."""
    import torch

    path = Path(folder) / RNG_FILE
    if not path.is_file():
        return
    state = torch.load(path, weights_only=True)
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and str(init_device).startswith("cuda"):
        torch.cuda.set_rng_state(state["cuda"], init_device)


def _free_device_memory() -> None:
    """The random model was built on the GPU to be written out: its memory must not count in the run's peaks."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
