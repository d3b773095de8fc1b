"""One scanned GPU step of a model with the allocator's history and Python stacks, for peak_blocks.py.

    python3 docs/evidence/layer-families-h100/peak_snapshot.py MODEL --out step.pickle [--checkpointing] \
        [--batch 4] [--seq 1024]
    python3 docs/evidence/common/peak_blocks.py step.pickle
Prints the scanner's categories of the step (bf16 weights, bf16 autocast, fused AdamW, as the harness trains).
"""

from __future__ import annotations

import argparse
import json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--out", required=True)
    parser.add_argument("--checkpointing", action="store_true")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=1024)
    args = parser.parse_args()

    import torch
    from transformers import Trainer, TrainingArguments

    from scanner import Scanner
    from tunebench.experiment.entry_parser import checkpointing_renames
    from tunebench.experiment.models import load_config, load_model

    torch.manual_seed(0)
    model = load_model(args.model, "bfloat16", init_device="cuda:0")  # GPU init: the host CPU is slow
    model.config.use_cache = False  # as TRL trains
    names = checkpointing_renames()
    checkpointing = {
        names.get("gradient_checkpointing", "gradient_checkpointing"): args.checkpointing,
        names.get("gradient_checkpointing_kwargs", "gradient_checkpointing_kwargs"): {"use_reentrant": False},
    }
    vocab = load_config(args.model).vocab_size
    steps = 3  # the optimizer state exists from step 1; step 3 is an ordinary step
    rows = [
        {"input_ids": ids, "labels": ids.clone()} for ids in torch.randint(3, vocab, (steps * args.batch, args.seq))
    ]
    scanner = Scanner(steps=steps, time_steps="off", output=None, log_to_trainer=False, memory_snapshot=args.out)
    training = TrainingArguments(
        output_dir="/tmp/peak-snapshot",
        max_steps=steps,
        per_device_train_batch_size=args.batch,
        bf16=True,
        optim="adamw_torch_fused",
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        **checkpointing,
    )
    Trainer(model=model, args=training, train_dataset=rows, callbacks=[scanner]).train()
    print(json.dumps({k: v for k, v in scanner.flat_metrics().items() if k.startswith("scan_mem")}, indent=1))


if __name__ == "__main__":
    main()
