"""Builders of an experiment's parts from its arguments: the steady policy, the step windows, PEFT config, devices."""

from __future__ import annotations

import logging

from tunebench.experiment.arguments import parse_memory_logging
from tunebench.experiment.steady import SteadyPolicy
from tunebench.experiment.windows import StepWindows, plan_windows

logger = logging.getLogger(__name__)

def steady_policy(bench_args) -> SteadyPolicy:
    return SteadyPolicy(warmup_steps=bench_args.steady_warmup_steps, min_steps=bench_args.steady_min_steps,
                        max_cv=bench_args.steady_max_cv, target_ci_pct=bench_args.steady_target_ci_pct)


def scanner_off_for_compile(bench_args, compiled: bool) -> bool:
    """A compiled model (torch_compile) is not scanned unless asked for by step (`scan_steps` other than `auto`):
    dynamo traces the scanner's module hooks, so installing them recompiles the model, and the compiled graph
    does not record their CUDA events (H100: "Both events must be recorded" at the scanned step of a compiled
    1B; CPU: 3 recompilations when the phase hooks arrived in step 6). The row keeps the allocator's whole-run
    peaks, the step times and the compile columns."""
    return compiled and bench_args.scan_steps == "auto"


def step_windows(bench_args, max_steps: int, compiled: bool = False) -> StepWindows:
    """The run's warm-up, memory-scanned, timed and excluded steps (raises ValueError when impossible)."""
    scanning = "scanner" in parse_memory_logging(bench_args.memory_logging)
    if scanner_off_for_compile(bench_args, compiled):
        return plan_windows(bench_args.steady_warmup_steps, max_steps, bench_args.scan_steps, "off", False)
    return plan_windows(bench_args.steady_warmup_steps, max_steps, bench_args.scan_steps,
                        bench_args.scan_time_steps, scanning)


def lora_targets(targets) -> list[str] | str:
    """LoRA's target modules as PEFT takes them: `all-linear` (every linear layer but the output head, whatever
    the family calls them) is PEFT's keyword, not a module name."""
    targets = list(targets)
    return "all-linear" if targets == ["all-linear"] else targets


def build_peft_config(peft_args):
    if peft_args.peft_method == "none":
        return None
    from peft import LoraConfig, PromptTuningConfig, TaskType

    if peft_args.peft_method == "lora":
        return LoraConfig(r=peft_args.r, lora_alpha=peft_args.lora_alpha, lora_dropout=peft_args.lora_dropout,
                          target_modules=lora_targets(peft_args.target_modules), task_type=TaskType.CAUSAL_LM)
    return PromptTuningConfig(num_virtual_tokens=peft_args.num_virtual_tokens, task_type=TaskType.CAUSAL_LM)


def preset_init_device(model_args, sft_config, state) -> str:
    """This rank's GPU for presets trained on CUDA, unless FSDP offloads to the host or the user said cpu."""
    import torch

    offload = "offload" in str(sft_config.fsdp) or bool((sft_config.fsdp_config or {}).get("cpu_offload"))
    if model_args.preset_init_device == "cpu" or sft_config.use_cpu or offload or not torch.cuda.is_available():
        return "cpu"
    return f"cuda:{state.local_process_index}"


def reconcile_matmul_precision() -> str | None:
    """Make torch's legacy float32 matmul precision agree with the new per-backend one, as set; returns what it set.

    Why: transformers (torch >= 2.9) turns TF32 on for torch.compile through the new API only
    (`torch.backends.fp32_precision = "tf32"`), and torch then refuses every read through the legacy one ("mix of
    the legacy and new APIs"): inductor's max-autotune reads it choosing a matmul, so every max-autotune run failed
    at its first step (H100/H200, torch 2.11). Setting the legacy value that means the same precision keeps both
    views equal; the numerics do not change."""
    import torch

    try:
        torch.get_float32_matmul_precision()
        return None  # consistent already
    except RuntimeError:
        wanted = "high" if torch.backends.cuda.matmul.fp32_precision == "tf32" else "highest"
    torch.set_float32_matmul_precision(wanted)
    logger.info("float32 matmul precision set to %r through the legacy API too (it was set through the new one)",
                wanted)
    return wanted


def keep_explicit_tf32(sft_config) -> bool:
    """Turn TF32 back off when the experiment says `tf32: false` and a library turned it on; returns whether it did.

    Why: accelerate turns TF32 matmuls on for every compiled run without mixed precision on CUDA
    (AcceleratorState: `torch.backends.cuda.matmul.allow_tf32 = True` when a dynamo backend is set), after
    transformers applied `tf32: false`. A float32 torch.compile row then ran TF32 matmuls, 3.7 x faster than its
    float32 eager baseline and 3.3e-4 off its loss (H100, docs/evidence/loss-parity-h100.md): a numerics change
    nobody asked for, reported as compile's."""
    import torch

    if sft_config.tf32 is not False:
        return False
    try:
        on = torch.backends.cuda.matmul.allow_tf32
    except RuntimeError:  # read through the legacy API after the new one was set
        on = torch.backends.cuda.matmul.fp32_precision == "tf32"
    if not on:
        return False
    torch.backends.cuda.matmul.allow_tf32 = False
    logger.warning("TF32 matmuls were turned on by a library (accelerate does for compiled runs without mixed "
                   "precision); tf32: false is kept")
    reconcile_matmul_precision()
    return True
