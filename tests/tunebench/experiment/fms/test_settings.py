"""tunebench.experiment.fms.settings: what an fms `plugins:` body asks for, read once."""

from __future__ import annotations

import json

import pytest

from tunebench.experiment.fms.settings import FmsPlugins, fms_plugins_of, needed_arguments, unknown_paths

GPTQ = {"peft": {"quantization": {"auto_gptq": {"kernel": "triton_v2", "from_quantized": True}}}}
FOAK = {"base_layer": "bitsandbytes", "fused_lora": True, "fast_loss": True}
BNB_FOAK = {"peft": {"quantization": {"bitsandbytes": {"quant_type": "nf4", "no_peft_model": False},
                                      "fused_ops_and_kernels": FOAK}}}


def test_gptq_body():
    plugins = fms_plugins_of(json.dumps(GPTQ))
    assert plugins.enabled and plugins.base == "gptq" and plugins.adds_adapters
    assert plugins.packages == ["fms_acceleration", "fms_acceleration_peft"]
    assert plugins.foak is None and plugins.foak_base_layer is None
    assert plugins.label() == "auto_gptq"
    assert needed_arguments(plugins) == {"fp16": True, "torch_dtype": "float16"}


def test_bnb_with_foak_body():
    plugins = fms_plugins_of(BNB_FOAK)
    assert plugins.base == "bnb" and plugins.adds_adapters
    assert plugins.packages == ["fms_acceleration", "fms_acceleration_foak", "fms_acceleration_peft"]
    assert plugins.foak_base_layer == "bitsandbytes"
    assert plugins.label() == "bitsandbytes+fused_ops_and_kernels"
    assert needed_arguments(plugins) == {}


def test_baseline_bnb_leaves_lora_to_the_trainer():
    plugins = fms_plugins_of({"peft": {"quantization": {"bitsandbytes": {"quant_type": "nf4", "no_peft_model": True}}}})
    assert plugins.base == "bnb" and not plugins.adds_adapters


def test_foak_alone_keeps_the_model_and_defaults_base_layer():
    plugins = fms_plugins_of({"training": {"fused_ops_and_kernels": {"fast_loss": True, "fused_lora": True}}})
    assert plugins.base == "model" and not plugins.adds_adapters
    assert plugins.foak_base_layer == "auto_gptq"  # fms's own default


def test_a_whole_sample_configuration_file_is_its_plugins_body():
    assert fms_plugins_of({"plugins": GPTQ}).body == GPTQ


def test_unknown_paths_are_named():
    body = {"peft": {"quantization": {"auto_gptq": {"kernel": "triton_v2"}, "gptq_v3": {"x": 1}}},
            "training": {"fused_ops_and_kernels": {"fast_loss": True}, "turbo": True}}
    assert FmsPlugins(body).unknown_paths == ["peft.quantization.gptq_v3", "training.turbo"]
    assert unknown_paths({"peft": {"quantization": 3}, "a": {"b": {}}}) == ["peft.quantization", "a"]


@pytest.mark.parametrize("value", ["", None, {}])
def test_empty_is_no_plugin(value):
    assert not fms_plugins_of(value).enabled and fms_plugins_of(value).packages == []


@pytest.mark.parametrize(("value", "words"), [("{not json", "JSON"), ("[1, 2]", "list"), (5, "int")])
def test_bad_values_say_what_they_are(value, words):
    with pytest.raises(ValueError, match=words):
        fms_plugins_of(value)


def test_text_round_trips():
    plugins = fms_plugins_of(BNB_FOAK)
    assert fms_plugins_of(plugins.text()) == plugins
