"""Which kernel made each large block alive at a training step's allocator peak, by its C++ and Python frames.

    python3 docs/evidence/prediction-conformance-h100/alloc_frames.py MODEL [--checkpointing] [--batch 4] \
        [--seq 1024] [--top 12]
One bf16 step under bf16 autocast with fused AdamW (the harness's defaults), the third of three, recorded with
full stacks; backward-thread allocations carry no Python frames, so the C++ ones name the kernel (issue L: what
a GPU allocates that the CPU kernels of the fake step do not).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _frames(entry: dict, limit: int = 8) -> list[str]:
    names = [f.get("name", "") for f in entry.get("frames", [])]
    keep = [
        n for n in names if any(k in n for k in ("at::native", "at::cuda", "cublas", "cudnn", "Backward", "at::_ops"))
    ]
    return (keep or names)[:limit]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--checkpointing", action="store_true")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # the evidence's shared helpers
    from peak_blocks import live_at_peak  # docs/evidence/common/peak_blocks.py

    from tunebench.experiment.models import load_config, load_model

    torch.manual_seed(0)
    model = load_model(args.model, "bfloat16").cuda().train()
    if args.checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    vocab = load_config(args.model).vocab_size
    for step in range(3):
        if step == 2:
            torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="all", context="all")
        ids = torch.randint(3, vocab, (args.batch, args.seq), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        del loss
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    entries = snapshot["device_traces"][0]
    best, at, live = live_at_peak(entries)
    largest = sorted(live.values(), key=lambda e: -e["size"])[: args.top]
    recent = [e for e in entries[max(0, at - 30): at + 1] if e["action"] == "alloc" and e["size"] >= 1 << 20]
    print(
        json.dumps(
            {
                "peak_above_start": best,
                "peak_entry": {"size": entries[at]["size"], "frames": _frames(entries[at], 20)},
                "largest_live": [{"size": e["size"], "frames": _frames(e)} for e in largest],
                "recent_allocs": [{"size": e["size"], "frames": _frames(e)} for e in recent],
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
