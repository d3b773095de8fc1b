"""Argument dataclasses of the training entry; the harness validates experiments against these same classes."""

from __future__ import annotations

import argparse
import dataclasses
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
