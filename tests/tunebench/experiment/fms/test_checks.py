"""tunebench.experiment.fms.checks: fms's own verdict on plugin bodies, from a child interpreter (one per matrix)."""

from __future__ import annotations

import json

import pytest

from tunebench.experiment.fms import checks
from tunebench.experiment.fms.compat import installed

pytestmark = pytest.mark.skipif(not installed("fms_acceleration_peft"), reason="fms-acceleration is not installed")

GPTQ = json.dumps({"peft": {"quantization": {"auto_gptq": {"from_quantized": True, "kernel": "triton_v2"}}}},
                  sort_keys=True)
BAD_KERNEL = json.dumps({"peft": {"quantization": {"auto_gptq": {"from_quantized": True, "kernel": "exllama"}}}},
                        sort_keys=True)
FOAK = json.dumps({"training": {"fused_ops_and_kernels": {"fast_loss": True}}}, sort_keys=True)


@pytest.fixture(scope="module")
def answer():
    return checks.probe((GPTQ, BAD_KERNEL, FOAK))


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
def test_the_plugins_own_config_check(answer):
    assert answer["bodies"][GPTQ]["config_errors"] == []
    assert answer["bodies"][BAD_KERNEL]["config_errors"] == [
        "AutoGPTQAccelerationPlugin: AutoGPTQAccelerationPlugin: Value at 'peft.quantization.auto_gptq.kernel' was "
        "'exllama'. Not found in expected set '['triton_v2']'."]


def test_restricted_architectures_and_gptq_model_types(answer):
    foak = answer["bodies"][FOAK]
    assert foak["plugins"] == ["FastKernelsAccelerationPlugin"]
    [(plugin, archs)] = foak["restricted_archs"]
    assert plugin == "FastKernelsAccelerationPlugin" and "LlamaForCausalLM" in archs and "Qwen2ForCausalLM" not in archs
    assert "llama" in answer["bodies"][GPTQ]["gptq_model_types"]
    assert "qwen2" not in answer["bodies"][GPTQ]["gptq_model_types"]


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
def test_package_status(answer):
    assert answer["packages"]["fms_acceleration"] is None and answer["packages"]["fms_acceleration_peft"] is None


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
@pytest.mark.skipif(not installed("fms_acceleration_aadp"), reason="fms-acceleration-aadp is not installed")
def test_a_broken_package_is_found_and_the_rest_still_answers():
    aadp = json.dumps({"training": {"attention": {"padding_free": {"method": "huggingface"}}}}, sort_keys=True)
    found = checks.probe((aadp, GPTQ))
    assert "DataCollatorForCompletionOnlyLM" in found["packages"]["fms_acceleration_aadp"]
    assert found["packages"]["fms_acceleration_peft"] is None
    assert found["bodies"][GPTQ]["plugins"] == ["AutoGPTQAccelerationPlugin"]


def test_facts_are_fetched_once_per_body(monkeypatch):
    calls = []
    monkeypatch.setattr(checks, "_FACTS", {})
    monkeypatch.setattr(checks, "probe", lambda bodies: calls.append(bodies) or {"packages": {}, "bodies": {}})
    checks.prefetch([GPTQ, FOAK])
    checks.facts(GPTQ)
    checks.prefetch([FOAK])
    assert calls == [tuple(sorted((GPTQ, FOAK)))]
