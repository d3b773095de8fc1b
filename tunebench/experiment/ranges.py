"""Ranges of numeric arguments, and the check of an experiment's typed values against them before anything runs."""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)


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
        def number(value: float) -> str:
            return f"{int(value):,}" if float(value).is_integer() else repr(value)

        parts = []
        if self.low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {number(self.low)}")
        if self.high is not None:
            parts.append(f"{'<' if self.high_open else '<='} {number(self.high)}")
        text = " and ".join(parts) or "a finite number"
        return text + "".join(f" (or {v})" for v in self.also)


# The entry's own numeric arguments (tunebench.experiment.arguments).
ENTRY_RANGES: dict[str, Range] = {
    "max_seq_len": Range(1, 2**21), "synthetic_num_samples": Range(1, 10**7), "synthetic_min_len": Range(0),
    "r": Range(1), "lora_alpha": Range(1), "lora_dropout": Range(0, 1, high_open=True), "num_virtual_tokens": Range(1),
    "steady_warmup_steps": Range(0), "steady_min_steps": Range(1), "steady_max_cv": Range(0, low_open=True),
    "steady_target_ci_pct": Range(0, low_open=True),
}
# The Trainer's (SFTConfig's) numeric arguments that decide what a step is: their fields carry no range of
# their own, so tunebench states them here. A value outside fails in seconds with the key, not an hour in.
TRAINER_RANGES: dict[str, Range] = {
    "max_steps": Range(1, also=(-1,)), "num_train_epochs": Range(0, low_open=True),
    "per_device_train_batch_size": Range(1), "gradient_accumulation_steps": Range(1),
    "learning_rate": Range(0), "weight_decay": Range(0), "max_grad_norm": Range(0), "warmup_steps": Range(0),
    "warmup_ratio": Range(0, 1), "dataloader_num_workers": Range(0), "seed": Range(0, 2**32 - 1),
    "logging_steps": Range(0, low_open=True), "save_steps": Range(0, low_open=True),
}
# Synthetic rows are built in the harness's memory before anything launches (~40 bytes a token as Python lists).
MAX_SYNTHETIC_TOKENS = 2**27


RANGES = {**ENTRY_RANGES, **TRAINER_RANGES}


def range_problems(values: dict[str, dict[str, Any]], groups: dict[str, type]) -> dict[str, str]:
    """{key: problem} for every ranged value of an experiment's typed values ({group: {key: value}})."""
    found: dict[str, str] = {}
    for given in values.values():
        for key, value in given.items():
            problem = RANGES[key].problem(value) if key in RANGES else None
            if problem:
                found[key] = problem
    data = values.get("data", {})
    defaults = {f.name: f.default for f in dataclasses.fields(groups["data"])}
    rows = data.get("synthetic_num_samples", defaults["synthetic_num_samples"])
    length = data.get("max_seq_len", defaults["max_seq_len"])
    if data.get("training_data_path", "synthetic") == "synthetic" and isinstance(rows, int) \
            and isinstance(length, int) and rows * length > MAX_SYNTHETIC_TOKENS:
        found.setdefault("synthetic_num_samples", f"{rows} rows of up to {length} tokens are more than the "
                                                  f"{MAX_SYNTHETIC_TOKENS:,} synthetic tokens tunebench builds")
    return found
