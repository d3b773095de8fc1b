"""The search space: every way to run the model at the asked effective batch, each an ordinary scenario."""

from __future__ import annotations

import importlib.util
import itertools
import logging
import math
from dataclasses import dataclass
from typing import Any

from tunebench.errors import InputError, InputProblem
from tunebench.tuning.options import TuneOptions

logger = logging.getLogger(__name__)

# LoRA on the attention and MLP projections of every decoder layer (names shared by Llama-like families; PEFT's
# "all-linear" would also pick others' names but includes the LM head on some of them).
LORA_TARGETS = "all-linear"
# Multi-GPU variants: framework configs of framework_configs.yaml (DDP replicates, FSDP2 shards).
MULTI_GPU_CONFIGS = ("ddp", "fsdp2")
# The point's settings with levels (Point.factors keys); micro-batch and accumulation are numeric.
# Every point is predicted (a fake step per distinct shape) before the search starts.
MAX_POINTS = 2048
CATEGORICAL = ("peft", "gradient_checkpointing", "packing", "optim", "torch_compile", "liger", "framework")


@dataclass(frozen=True)
class Point:
    """One configuration of the space; `label` names it in tables and scenario names."""

    peft: str  # "none" | "lora"
    rank: int | None
    checkpointing: bool
    micro_batch: int
    grad_accum: int
    packing: bool
    optim: str
    compile: bool
    liger: bool
    framework: str | None  # None (one process) or a framework config name

    @property
    def label(self) -> str:
        parts = ["full" if self.peft == "none" else f"lora{self.rank}", "gc" if self.checkpointing else "nogc",
                 f"mb{self.micro_batch}x{self.grad_accum}", "pack" if self.packing else "pad",
                 self.optim.replace("adamw_torch", "adamw").replace("_", "")]
        parts += ["compile"] * self.compile + ["liger"] * self.liger + ([self.framework] if self.framework else [])
        return "-".join(parts)

    def factors(self) -> dict[str, Any]:
        """The point's settings as table columns (also the search model's features)."""
        return {"peft": self.peft if self.peft == "none" else f"lora-r{self.rank}",
                "gradient_checkpointing": self.checkpointing, "micro_batch": self.micro_batch,
                "grad_accum": self.grad_accum, "packing": self.packing, "optim": self.optim,
                "torch_compile": self.compile, "liger": self.liger, "framework": self.framework or "single"}

    def arguments(self, options: TuneOptions, cpu: bool) -> dict[str, Any]:
        """The scenario arguments of this point (the measurement settings are added per stage)."""
        args: dict[str, Any] = {
            "model_name_or_path": [options.model], "peft_method": self.peft,
            "per_device_train_batch_size": self.micro_batch, "gradient_accumulation_steps": self.grad_accum,
            "gradient_checkpointing": self.checkpointing, "packing": self.packing, "optim": self.optim,
            "training_data_path": options.training_data_path,
        }
        if options.training_data_path == "synthetic":
            args["synthetic_length_distribution"] = options.synthetic_length_distribution
        if self.checkpointing:
            args["gradient_checkpointing_kwargs"] = {"use_reentrant": False}
        if self.peft == "lora":
            args.update(r=self.rank, lora_alpha=2 * self.rank, lora_dropout=0.0, target_modules=LORA_TARGETS,
                        learning_rate=2.0e-4)
        if self.packing:
            # Padding-free packing needs a variable-length attention kernel (flash attention); without one, rows
            # are packed end to end into full rows ("wrapped"), what padding-free would be slower than there.
            if not cpu and importlib.util.find_spec("flash_attn") is not None:
                args.update(padding_free=True, attn_implementation="flash_attention_2")
            else:
                args["packing_strategy"] = "wrapped"
        if self.compile:
            args["torch_compile"] = True
        if self.liger:
            args["use_liger_kernel"] = True
        if cpu:  # CPU runs in fp32 (bf16 autocast on CPU is slow and not what a GPU run measures)
            args.update(torch_dtype="float32", bf16=False)
        return args


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def space_choices(options: TuneOptions, cpu: bool) -> dict[str, tuple]:
    """Every dimension's values: the user's, else tune's defaults for this device and data."""
    per_device = options.effective_batch // options.num_gpus
    micro = options.micro_batches or tuple(_divisors(per_device))
    variable_rows = options.training_data_path != "synthetic" or options.synthetic_length_distribution != "fixed"
    liger = not cpu and importlib.util.find_spec("liger_kernel") is not None
    return {
        "peft": ("none", "lora") if options.peft == "any" else (options.peft,),
        "micro_batch": tuple(m for m in micro if per_device % m == 0),
        "checkpointing": options.gradient_checkpointing,
        # Packing only changes anything when rows are shorter than max_seq_len (full synthetic rows are packed).
        "packing": options.packing if options.packing is not None else ((False, True) if variable_rows else (False,)),
        "optim": options.optimizers,
        # torch.compile on CPU spends minutes in the C++ compiler per point: off unless asked.
        "compile": options.torch_compile if options.torch_compile is not None else ((False,) if cpu else (False, True)),
        "liger": (False, True) if liger else (False,),
        "framework": MULTI_GPU_CONFIGS if options.num_gpus > 1 else (None,),
    }


def _size_problem(options: TuneOptions, choices: dict[str, tuple]) -> InputProblem | None:
    """Too many points to predict and search (or none): named by the options that set the space's width."""
    adapters = sum(len(options.lora_ranks) if peft == "lora" else 1 for peft in choices["peft"])
    size = adapters * math.prod(len(v) for k, v in choices.items() if k != "peft")
    if 0 < size <= MAX_POINTS:
        return None
    wide = [f"--{name} ({len(values)})" for name, values in (
        ("lora_ranks", options.lora_ranks), ("micro_batches", choices["micro_batch"]),
        ("optimizers", options.optimizers), ("gradient_checkpointing", choices["checkpointing"]),
        ("packing", choices["packing"]), ("torch_compile", choices["compile"])) if len(values) > 1]
    if not size:
        return InputProblem("command line", "--micro_batches", "no micro-batch divides the per-device batch",
                            "give divisors of --effective_batch / --num_gpus")
    return InputProblem("command line", ", ".join(wide) or "--effective_batch", f"a space of {size} points (at "
                        f"most {MAX_POINTS}: each is predicted before the search)", "give fewer values")


def build_space(options: TuneOptions, cpu: bool) -> list[Point]:
    """Every point of the space, in a fixed order (the search reorders them); InputError when it is empty or
    too large to search."""
    choices = space_choices(options, cpu)
    problem = _size_problem(options, choices)
    if problem:
        raise InputError([problem])
    per_device = options.effective_batch // options.num_gpus
    adapters = [
        (peft, rank) for peft in choices["peft"] for rank in (options.lora_ranks if peft == "lora" else (None,))
    ]
    points = [Point(peft, rank, gc, mb, per_device // mb, packing, optim, compiled, liger, framework)
              for (peft, rank), gc, mb, packing, optim, compiled, liger, framework in itertools.product(
                  adapters, choices["checkpointing"], choices["micro_batch"], choices["packing"], choices["optim"],
                  choices["compile"], choices["liger"], choices["framework"])]
    logger.info("tune space: %d points (%s)", len(points),
                ", ".join(f"{k}: {list(v)}" for k, v in choices.items()))
    return points
