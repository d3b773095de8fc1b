"""Scenario habits tunebench reads as fms-acceleration's benchmark reads them: mixed precision as one choice across
the argument layers, and LoRA target modules written as one space-separated string.

- fms's PEFT scenarios set `fp16: True` (GPTQ runs in float16) while tunebench's defaults.yaml sets `bf16: true`.
  `bf16` and `fp16` are two keys of one choice, so the highest layer that turns one on decides, and the other is
  turned off: defaults < data_processing < scenario < framework config < command line. Two layers above the
  defaults that turn on different ones disagree: that is a problem naming both files (and one layer turning on both).
- fms writes `target_modules: "q_proj k_proj v_proj o_proj"` (and its CSVs keep them so): each whitespace-separated
  name is a module. PEFT would read the whole string as one regular expression, matching nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

PRECISION_FLAGS = ("bf16", "fp16")
_TRUE_WORDS = ("true", "yes", "1", "on")


@dataclass(frozen=True)
class Layer:
    """One layer of an experiment's arguments: where it was written, and whether a choice there is only a default."""

    where: str  # e.g. "defaults.yaml", "scenarios.yaml: scenario 'x'"
    arguments: dict[str, Any]
    weak: bool = False  # defaults: any layer above overrides them without a word


def _on(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() in _TRUE_WORDS)


def resolve_precision(layers: list[Layer]) -> tuple[dict[str, bool], str | None]:
    """({flag: value} to set, or {} when no layer turns either on; the conflict, or None), layers lowest first."""
    turned_on = [(layer, flag) for layer in layers for flag in PRECISION_FLAGS if _on(layer.arguments.get(flag))]
    if not turned_on:
        return {}, None
    top_layer, winner = turned_on[-1]
    if all(_on(top_layer.arguments.get(flag)) for flag in PRECISION_FLAGS):
        return {}, f"{top_layer.where} turns on both bf16 and fp16"
    for layer, flag in turned_on:
        if flag != winner and not layer.weak:
            return {}, (f"{layer.where} sets {flag}: true, {top_layer.where} sets {winner}: true: mixed precision is "
                        f"one choice")
    return {flag: flag == winner for flag in PRECISION_FLAGS}, None


def split_target_modules(value: Any) -> Any:
    """`"q_proj k_proj"` (or a list holding such strings) as the list of names it means; anything else as it is."""
    if isinstance(value, str) and len(value.split()) > 1:
        return value.split()
    if isinstance(value, list) and any(isinstance(v, str) and len(v.split()) > 1 for v in value):
        return [name for v in value for name in (v.split() if isinstance(v, str) else [v])]
    return value
