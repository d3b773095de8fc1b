"""Worker of tests/tunebench/planning/test_sharded_step.py (run under torchrun, gloo): a real FSDP rank (FSDP2 or FSDP1), sharded as
accelerate prepares it (planning.sharded_step.shard on a real process group), and torch's MemTracker over its
second training step; rank 0 writes, per case, the peak's bytes and the bytes of parameters the rank holds after the
step to <out>/real.json."""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed._tools.mem_tracker import MemTracker
from torch.distributed.device_mesh import init_device_mesh
from transformers import AutoModelForCausalLM

from tunebench.experiment.models import load_config
from tunebench.experiment.sharding import Fsdp
from tunebench.planning.sharded_step import MESH_DIM, shard, shard_bytes
from tunebench.planning.peak_rules import ignore_frozen_parameters

CASES = json.loads(sys.argv[1])  # [{"model", "peft", "fsdp": Fsdp's fields, "micro_batch", "seq_len"}]
out = Path(sys.argv[2])


def peak_of(case: dict, mesh) -> list[int]:
    config = load_config(case["model"])
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    if case["peft"] == "lora":
        from peft import LoraConfig, TaskType, get_peft_model

        model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                                 task_type=TaskType.CAUSAL_LM))
    model.train()
    model = shard(model, Fsdp(**case["fsdp"]), mesh, "bf16")
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-5, fused=True)
    ids = torch.randint(3, config.vocab_size, (case["micro_batch"], case["seq_len"]))

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # warm-up, as the scanner measures a step after it
    tracker = MemTracker()
    ignore_frozen_parameters(tracker, model)
    tracker.track_external(model, optimizer)
    with tracker:
        step()
    (device_peak,) = tracker.get_tracker_snapshot("peak").values()
    return [int(device_peak["Total"]), shard_bytes(model, 1)]


dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=(MESH_DIM,))
peaks = [peak_of(case, mesh) for case in CASES]
if dist.get_rank() == 0:
    (out / "real.json").write_text(json.dumps(peaks))
dist.destroy_process_group()
