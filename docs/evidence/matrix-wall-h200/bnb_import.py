"""What bitsandbytes costs a LoRA experiment that quantizes nothing, on the GPU (issue AE, third part): PEFT's LoRA
wrap of a Llama-3.2-1B-shaped model already on the GPU, timed in a fresh process, with bitsandbytes absent, present
(the wrap imports it: PEFT asks it for its 4-bit layer class), and present but imported first (timed alone).

    python bnb_import.py absent|present|imported-first     # one JSON line: seconds of each part
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time


def main(case: str) -> None:
    started = time.perf_counter()
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    imports = time.perf_counter() - started
    installed = importlib.util.find_spec("bitsandbytes") is not None
    assert installed == (case != "absent"), f"bitsandbytes installed: {installed}, case {case}"
    config = LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                         num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=True)
    begun = time.perf_counter()
    with torch.device("cuda"):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    torch.cuda.synchronize()
    build = time.perf_counter() - begun
    bnb_import = None
    if case == "imported-first":
        begun = time.perf_counter()
        import bitsandbytes  # noqa: F401

        bnb_import = time.perf_counter() - begun
    begun = time.perf_counter()
    model = get_peft_model(model, LoraConfig(r=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    wrap = time.perf_counter() - begun
    print(json.dumps({"case": case, "imports_s": round(imports, 3), "model_on_gpu_s": round(build, 3),
                      "bitsandbytes_import_s": None if bnb_import is None else round(bnb_import, 3),
                      "lora_wrap_s": round(wrap, 3), "bitsandbytes_loaded": "bitsandbytes" in sys.modules,
                      "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}))


if __name__ == "__main__":
    main(sys.argv[1])
