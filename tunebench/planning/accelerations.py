"""The settings users turn on to save memory, as the plan models them: torch.compile, Liger's kernels and flex
attention. Which of them an experiment turns on (its shape's fields), what its `pred_note` says about how each was
modelled, and how much wider its bound is where a setting's figure is not exact.

  * torch.compile: AOTAutograd's partition and inductor's memory plan, replayed on fake tensors
    (planning.compiled_step). Modes other than the default run the default's plan: max-autotune's Triton matmul
    templates are not planned (their fused epilogues can only remove buffers). Its run's peak is not the step's
    but step 1's autotuning, which is not modelled: a calibrated bound (AUTOTUNE_MATMULS) and a note instead;
  * Liger: its kernels' own allocations (planning.liger_kernels), for the model types Liger patches the llama way;
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
# max-autotune benchmarks every matmul's candidates while step 1 compiles, on inputs and outputs it allocates
# afresh, with the step's own tensors alive: the backward's graph compiles when backward reaches it, holding the
# forward's saved tensors and the logits-sized tangents, and a split-K candidate adds float32 partial sums. On H100
# (docs/evidence/acceleration-memory-h100.md section 5: allocator history at each run's peak) the run's peak
# (max_memory_allocated) exceeded the planned step's by 1.08, 1.09, 1.11 and 1.57 x the largest matmul's operands
# and output (LoRA on llama-3.2-1b, llama-3.1-8b, smollm3, qwen3-1.7b). Not modelled: the bound adds this many.
AUTOTUNE_MATMULS = 2


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
    from tunebench.planning import liger_kernels

    modelled, not_modelled = [], []
    mode = compile_mode(spec)
    if mode and shape.compile_mode:
        text = (f"torch.compile ({mode}): AOTAutograd's min-cut partition and inductor's memory plan on fake tensors"
                + (", scheduled by Triton's rules" if spec.device_type == "cuda" else "") + "; the causal mask kept "
                "under dynamo (torch <= 2.12), a stack that drops it keeps less")
        if mode != "default":
            text += (f"; {mode}'s matmul templates not planned (the default plan); its run's peak is step 1's "
                     f"autotuning, not modelled (on H100 up to 1.6 x the largest matmul above the step's): the bound "
                     f"adds {AUTOTUNE_MATMULS} x that matmul's operands and output")
        modelled.append(text)
    elif mode:
        not_modelled.append("torch.compile over a quantized base (planned eagerly)")
    if liger_on(spec):
        if liger_kernels.modelled(model_type):
            flce = ("its fused linear cross-entropy" if liger_kernels.fused_linear_cross_entropy_applied() else
                    "the model's own loss (TRL turns Liger's fused linear cross-entropy off: logits materialised)")
            modelled.append(f"Liger {liger_kernels.LIGER_VERSION}'s RMSNorm, RoPE and SwiGLU as they allocate, "
                            f"and {flce}")
            if mode:
                not_modelled.append("Liger's kernels under torch.compile (planned as compile's plan of the stand-ins)")
        else:
            not_modelled.append(f"Liger's kernels for model type {model_type!r} (planned without them: an upper "
                                "bound, Liger only removes tensors)")
    if spec.value("model", "attn_implementation") == "flex_attention" and spec.device_type == "cuda":
        modelled.append("flex attention: its compiled kernels' output, log-sum-exp and block mask saved, its "
                        "backward's float32 delta")
    return modelled, not_modelled


def bound_extra(peak: int, mode: str | None, autotune_operands: int) -> int:
    """Bytes a compiled row's peak bound adds to the eager calibration: the largest under-prediction measured for
    compiled steps, and (a mode that autotunes) AUTOTUNE_MATMULS x the largest matmul's operands and output, for
    step 1's autotuning."""
    if not mode:
        return 0
    return int(peak * COMPILE_UNDER) + (AUTOTUNE_MATMULS * autotune_operands if mode.startswith("max-autotune")
                                        else 0)
