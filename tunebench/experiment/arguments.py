"""Argument dataclasses of the training entry; the harness validates experiments against these same classes."""

from __future__ import annotations

import argparse
import dataclasses
import math
from dataclasses import dataclass, field


@dataclass
class ModelArguments:
    model_name_or_path: str = field(
        default="preset:llama-tiny", metadata={"help": "preset:<name>, a local directory, or a hub id"}
    )
    torch_dtype: str = field(
        default="float32", metadata={"help": "dtype the weights are created in", "choices": ["auto", "float32", "bfloat16", "float16"]}
    )
    attn_implementation: str | None = field(default=None, metadata={"help": "eager | sdpa | flash_attention_2"})
    preset_init_device: str = field(
        default="auto",
        metadata={"help": "where presets are randomly initialised: auto (this rank's GPU when training on CUDA "
                  "without FSDP CPU offload, else the host) or cpu", "choices": ["auto", "cpu"]},
    )


@dataclass
class DataArguments:
    training_data_path: str = field(
        default="synthetic", metadata={"help": "'synthetic', a local .json/.jsonl/.parquet file, or a hub dataset"}
    )
    max_seq_len: int = field(default=1024, metadata={"help": "maximum tokens per sequence (SFTConfig.max_length)"})
    synthetic_num_samples: int = field(default=512, metadata={"help": "rows of the synthetic dataset"})
    synthetic_length_distribution: str = field(
        default="uniform",
        metadata={"help": "sequence lengths of synthetic rows", "choices": ["uniform", "fixed", "lognormal"]},
    )
    synthetic_min_len: int = field(default=0, metadata={"help": "shortest synthetic row; 0 means max_seq_len // 4"})


@dataclass
class PeftArguments:
    peft_method: str = field(default="none", metadata={"choices": ["none", "lora", "prompt-tuning"]})
    r: int = field(default=8, metadata={"help": "LoRA rank"})
    lora_alpha: int = field(default=16)
    lora_dropout: float = field(default=0.0)
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "v_proj"], metadata={"help": "LoRA target module names"}
    )
    num_virtual_tokens: int = field(default=20, metadata={"help": "prompt-tuning virtual tokens"})


@dataclass
class BenchArguments:
    results_json: str = field(default="", metadata={"help": "where the entry writes its metrics (rank 0)"})
    memory_logging: str = field(
        default="scanner",
        metadata={"help": "comma list of: scanner, huggingface, nvidia, all, none (nvidia is the harness's sidecar)"},
    )
    scan_steps: str = field(
        default="auto",
        metadata={"help": "optimizer step(s) the scanner measures memory on: 'auto' (the last warm-up step but "
                  "one), '4' or '4-6'"},
    )
    scan_time_steps: str = field(
        default="auto",
        metadata={"help": "steps whose phases the scanner times with light hooks only: 'auto' (every steady "
                  "step), '6-14' or 'off' (phases from the memory-scanned step)"},
    )
    steady_warmup_steps: int = field(
        default=5, metadata={"help": "optimizer steps left out of the steady-state statistics"}
    )
    steady_state: str = field(
        default="fixed",
        metadata={"help": "fixed: run max_steps; auto: stop once the median step time is known to "
                  "±steady_target_ci_pct at 95 % confidence (max_steps bounds it)", "choices": ["fixed", "auto"]},
    )
    steady_min_steps: int = field(default=10, metadata={"help": "fewer steady steps give a measurement_warning"})
    steady_max_cv: float = field(
        default=0.05, metadata={"help": "a steady step-time CV above this gives a measurement_warning"}
    )
    steady_target_ci_pct: float = field(
        default=1.0, metadata={"help": "steady_state auto: target 95 % half-width of the median, in %"}
    )
    sft_loss: str = field(
        default="model",
        metadata={"help": "model: the model's own loss, as transformers.Trainer computes it (no per-step host "
                  "sync); trl: TRL's fused LM head with entropy/accuracy metrics", "choices": ["model", "trl"]},
    )


ENTRY_DATACLASSES = (ModelArguments, DataArguments, PeftArguments, BenchArguments)


@dataclass(frozen=True)
class Range:
    """The values a numeric argument may take: [low, high], either end open or absent, plus exceptions."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    also: tuple = ()  # values allowed outside the range (max_steps -1: train by epochs)

    def problem(self, value) -> str | None:
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or value in self.also:
            return None
        ok = math.isfinite(value)
        if ok and self.low is not None:
            ok = value > self.low if self.low_open else value >= self.low
        if ok and self.high is not None:
            ok = value < self.high if self.high_open else value <= self.high
        return None if ok else f"{value} is out of range: expected {self.describe()}"

    def describe(self) -> str:
        parts = []
        if self.low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {self.low:g}")
        if self.high is not None:
            parts.append(f"{'<' if self.high_open else '<='} {self.high:g}")
        text = " and ".join(parts) or "a finite number"
        return text + "".join(f" (or {v})" for v in self.also)


# Numeric arguments whose range the harness checks before anything runs: the entry's own and the Trainer's
# that decide what a step is. A value outside fails in seconds with the key and the range, not an hour in.
RANGES: dict[str, Range] = {
    "max_seq_len": Range(1, 2**21), "synthetic_num_samples": Range(1, 10**7), "synthetic_min_len": Range(0),
    "r": Range(1), "lora_alpha": Range(0, low_open=True), "lora_dropout": Range(0, 1, high_open=True),
    "num_virtual_tokens": Range(1),
    "steady_warmup_steps": Range(0), "steady_min_steps": Range(1), "steady_max_cv": Range(0, low_open=True),
    "steady_target_ci_pct": Range(0, low_open=True),
    "max_steps": Range(1, also=(-1,)), "num_train_epochs": Range(0, low_open=True),
    "per_device_train_batch_size": Range(1), "gradient_accumulation_steps": Range(1),
    "learning_rate": Range(0), "weight_decay": Range(0), "max_grad_norm": Range(0), "warmup_steps": Range(0),
    "warmup_ratio": Range(0, 1), "dataloader_num_workers": Range(0), "seed": Range(0, 2**32 - 1),
    "logging_steps": Range(0, low_open=True), "save_steps": Range(0, low_open=True),
}


# Synthetic rows are built in the harness's memory before anything launches (~40 bytes a token as Python lists).
MAX_SYNTHETIC_TOKENS = 2**27


def range_problems(parsed: tuple) -> dict[str, str]:
    """{key: problem} for every ranged argument of the parsed dataclasses that is out of its range."""
    found = {}
    data = next((p for p in parsed if isinstance(p, DataArguments)), None)
    if data is not None and data.training_data_path == "synthetic" and isinstance(data.max_seq_len, int) \
            and isinstance(data.synthetic_num_samples, int) \
            and data.synthetic_num_samples * data.max_seq_len > MAX_SYNTHETIC_TOKENS:
        found["synthetic_num_samples"] = (f"{data.synthetic_num_samples} rows of up to {data.max_seq_len} tokens are "
                                          f"more than the {MAX_SYNTHETIC_TOKENS:,} synthetic tokens tunebench builds")
    for instance in parsed:
        for key, allowed in RANGES.items():
            if hasattr(instance, key) and key not in found:
                problem = allowed.problem(getattr(instance, key))
                if problem:
                    found[key] = problem
    return found


class ArgumentError(ValueError):
    """An argument string that the training entry's parser rejects."""


class StrictArgumentParser:
    """HfArgumentParser over the entry's dataclasses + SFTConfig, raising instead of exiting on errors."""

    def __init__(self):
        from transformers import HfArgumentParser
        from trl import SFTConfig

        self.dataclass_types = (*ENTRY_DATACLASSES, SFTConfig)
        self.parser = HfArgumentParser(self.dataclass_types, exit_on_error=False)
        self.parser.error = self._raise  # argparse calls error() for bad choices/types and missing values

    @staticmethod
    def _raise(message: str):
        raise ArgumentError(message)

    def known_keys(self) -> set[str]:
        return {f.name for dc in self.dataclass_types for f in dataclasses.fields(dc) if f.init}

    def parse_argv(self, argv: list[str]) -> tuple:
        """Parse `--key value` argv into the dataclass instances, rejecting unknown keys."""
        try:
            namespace, remaining = self.parser.parse_known_args(argv)
        except argparse.ArgumentError as exc:
            raise ArgumentError(str(exc)) from exc
        if remaining:
            raise ArgumentError(f"unrecognised arguments: {' '.join(remaining)}")
        outputs = []
        for dtype in self.dataclass_types:
            keys = {f.name for f in dataclasses.fields(dtype) if f.init}
            values = {k: v for k, v in vars(namespace).items() if k in keys}
            outputs.append(dtype(**values))
        return tuple(outputs)
