"""Worker for the gloo collective tests (run under torchrun): a tiny Llama, Trainer+DDP with the Scanner, or FSDP2."""

import json
import sys
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

from scanner import Scanner

mode, out_dir = sys.argv[1], Path(sys.argv[2])
torch.manual_seed(0)
config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, vocab_size=256, tie_word_embeddings=False)
model = LlamaForCausalLM(config)
layer_bytes = sum(p.numel() * p.element_size() for layer in model.model.layers for p in layer.parameters())
all_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)

if mode == "fsdp2":
    # accelerate runs FSDP only on accelerators (on CPU the Trainer silently falls back to DDP), so on gloo the
    # FSDP2 path is exercised directly: fully_shard per decoder layer and root, one step under the recorder.
    from torch.distributed.fsdp import fully_shard

    from scanner.step_profiler import StepProfiler

    torch.distributed.init_process_group("gloo")
    for layer in model.model.layers:
        fully_shard(layer, reshard_after_forward=True)
    fully_shard(model, reshard_after_forward=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = torch.randint(3, 256, (2, 32))
    for step in range(3):
        recorder = StepProfiler("cpu", collectives=True) if step == 1 else None
        if recorder:
            recorder.start()
        model(input_ids=batch, labels=batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if recorder:
            summary = recorder.stop(torch.distributed.get_world_size())[0]
            rank = torch.distributed.get_rank()
            local = sum(p.to_local().numel() * p.element_size() for p in model.parameters())
            from scanner.memory import unique_storage_bytes

            scanned, _ = unique_storage_bytes(model.parameters(), torch.device("cpu"))
            assert scanned == local, (scanned, local)  # the scanner sees each rank's shard of the DTensors
            (out_dir / f"scan.rank{rank}.json").write_text(json.dumps({"collectives": summary, "local_param_bytes": local}))
    if torch.distributed.get_rank() == 0:
        (out_dir / "expected.json").write_text(json.dumps({
            "layer_param_bytes": layer_bytes, "root_param_bytes": all_bytes - layer_bytes, "grad_bytes": grad_bytes}))
    torch.distributed.destroy_process_group()
    sys.exit(0)

rows = [{"input_ids": torch.randint(3, 256, (32,)).tolist()} for _ in range(64)]
for row in rows:
    row["labels"] = list(row["input_ids"])
args = TrainingArguments(output_dir=str(out_dir / "trainer"), use_cpu=True, max_steps=3, per_device_train_batch_size=2,
                         report_to="none", save_strategy="no", logging_steps=100)
scanner = Scanner(steps=2, output=str(out_dir / "scan.json"), collectives=True)
Trainer(model=model, args=args, train_dataset=rows, callbacks=[scanner]).train()
if torch.distributed.get_rank() == 0:
    (out_dir / "expected.json").write_text(json.dumps({
        "layer_param_bytes": layer_bytes, "root_param_bytes": all_bytes - layer_bytes, "grad_bytes": grad_bytes,
    }))
# Tear the process group down before exit: gloo worker threads alive at interpreter exit abort the process.
torch.distributed.destroy_process_group()
