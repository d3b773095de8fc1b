"""tunebench.experiment.fms.applicability: problems (exit 2) and skip reasons of fms plugin settings."""

from __future__ import annotations

import json

import pytest

from tunebench.experiment.fms.applicability import causal_lm_class, problems, skip_reason
from tunebench.experiment.fms.compat import installed

pytestmark = pytest.mark.skipif(not installed("fms_acceleration_peft"), reason="fms-acceleration is not installed")

GPTQ = {"peft": {"quantization": {"auto_gptq": {"kernel": "triton_v2", "from_quantized": True}}}}
FOAK = {"training": {"fused_ops_and_kernels": {"fast_loss": True, "fast_rms_layernorm": True}}}
BNB = {"peft": {"quantization": {"bitsandbytes": {"quant_type": "nf4", "no_peft_model": False}}}}


MARLIN = {"peft": {"quantization": {"auto_gptq": {"kernel": "marlin", "from_quantized": True}}}}


def model(body, **values):
    return {"fms_plugins": json.dumps(body, sort_keys=True), **values}


@pytest.fixture(scope="module", autouse=True)
def probed():
    """Every body of this module asked of fms in one child interpreter, as a matrix does."""
    from tunebench.experiment.fms.checks import prefetch

    prefetch([json.dumps(body, sort_keys=True) for body in (GPTQ, FOAK, BNB, MARLIN)])


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
def test_a_good_body_has_no_problem():
    assert problems(model(GPTQ), "cuda", installed_here=True) == []


def test_problems_name_the_key_and_fix():
    [(key, message, fix)] = problems(model({"peft": {"quantization": {"gptq": {}}}}), "cuda", True)
    assert key == "fms_plugins" and message.startswith("'peft.quantization.gptq' is a path no fms plugin registers")
    assert "peft.quantization.auto_gptq" in fix
    bad = problems(model(MARLIN), "cuda", True)
    assert bad[0][1].startswith("fms refuses the config: AutoGPTQAccelerationPlugin")
    both = problems(model(BNB, load_in_4bit=True), "cuda", True)
    assert both[0][1].startswith("fms's bnb loader quantizes the base, and load_in_4bit/load_in_8bit")
    assert problems({"fms_plugins": "{oops"}, "cuda", True)[0][1].startswith("fms_plugins is not a mapping")


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
def test_skips_say_why():
    assert "only LoRA adapters train" in skip_reason(model(GPTQ), "none", "preset:llama-tiny", "cuda")
    assert "Triton GPU kernel" in skip_reason(model(GPTQ), "lora", "preset:llama-tiny", "cpu")
    assert "Triton GPU kernels: there is none" in skip_reason(model(FOAK), "none", "preset:llama-tiny", "cpu")
    assert skip_reason(model(GPTQ), "lora", "preset:llama-tiny", "cuda") is None
    assert skip_reason(model(BNB), "lora", "preset:llama-tiny", "cpu") is None  # bitsandbytes runs on the CPU
    qwen_gptq = skip_reason(model(GPTQ), "lora", "preset:qwen2.5-0.5b", "cuda")
    assert qwen_gptq.startswith("fms's GPTQ loader has no model definition for 'qwen2'")
    qwen_foak = skip_reason(model(FOAK), "none", "preset:qwen2.5-0.5b", "cuda")
    assert qwen_foak.startswith("fms's FastKernelsAccelerationPlugin supports only") and "Qwen2ForCausalLM" in qwen_foak


def test_no_setting_no_verdict():
    assert problems({}, "cuda", True) == [] and skip_reason({}, "none", "preset:llama-tiny", "cpu") is None


def test_causal_lm_class_of_a_preset():
    from tunebench.experiment.models import load_config

    assert causal_lm_class(load_config("preset:mistral-7b")) == "MistralForCausalLM"
