"""tunebench.matrix.habits: fms's scenario habits (fp16 over bf16 defaults, space-separated target modules)."""

from __future__ import annotations

import pytest

from tunebench.matrix.habits import Layer, resolve_precision, split_target_modules

DEFAULTS = Layer("defaults.yaml", {"bf16": True}, weak=True)


def test_fp16_in_a_scenario_turns_the_default_bf16_off():
    assert resolve_precision([DEFAULTS, Layer("s.yaml: scenario 'g'", {"fp16": True})]) == (
        {"bf16": False, "fp16": True}, None)


def test_fp16_in_a_framework_config_over_defaults_too():
    layers = [DEFAULTS, Layer("s.yaml: scenario 'g'", {}), Layer("fc.yaml: framework config 'gptq'", {"fp16": "True"})]
    assert resolve_precision(layers)[0] == {"bf16": False, "fp16": True}


def test_no_choice_anywhere_changes_nothing():
    assert resolve_precision([Layer("d", {"bf16": False}, weak=True), Layer("s", {})]) == ({}, None)


def test_two_explicit_layers_that_disagree_name_both():
    _, conflict = resolve_precision([DEFAULTS, Layer("s.yaml: scenario 'x'", {"bf16": True}),
                                     Layer("fc.yaml: framework config 'gptq'", {"fp16": True})])
    assert conflict == ("s.yaml: scenario 'x' sets bf16: true, fc.yaml: framework config 'gptq' sets fp16: true: "
                        "mixed precision is one choice")


def test_one_layer_with_both_is_a_conflict():
    assert resolve_precision([Layer("s", {"bf16": True, "fp16": True})])[1] == "s turns on both bf16 and fp16"


@pytest.mark.parametrize(("value", "expected"), [
    ("q_proj k_proj v_proj o_proj", ["q_proj", "k_proj", "v_proj", "o_proj"]),
    (["q_proj k_proj", "o_proj"], ["q_proj", "k_proj", "o_proj"]),
    (["q_proj", "v_proj"], ["q_proj", "v_proj"]),
    ("all-linear", "all-linear"),
    ("q_proj", "q_proj"),
])
def test_target_modules_split_on_whitespace(value, expected):
    assert split_target_modules(value) == expected
