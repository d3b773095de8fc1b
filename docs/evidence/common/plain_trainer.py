"""Independent reference for the harness's step time: a plain `transformers.Trainer` timed the same way.

Same model (a tunebench preset's config, random weights, built on the GPU), same batch (fixed-length rows of
`--seq` tokens, `--batch` per device), same optimizer, dtype and attention as the harness's scenario — but none
of the harness: no TRL, no scanner, no token counter, no tunebench callback. Every optimizer step is timed with
CUDA events at `on_train_begin` / `on_step_end`, read after one sync at the end (the harness's StepTimer does
the same; this file re-implements it on purpose so that the two measurements share no code).

  python3 docs/evidence/common/plain_trainer.py --preset llama-3.2-1b --steps 30 --warmup 5 --out plain.json
  --variant lean (default): the harness's defaults (fused AdamW, no per-step loss check, no logging,
                            non-blocking host-to-device batches)
  --variant hf-defaults: transformers' own defaults for those knobs (optimizer kept as --optim)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, Trainer, TrainerCallback, TrainingArguments

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from tunebench.experiment.models import PRESETS  # noqa: E402  (config values only)


class EventTimer(TrainerCallback):
    def __init__(self):
        self.events = []

    def _mark(self):
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self.events.append(event)

    def on_train_begin(self, args, state, control, **kwargs):
        self.events = []
        self._mark()

    def on_step_end(self, args, state, control, **kwargs):
        self._mark()

    def seconds(self) -> list[float]:
        torch.cuda.synchronize()
        return [a.elapsed_time(b) / 1e3 for a, b in zip(self.events, self.events[1:], strict=False)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="llama-3.2-1b")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--optim", default="adamw_torch_fused")
    p.add_argument("--attn", default="sdpa")
    p.add_argument("--variant", choices=["lean", "hf-defaults"], default="lean")
    p.add_argument("--out", required=True)
    a = p.parse_args()

    values = dict(PRESETS[a.preset])
    config = AutoConfig.for_model(values.pop("model_type"), **values)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation=a.attn)
    generator = torch.Generator().manual_seed(1)
    rows = []
    for _ in range(a.batch * a.steps):
        ids = torch.randint(3, config.vocab_size, (a.seq,), generator=generator)
        rows.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()})
    lean = a.variant == "lean"
    args = TrainingArguments(
        output_dir="/tmp/plain-trainer", max_steps=a.steps, per_device_train_batch_size=a.batch, bf16=True,
        optim=a.optim, learning_rate=2e-5, lr_scheduler_type="constant", save_strategy="no", report_to=[],
        dataloader_num_workers=0, disable_tqdm=True, seed=42,
        **({"logging_strategy": "no", "logging_nan_inf_filter": False,
            "accelerator_config": {"non_blocking": True}} if lean else {}),
    )
    timer = EventTimer()
    started = time.time()
    Trainer(model=model, args=args, train_dataset=rows, callbacks=[timer]).train()
    seconds = timer.seconds()
    steady = seconds[a.warmup:]
    median = statistics.median(steady)
    tokens = a.batch * a.seq
    result = {
        "variant": a.variant, "preset": a.preset, "batch": a.batch, "seq": a.seq, "optim": a.optim,
        "attn": a.attn, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
        "step_seconds": seconds, "warmup_steps": a.warmup, "steady_step_time_median": median,
        "steady_step_time_cv": statistics.stdev(steady) / statistics.fmean(steady),
        "steady_tokens_per_second": tokens / median, "train_wall_seconds": time.time() - started,
    }
    Path(a.out).write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "step_seconds"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
