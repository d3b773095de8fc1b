"""tunebench.experiment.fms.bases: the checkpoint folder fms's loader reads, written once for random weights."""

from __future__ import annotations

import json

import pytest

from tunebench.experiment.fms.bases import checkpoint_for, quantization_label
from tunebench.experiment.fms.compat import installed
from tunebench.experiment.fms.settings import fms_plugins_of

GPTQ = fms_plugins_of({"peft": {"quantization": {"auto_gptq": {"kernel": "triton_v2", "from_quantized": True}}}})
BNB = fms_plugins_of({"peft": {"quantization": {"bitsandbytes": {"quant_type": "fp4", "no_peft_model": True}}}})


@pytest.mark.skipif(not installed("fms_acceleration_peft"), reason="fms-acceleration-peft is not installed")
def test_a_preset_gets_one_gptq_checkpoint_of_its_random_weights(tmp_path, monkeypatch):
    from safetensors import safe_open

    from tests.fixtures.fms_cpu import install_cpu_gptq

    install_cpu_gptq()
    monkeypatch.setenv("TUNEBENCH_CACHE", str(tmp_path))
    folder = checkpoint_for(GPTQ, "preset:llama-tiny", "float16", None, "cpu", seed=7)
    assert folder.name.startswith("llama-gptq-rtn-4bit-g128-")
    assert checkpoint_for(GPTQ, "preset:llama-tiny", "float16", None, "cpu", seed=7) == folder  # cached
    assert checkpoint_for(GPTQ, "preset:llama-tiny", "float16", None, "cpu", seed=8) != folder  # other weights
    with safe_open(str(folder / "model.safetensors"), "pt") as tensors:
        names = set(tensors.keys())
        assert tensors.get_tensor("model.layers.0.self_attn.q_proj.qweight").shape == (64 * 4 // 32, 64)
    # every linear of the repeated layers quantized (fms's llama definition), the rest kept in fp16
    assert {n for n in names if n.endswith(".qweight")} == {
        f"model.layers.{i}.{m}.qweight" for i in range(2) for m in
        ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
         "mlp.up_proj", "mlp.down_proj")}
    assert "model.embed_tokens.weight" in names and "lm_head.weight" in names
    assert not any(n.endswith("proj.weight") for n in names)
    config = json.loads((folder / "quantize_config.json").read_text())
    assert (config["bits"], config["group_size"], config["sym"], config["desc_act"]) == (4, 128, True, False)
    assert quantization_label(GPTQ, folder) == "gptq-4bit-g128-rtn"


def test_a_local_gptq_folder_is_read_as_given(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_text("")
    (tmp_path / "quantize_config.json").write_text(json.dumps({"bits": 4, "group_size": 32}))
    assert checkpoint_for(GPTQ, str(tmp_path), "float16", None, "cpu", seed=0) == tmp_path
    assert quantization_label(GPTQ, tmp_path) == "gptq-4bit-g32-checkpoint"


def test_bnb_labels():
    assert quantization_label(BNB, None) == "bnb-4bit-fp4-dq"
    assert quantization_label(fms_plugins_of({}), None) == "none"
