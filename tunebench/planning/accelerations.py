"""The settings users turn on to save memory, as the plan models them: torch.compile, Liger's kernels and flex
attention. Which of them an experiment turns on (its shape's fields), what its `pred_note` says about how each was
modelled, and how much wider its bound is where a setting's figure is not exact.

  * torch.compile: AOTAutograd's partition and inductor's memory plan, replayed on fake tensors
    (planning.compiled_step). Modes other than the default run the default's plan: max-autotune's Triton matmul
    templates are not planned (their fused epilogues can only remove buffers). A max-autotune run's peak is step
    1's autotuning, planned too (compiled_step.step1_autotune): each graph's entry as step 1 holds it plus its
    costliest matmul's benchmark inputs, output and decompose-K partial sums;
  * Liger: its kernels' own allocations (planning.liger_kernels), on the layers Liger's own apply function of the
    model type replaces (planning.liger_patches);
  * flex attention: the compiled kernels' outputs and saved tensors (planning.kernel_ops).
"""

from __future__ import annotations

import logging

from tunebench.experiment.spec import ExperimentSpec

logger = logging.getLogger(__name__)

# The largest under-prediction of a compiled step's peak measured on a GPU (max_memory_allocated over the run
# against the plan made on a CPU host): the bound's margin for torch.compile rows (eager rows keep theirs,
# planning.residuals). H100, docs/evidence/acceleration-h100 (torch 2.11): full-1b 23.097 GiB measured, 22.936 GiB
# planned (−0.70 %); lora-1b −0.19 %; lora-8b −0.09 %.
COMPILE_UNDER = 0.0070
# max-autotune's step-1 peak as planned leaves out inductor's L2-flush buffer (the GPU's L2, 50 MiB on H100) and
# other candidates' benchmark outputs still alive: the largest under-prediction measured, the bound's extra margin.
# H100 (docs/evidence/acceleration-memory-h100.md section 6): LoRA on llama-3.2-1b, llama-3.1-8b, qwen3-1.7b,
# smollm3 at 8, 4, 4, 4 x 1024 tokens: -1.24, -0.84, -0.39, -1.81 %.
AUTOTUNE_UNDER = 0.020


def compile_mode(spec: ExperimentSpec) -> str | None:
    """torch.compile's mode when the experiment compiles (`default` for TrainingArguments' None), else None."""
    if not spec.value("training", "torch_compile"):
        return None
    return spec.value("training", "torch_compile_mode") or "default"


def liger_on(spec: ExperimentSpec) -> bool:
    return bool(spec.value("training", "use_liger_kernel"))


def shape_fields(spec: ExperimentSpec, quantized: bool) -> dict:
    """The StepShape fields of the experiment's acceleration settings. A compiled quantized base is planned eagerly
    (bitsandbytes' kernels under dynamo are not modelled: the note says so)."""
    mode = compile_mode(spec)
    return {"compile_mode": None if quantized else mode, "liger": liger_on(spec)}


def notes(spec: ExperimentSpec, shape, model_type: str | None) -> tuple[list[str], list[str]]:
    """(how the settings were modelled, what of them was not), for pred_note."""

    modelled, not_modelled = [], []
    mode = compile_mode(spec)
    if mode and shape.compile_mode:
        text = (f"torch.compile ({mode}): AOTAutograd's min-cut partition and inductor's memory plan on fake tensors"
                + (", scheduled by Triton's rules" if spec.device_type == "cuda" else "") + "; the causal mask kept "
                "under dynamo (torch <= 2.12), a stack that drops it keeps less; the bound adds what the eager step "
                "saves in layer classes no GPU run verified compiled")
        if mode.startswith("max-autotune"):
            text += (f"; {mode}'s matmul templates not planned (the default plan); its step 1 autotunes each graph "
                     "when first called: the peak is the larger of the step's and step 1's (each graph's entry "
                     "without the optimizer's state, plus its costliest matmul's benchmark inputs, output and "
                     "decompose-K partial sums), float32 logits tangents as accelerate returns float32 outputs")
        elif mode != "default":
            text += f"; {mode} planned as the default mode"
        modelled.append(text)
    elif mode:
        not_modelled.append("torch.compile over a quantized base (planned eagerly)")
    if liger_on(spec):
        liger_notes(model_type, bool(mode), modelled, not_modelled)
    fms_notes(spec, modelled, not_modelled)
    if spec.value("model", "attn_implementation") == "flex_attention" and spec.device_type == "cuda":
        modelled.append("flex attention: its compiled kernels' output, log-sum-exp and block mask saved, its "
                        "backward's float32 delta")
    return modelled, not_modelled


def liger_notes(model_type: str | None, compiled: bool, modelled: list[str], not_modelled: list[str]) -> None:
    """Liger's patches of the type as planned (planning.liger_patches), and those without a stand-in."""
    from tunebench.planning import liger_kernels, liger_patches

    patches = liger_kernels.type_patches(model_type)
    kinds = list(dict.fromkeys(p.kind.replace("_", " ") for p in patches if p.kind in liger_kernels.MODELLED))
    others = list(dict.fromkeys(p.liger for p in patches if p.kind not in liger_kernels.MODELLED))
    if not kinds:
        why = "Liger does not patch it" if liger_patches.supported_types() else "liger-kernel is not installed here"
        not_modelled.append(f"Liger's kernels for model type {model_type!r} ({why}: planned without them, an upper "
                            "bound, Liger only removes tensors)")
        return
    flce = ("its fused linear cross-entropy" if liger_kernels.fused_linear_cross_entropy_applied() else
            "the model's own loss (TRL turns Liger's fused linear cross-entropy off: logits materialised)")
    modelled.append(f"Liger {liger_kernels.LIGER_VERSION}'s patches of {model_type!r} read from Liger "
                    f"({', '.join(kinds)}) as they allocate, and {flce}")
    if others:
        not_modelled.append(f"Liger's {', '.join(others)} (planned as the model's own layers: an upper bound)")
    if compiled:
        not_modelled.append("Liger's kernels under torch.compile (planned as compile's plan of the stand-ins)")


def fms_notes(spec: ExperimentSpec, modelled: list[str], not_modelled: list[str]) -> None:
    """How fms-acceleration's plugins were planned (planning.fms_bases): its GPTQ and bitsandbytes bases as they
    allocate; foak's fused kernels not (Triton kernels without fake implementations), so a foak row's plan is that of
    the same row without them: an upper bound, since they only remove tensors (measured on H200: 7.5 % below it on
    mistral-7b, 18 % on llama-3.2-1b, docs/evidence/fms-acceleration-h200.md)."""
    from tunebench.planning.fms_bases import plugins_of_model

    plugins = plugins_of_model(spec.entry.get("model", {}))
    if plugins.base == "gptq":
        modelled.append("fms's GPTQ base: its packed int32 weights, zeros, fp16 scales and group indices, and the "
                        "fp16 weight its kernel dequantizes for each matmul of the forward and backward")
    elif plugins.base == "bnb":
        modelled.append("fms's bitsandbytes loader as tunebench's 4-bit path (double quantization, compute in the "
                        "weights' dtype)")
    if plugins.foak:
        not_modelled.append("foak's fused kernels (planned without them: an upper bound, they only remove tensors)")


def bound_extra(peak: int, mode: str | None, unverified: int = 0) -> int:
    """Bytes a compiled row's peak bound adds to the eager calibration: the largest under-prediction measured for
    compiled steps (and for a mode that autotunes, the largest measured under-prediction of its step 1) on the
    layer classes those runs verified, plus what the eager step saves in the classes they did not (`unverified`,
    planning.compile_bounds: no margin is sound for a fusion nobody measured)."""
    if not mode:
        return 0
    return int(peak * (COMPILE_UNDER + (AUTOTUNE_UNDER if mode.startswith("max-autotune") else 0))) + unverified
