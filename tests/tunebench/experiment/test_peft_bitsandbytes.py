"""tunebench/experiment/peft_bitsandbytes.py: with bitsandbytes held deferred (as the preload server holds it on a GPU
machine), a LoRA wrap of a model that quantizes nothing leaves bitsandbytes unimported, and a model loaded in 4 bits
still gets PEFT's bitsandbytes LoRA layers (issue AE: 2.6-3.3 s of every LoRA row on an H200)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.fixtures.harness import REPO
from tunebench.experiment.peft_bitsandbytes import has_linear4bit


@pytest.mark.parametrize(("version", "has"), [("0.38.1", False), ("0.39.0", True), ("0.50.2", True),
                                              ("1.0.0", True), ("0.49.0.dev0", True)])
def test_the_version_says_whether_bitsandbytes_has_a_4_bit_layer(version, has):
    assert has_linear4bit(version) is has


WRAP = textwrap.dedent("""
    import json, sys
    from tunebench.experiment.deferred_module import defer, loaded
    assert defer("bitsandbytes")
    import peft
    from trl import SFTTrainer  # what the preload server imports, as it imports it
    from tunebench.experiment.peft_bitsandbytes import answer_from_the_version
    replaced = answer_from_the_version() if sys.argv[1] == "answered" else 0
    from transformers import LlamaConfig, LlamaForCausalLM
    from peft import LoraConfig, get_peft_model
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=128)
    lora = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    plain = get_peft_model(LlamaForCausalLM(config), lora)
    out = {"replaced": replaced, "loaded_after_plain": loaded("bitsandbytes"),
           "plain_layer": type(plain.base_model.model.model.layers[0].self_attn.q_proj).__module__}
    if sys.argv[1] == "answered":
        from transformers import BitsAndBytesConfig
        LlamaForCausalLM(config).save_pretrained(sys.argv[2])
        quantized = LlamaForCausalLM.from_pretrained(sys.argv[2], quantization_config=BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_compute_dtype="float32"))
        layer = get_peft_model(quantized, lora).base_model.model.model.layers[0].self_attn.q_proj
        out.update(loaded_after_4bit=loaded("bitsandbytes"),
                   four_bit_layer=f"{type(layer).__module__}.{type(layer).__name__}")
    print(json.dumps(out))
""")


def _wrap(case: str, folder) -> dict:
    done = subprocess.run([sys.executable, "-c", WRAP, case, str(folder)], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # two interpreters importing the stack
def test_a_lora_wrap_of_an_unquantized_model_leaves_bitsandbytes_unimported(tmp_path):
    pytest.importorskip("bitsandbytes")
    held = _wrap("held", tmp_path / "held")  # PEFT's own check: the wrap imports bitsandbytes
    assert held["loaded_after_plain"] is True
    answered = _wrap("answered", tmp_path / "answered")
    assert answered["replaced"] >= 2  # peft.import_utils's own name and the tuners that imported it by name
    assert answered["loaded_after_plain"] is False
    assert answered["plain_layer"] == held["plain_layer"] == "peft.tuners.lora.layer"
    # a model loaded in 4 bits imported bitsandbytes itself, and PEFT then asked bitsandbytes
    assert answered["loaded_after_4bit"] is True
    assert answered["four_bit_layer"] == "peft.tuners.lora.bnb.Linear4bit"
