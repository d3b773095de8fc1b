"""Ranges of numeric arguments, and the check of an experiment's typed values against them before anything runs."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from tunebench.bounds import Range

logger = logging.getLogger(__name__)


# The entry's own numeric arguments (tunebench.experiment.arguments). Every range is finite: NaN and infinities
# are outside all of them, and the upper ends are far above any real run (a value past them is a typo).
_STEPS = 10**9
ENTRY_RANGES: dict[str, Range] = {
    "max_seq_len": Range(1, 2**21), "synthetic_num_samples": Range(1, 10**7), "synthetic_min_len": Range(0, 2**21),
    "r": Range(1, 2**16), "lora_alpha": Range(1, 2**20), "lora_dropout": Range(0, 1, high_open=True),
    "num_virtual_tokens": Range(1, 2**16), "steady_warmup_steps": Range(0, _STEPS),
    "steady_min_steps": Range(1, _STEPS),
    "steady_max_cv": Range(0, 100, low_open=True), "steady_target_ci_pct": Range(0, 100, low_open=True),
    "llm_int8_threshold": Range(0, 65504),
    "synthetic_markov_states": Range(1, 2**24), "synthetic_markov_branching": Range(1, 2**24),
    "loss_target_fraction": Range(0, 1, low_open=True), "loss_target_nats": Range(0, 10**4),
    "loss_band_seed": Range(0, 2**32 - 1),  # bitsandbytes compares float16 magnitudes: 65504 is the largest
}
# The Trainer's (SFTConfig's) numeric arguments that decide what a step is: their fields carry no range of
# their own, so tunebench states them here. A value outside fails in seconds with the key, not an hour in.
TRAINER_RANGES: dict[str, Range] = {
    "max_steps": Range(1, _STEPS, also=(-1,)),
    "num_train_epochs": Range(0, 10**6, low_open=True),
    "per_device_train_batch_size": Range(1, 2**20),
    "gradient_accumulation_steps": Range(1, 2**20),
    "learning_rate": Range(0, 10**3),
    "weight_decay": Range(0, 10**3),
    "max_grad_norm": Range(0),
    "warmup_steps": Range(0, _STEPS),
    "warmup_ratio": Range(0, 1),
    "dataloader_num_workers": Range(0, 1024),
    "seed": Range(0, 2**32 - 1),
    "logging_steps": Range(0, _STEPS, low_open=True),
    "save_steps": Range(0, _STEPS, low_open=True),
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
    states = data.get("synthetic_markov_states", defaults["synthetic_markov_states"])
    branching = data.get("synthetic_markov_branching", defaults["synthetic_markov_branching"])
    if isinstance(states, int) and isinstance(branching, int) and branching > states:
        found.setdefault("synthetic_markov_branching", f"{branching} successors need at least as many states "
                                                       f"(synthetic_markov_states is {states})")
    return found
