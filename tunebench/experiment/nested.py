"""The one checker of the nested (mapping) arguments of the Trainer and SFTConfig, for a matrix and for a results row.

transformers and TRL take these as a mapping, or as JSON text (what a command line or a CSV cell holds), or for a
few as the path of a JSON file. Anything else they refuse late and in their words (`int()` of a list, a
`FileNotFoundError` for `accelerator_config: [1]`, a `PackageNotFoundError` for `deepspeed`), or take and ignore
(`gradient_checkpointing_kwargs: 5` until the first checkpointed layer): here each is one problem naming its key.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from typing import Any

from tunebench.experiment.sharding import config_dict, fsdp_problems

logger = logging.getLogger(__name__)

# Nested arguments a file path may stand for (transformers reads it): each other one is a mapping.
PATH_FIELDS = ("accelerator_config", "fsdp_config", "deepspeed")
# What torch.utils.checkpoint takes beside the function (the Trainer passes the kwargs on).
CHECKPOINT_KEYS = ("use_reentrant", "preserve_rng_state", "determinism_check", "debug")
# How each is written in a scenario (the fix of a value that is no mapping).
EXAMPLES = {"accelerator_config": "{non_blocking: true}", "gradient_checkpointing_kwargs": "{use_reentrant: false}",
            "activation_checkpointing_kwargs": "{use_reentrant: false}", "lr_scheduler_kwargs": "{num_cycles: 2}",
            "fsdp_config": "{version: 2, reshard_after_forward: true}", "model_init_kwargs": "{dtype: bfloat16}",
            "dataset_kwargs": "{skip_prepare_dataset: true}", "deepspeed": "{zero_optimization: {stage: 2}}"}


def _fix(key: str) -> str:
    example = f"write it as a mapping, e.g. {EXAMPLES.get(key, '{name: value}')}"
    return f"{example}, or the path of an existing .json file" if key in PATH_FIELDS else example


def nested_fields() -> tuple[str, ...]:
    """The training fields that take a mapping, as this transformers and TRL declare them (`_VALID_DICT_FIELDS`)."""
    from tunebench.experiment.arguments import training_fields

    return training_fields().mapping_fields


def accelerator_keys() -> dict[str, bool]:
    """AcceleratorConfig's fields, each with whether it is a switch (true/false)."""
    from tunebench.experiment.arguments import training_fields

    return training_fields().accelerator_keys


def _shown(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _mapping(key: str, value: Any) -> tuple[dict | None, tuple[str, str, str] | None]:
    """(the mapping `value` stands for, None) or (None, the problem). A JSON file is read only where transformers
    reads one."""
    if isinstance(value, dict):
        return value, None
    if isinstance(value, str) and value.strip().startswith("{"):
        parsed = config_dict(value)
        return (parsed, None) if parsed or value.strip() == "{}" else (None, (key, "not a JSON object", _fix(key)))
    if isinstance(value, str) and key in PATH_FIELDS and value.endswith(".json") and os.path.isfile(value):
        return {}, None  # transformers reads the file; its content is its own to check
    return None, (key, f"expected a mapping, got {_shown(value)}", _fix(key))


def _inner_problems(key: str, mapping: dict) -> list[tuple[str, str, str]]:
    found = []
    if key == "accelerator_config":
        known = accelerator_keys()
        for name, value in mapping.items():
            if name not in known:
                found.append((f"{key}.{str(name)[:40]}", "unknown key", f"one of {', '.join(known)}"))
            elif known[name] and not isinstance(value, bool):
                found.append((f"{key}.{name}", f"expected true or false, got {_shown(value)}", "true or false"))
    elif key in ("gradient_checkpointing_kwargs", "activation_checkpointing_kwargs"):
        for name, value in mapping.items():
            if name not in CHECKPOINT_KEYS:
                found.append((f"{key}.{str(name)[:40]}", "unknown key: torch.utils.checkpoint takes none of that "
                              "name", f"one of {', '.join(CHECKPOINT_KEYS)}"))
            elif name in ("use_reentrant", "preserve_rng_state", "debug") and not isinstance(value, bool):
                found.append((f"{key}.{name}", f"expected true or false, got {_shown(value)}", "true or false"))
    return found


def nested_problems(values: dict[str, Any], installed_here: bool = True) -> list[tuple[str, str, str]]:
    """(key, message, fix) for every nested argument of a training group's values (or a results row's) that is no
    mapping of what its field takes; `fsdp`/`fsdp_config` as experiment.sharding checks them. `installed_here`: a
    package a setting needs (deepspeed) must be installed here (not asked of a results row)."""
    found = list(fsdp_problems(values))
    for key in nested_fields():
        value = values.get(key)
        if key == "fsdp_config" or value is None or (isinstance(value, float) and value != value) or value == "":
            continue
        mapping, problem = _mapping(key, value)
        if problem:
            found.append(problem)
            continue
        found += _inner_problems(key, mapping)
        if key == "deepspeed" and installed_here and importlib.util.find_spec("deepspeed") is None:
            found.append((key, "DeepSpeed needs the deepspeed package, which is not installed",
                          "pip install deepspeed, or use FSDP (framework configs fsdp2, fsdp-full-shard)"))
    return found
