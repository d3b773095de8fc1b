"""What an acceleration setting needs, checked before anything runs: installed kernels, a device with a kernel
for it, supported models. Input problems are exit 2 (one line, with the fix); an experiment the setting cannot
apply to (a model Liger has no kernels for, a quantized base without adapters) is `skipped` with the reason,
so a matrix that crosses settings and models still runs the rest."""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass

from tunebench.experiment.fms import applicability as fms_applicability
from tunebench.experiment.quantization import QUANT_FIX, quantization_of, setting_problem
from tunebench.experiment.quantization import skip_reason as quantized_skip_reason

logger = logging.getLogger(__name__)

LIGER_FIX = "pip install 'tunebench[liger]' (liger-kernel)"
# TrainingArguments.torch_compile_mode is free text; these are the modes torch.compile takes (None: default).
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
# Attention implementations transformers knows without a hub kernel; flash-attn's need the package.
ATTENTION_NEEDS = {"flash_attention_2": "flash_attn", "flash_attention_3": "flash_attn_interface"}


def needs_bitsandbytes(optim: str) -> bool:
    """transformers' optimizers that bitsandbytes implements: the 8-bit and paged ones, Lion, RMSprop's bnb."""
    return "bnb" in optim or "8bit" in optim or optim.startswith(("paged_", "lion"))


@dataclass(frozen=True)
class Problem:
    key: str
    message: str
    fix: str


def problems(entry: dict[str, dict], device_type: str, installed_here: bool = True) -> list[Problem]:
    """Exit-2 problems of one experiment's typed values (entry: {group: {key: value}}) on `device_type`.
    `installed_here`: the experiment could run on this machine, so its kernels must be installed here (a CUDA
    experiment on a machine without GPUs is planned or written out for another: its GPU kernels are not)."""
    model, training = entry.get("model", {}), entry.get("training", {})
    found: list[Problem] = []
    quant = setting_problem(model)
    if quant:
        found.append(Problem(*quant))
    if training.get("use_liger_kernel"):
        if importlib.util.find_spec("liger_kernel") is None and (installed_here or device_type != "cuda"):
            found.append(Problem("use_liger_kernel", "Liger kernels need liger-kernel, which is not installed",
                                 LIGER_FIX))
        elif device_type == "cpu":
            found.append(Problem("use_liger_kernel", "Liger's kernels are Triton GPU kernels: there is none for "
                                 "the CPU", "run liger-kernels on a GPU (or drop it from a CPU scenario set)"))
    optim = str(training.get("optim") or "")
    if needs_bitsandbytes(optim) and importlib.util.find_spec("bitsandbytes") is None:
        found.append(Problem("optim", f"{optim} is bitsandbytes' optimizer, which is not installed", QUANT_FIX))
    mode = training.get("torch_compile_mode")
    if mode is not None and mode not in COMPILE_MODES:
        found.append(Problem("torch_compile_mode", f"unknown torch.compile mode {mode!r}",
                             "use one of " + ", ".join(COMPILE_MODES)))
    attention = attention_problem(model.get("attn_implementation"))
    found += [Problem(*problem) for problem in fms_applicability.problems(model, device_type, installed_here)]
    return found + ([attention] if attention else [])


def attention_implementations() -> list[str]:
    """The attention implementations this transformers accepts by name (its AttentionInterface, and eager)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    return ["eager", *sorted(ALL_ATTENTION_FUNCTIONS.valid_keys())]


def attention_problem(attention: str | None) -> Problem | None:
    """Why this transformers cannot run `attention` (None: it can, as far as a check before loading tells): a name
    it does not know (it would fail as the model loads, in every experiment), a flash-attn kernel whose package is
    absent, or a hub kernel (`org/name`) without the `kernels` package."""
    if attention is None:
        return None
    from transformers.integrations.hub_kernels import is_kernel

    known = attention_implementations()
    if attention not in known and not is_kernel(attention):
        return Problem("attn_implementation", f"unknown attention implementation {str(attention)[:60]!r}",
                       f"one of: {', '.join(known)} (or a hub kernel `org/name` with the kernels package)")
    needs = ATTENTION_NEEDS.get(attention) or ("kernels" if is_kernel(attention) else None)
    if needs and importlib.util.find_spec(needs) is None:
        return Problem("attn_implementation", f"{attention} needs the {needs} package, which is not installed",
                       "install it, or use sdpa, eager or flex_attention")
    return None


def skip_reason(entry: dict[str, dict], model_name_or_path: str, device_type: str = "cuda") -> str | None:
    """Why a setting does not apply to this experiment on `device_type` (the row is `skipped` with it), or None."""
    from tunebench.experiment.arguments import group_value
    from tunebench.experiment.sharding import fsdp_of, fused_fp16_skip_reason
    from tunebench.experiment.sharding import quantized_skip_reason as sharded_skip_reason

    model = entry.get("model", {})
    fsdp = fsdp_of(entry.get("training", {}))
    quantization = quantization_of(model, sharded=fsdp is not None)
    reason = (quantized_skip_reason(quantization, entry.get("peft", {}).get("peft_method", "none"))
              or sharded_skip_reason(fsdp, quantization, str(group_value("model", model, "torch_dtype"))))
    reason = reason or fused_fp16_skip_reason(fsdp, entry.get("training", {}), device_type) \
        or fms_applicability.skip_reason(model, entry.get("peft", {}).get("peft_method", "none"),
                                         model_name_or_path, device_type)
    if reason:
        return reason
    if entry.get("training", {}).get("use_liger_kernel"):
        return liger_unsupported(model_name_or_path)
    return None


def liger_model_types() -> set[str] | None:
    """The model types liger-kernel has kernels for (None when it is not installed)."""
    try:
        from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN
    except ImportError:
        return None  # problems() reports the missing package
    return set(MODEL_TYPE_TO_APPLY_LIGER_FN)


def liger_unsupported(model_name_or_path: str, supported: set[str] | None = None) -> str | None:
    """Liger applies kernels by model type; for another type transformers only logs a warning and trains the
    plain model, which would be a baseline row labelled liger. None when supported or not knowable offline."""
    supported = liger_model_types() if supported is None else supported
    if supported is None:
        return None
    from tunebench.experiment.models import load_config, resolve_model_source

    if resolve_model_source(model_name_or_path).kind == "hub":
        return None  # its config needs the network; the run's log says it if Liger skips it
    model_type = getattr(load_config(model_name_or_path), "model_type", None)
    if model_type in supported:
        return None
    return (f"Liger has no kernels for model type {model_type!r} (liger-kernel supports: "
            + ", ".join(sorted(supported)) + ")")
