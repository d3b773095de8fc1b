"""Why an 8-bit (LLM.int8) row's temporaries exceed the fake step's: the outlier columns.

bitsandbytes splits off every input column holding a value above `llm_int8_threshold` (6.0) and multiplies it in
16 bits; the split-off inputs are kept for backward. How many there are depends on the data, which the fake step
does not have (it takes none). This probe loads a preset as the harness does, runs one training step and prints
the outlier columns per layer and the step's peak, with the threshold as loaded and with 0 (no outliers).

  python docs/evidence/acceleration-h100/int8_outliers.py preset:llama-3.1-8b 4 1024
"""

import sys

import torch
from peft import LoraConfig, get_peft_model

from tunebench.experiment.models import load_model
from tunebench.experiment.quantization import Quantization, adapters_in_bfloat16


def step_peak(model, ids) -> int:
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    loss.backward()
    model.zero_grad(set_to_none=True)
    return torch.cuda.max_memory_allocated() - before


def main(model_name: str, batch: int, seq: int) -> None:
    torch.manual_seed(42)
    model = load_model(model_name, "bfloat16", init_device="cuda:0", quantization=Quantization("bnb-8bit"), seed=42)
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj",
                                                                                  "o_proj"], task_type="CAUSAL_LM"))
    adapters_in_bfloat16(model)
    model.train()
    ids = torch.randint(3, model.config.vocab_size, (batch, seq), device="cuda:0")
    import bitsandbytes

    layers = [m for m in model.modules() if isinstance(m, bitsandbytes.nn.Linear8bitLt)]  # not PEFT's wrappers
    peak = step_peak(model, ids)
    outliers = [int(m.state.idx.numel()) if m.state.idx is not None else 0 for m in layers]
    print(f"{model_name} batch {batch} seq {seq}: {len(layers)} int8 layers, outlier columns per layer: "
          f"mean {sum(outliers) / len(outliers):.1f}, max {max(outliers)}, total {sum(outliers)}")
    print(f"step peak above the model, threshold {layers[0].state.threshold}: {peak:,} B")
    for m in layers:
        m.state.threshold = 0.0
    print(f"step peak above the model, threshold 0 (no outliers): {step_peak(model, ids):,} B")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
