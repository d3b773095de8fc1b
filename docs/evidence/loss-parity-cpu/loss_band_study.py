"""The CPU measurements behind issue 45's choices (docs/evidence/loss-parity-cpu.md), in plain training loops.

  PYTHONPATH=. python docs/evidence/loss-parity-cpu/loss_band_study.py learn --preset llama-tiny --lr 1e-3
  PYTHONPATH=. python docs/evidence/loss-parity-cpu/loss_band_study.py band --preset llama-small --dtype bfloat16 \
      --lr 2e-4
  PYTHONPATH=. python docs/evidence/loss-parity-cpu/loss_band_study.py throughput --preset llama-small

`learn`: the loss of a random-init preset over the steps on each corpus (uniform ids, Markov chains of several
sizes): which process a benchmark's steps can learn. `band`: the largest relative loss difference from the
baseline (same data, same seed) of each perturbation: the band candidates (rows permuted in every batch, another
init seed, another data order), settings that only reorder the arithmetic (eager attention, checkpointing) and
settings that change the numerics (AdamW β2 0.99, ε 1e-6, the learning rate ×1.05, bitsandbytes' 8-bit AdamW).
`throughput`: steps on the corpora's batches (same shapes) in rotation, their median CPU times compared.
AdamW as the harness runs it (torch's fused kernel, weight decay 0, gradients clipped to norm 1), batch 8 × 128.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np
import torch

from tunebench.experiment.corpus import markov_chain, markov_rows, uniform_rows
from tunebench.experiment.models import load_model

BATCH, LENGTH = 8, 128


def corpus(kind: str, states: int, branching: int, steps: int, seed: int = 42) -> torch.Tensor:
    """[steps × BATCH, LENGTH] ids over the byte tokenizer's 256 ordinary ids (3..258), as the presets get them."""
    lengths = [LENGTH] * (steps * BATCH)
    if kind == "uniform":
        return torch.tensor(uniform_rows(lengths, 3, 3 + states, seed))
    return torch.tensor(markov_rows(markov_chain(states, branching, 3, 259, seed), lengths, seed))


def train(preset: str, dtype: str, lr: float, data: torch.Tensor, steps: int, *, attn: str = "sdpa",
          checkpointing: bool = False, init_seed: int = 42, row_seed: int = 0, order_seed: int = 0,
          optimizer: str = "adamw", beta2: float = 0.999, eps: float = 1e-8, lora: bool = False) -> list[float]:
    """Per-step losses of one run."""
    torch.manual_seed(init_seed)
    model = load_model(f"preset:{preset}", dtype, attn)
    if checkpointing:
        model.gradient_checkpointing_enable()
        model.config.use_cache = False
    if lora:  # the GPU scenarios' LoRA: rank 16 on the attention projections (PEFT keeps adapters in float32)
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, task_type="CAUSAL_LM",
                                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
        if checkpointing:
            model.enable_input_require_grads()
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    if optimizer == "adamw-8bit":
        import bitsandbytes as bnb

        opt = bnb.optim.AdamW8bit(params, lr=lr, betas=(0.9, beta2), eps=eps, weight_decay=0.0)
    else:
        opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, beta2), eps=eps, weight_decay=0.0, fused=True)
    order = np.random.default_rng(order_seed).permutation(steps) if order_seed else np.arange(steps)
    rows = np.random.default_rng(row_seed) if row_seed else None
    losses = []
    for step in range(steps):
        batch = data[order[step] * BATCH:(order[step] + 1) * BATCH]
        if rows is not None:
            batch = batch[torch.from_numpy(rows.permutation(BATCH))]
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def learn(args) -> None:
    print(f"| corpus | floor (nats) | loss at steps 1, 5, 10, 15, 20, 25, 30 ({args.preset}, lr {args.lr:g}) |")
    print("|---|---|---|")
    for kind, states, branching in (("uniform", 256, 0), ("markov", 256, 2), ("markov", 64, 2), ("markov", 32, 2),
                                    ("markov", 32, 4), ("markov", 16, 2)):
        data = corpus(kind, states, branching, args.steps)
        losses = train(args.preset, args.dtype, args.lr, data, args.steps)
        floor = math.log(states if kind == "uniform" else branching)
        name = "uniform over 256 ids" if kind == "uniform" else f"Markov {states} states, k={branching}"
        shown = " ".join(f"{losses[s - 1]:.2f}" for s in (1, 5, 10, 15, 20, 25, 30) if s <= len(losses))
        print(f"| {name} | {floor:.3f} | {shown} |", flush=True)


BAND_VARIANTS = {
    "rows permuted, seed 1 (band)": {"row_seed": 1}, "rows permuted, seed 2 (band)": {"row_seed": 2},
    "rows permuted, seed 3 (band)": {"row_seed": 3}, "init seed 43": {"init_seed": 43},
    "data order shuffled": {"order_seed": 1}, "eager attention (reorder)": {"attn": "eager"},
    "gradient checkpointing (reorder)": {"checkpointing": True}, "AdamW β2 0.99": {"beta2": 0.99},
    "AdamW ε 1e-6": {"eps": 1e-6}, "learning rate ×1.05": {"lr_scale": 1.05},
    "8-bit AdamW (bitsandbytes)": {"optimizer": "adamw-8bit"},
}


def band(args) -> None:
    data = corpus("markov", 32, 2, args.steps)
    base = np.array(train(args.preset, args.dtype, args.lr, data, args.steps, lora=args.lora))
    print(f"{args.preset}{' LoRA' if args.lora else ''} {args.dtype} lr {args.lr:g}, {args.steps} steps: loss "
          f"{base[0]:.3f} → {base[-1]:.3f}")
    print("| run | max rel. diff | final rel. diff |\n|---|---|---|")
    for name, change in BAND_VARIANTS.items():
        change = dict(change)
        lr = args.lr * change.pop("lr_scale", 1.0)
        try:
            other = np.array(train(args.preset, args.dtype, lr, data, args.steps, lora=args.lora, **change))
        except (ImportError, RuntimeError) as exc:  # bitsandbytes absent or without this device
            print(f"| {name} | not run: {exc} | |")
            continue
        relative = (other - base) / np.abs(base)
        print(f"| {name} | {np.abs(relative).max():.2e} | {relative[-1]:+.2e} |", flush=True)


def throughput(args) -> None:
    """Steps on the corpora's batches (same shapes, only the ids differ) in rotation, one step each in turn, with
    one model: the training thread's CPU time per step (time.thread_time: what other processes on a shared host
    take is not counted, as wall time would be), medians compared. Uniform over 32 ids is the control: the ids
    the Markov corpus uses, drawn without its structure."""
    torch.manual_seed(0)
    model = load_model(f"preset:{args.preset}", args.dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, fused=True)
    batches = {"markov (32 ids)": corpus("markov", 32, 2, 4), "uniform (256 ids)": corpus("uniform", 256, 2, 4),
               "uniform (32 ids)": corpus("uniform", 32, 2, 4)}
    kinds = list(batches)
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    for turn in range(args.blocks * 4):
        for kind in kinds[turn % 3:] + kinds[:turn % 3]:
            batch = batches[kind][(turn % 4) * BATCH:(turn % 4 + 1) * BATCH]
            start = time.thread_time()
            model(input_ids=batch, labels=batch).loss.backward()
            opt.step()
            opt.zero_grad()
            times[kind].append(time.thread_time() - start)
    reference = statistics.median(times["uniform (256 ids)"])
    print(f"{args.preset} {args.dtype}, {len(times[kinds[0]])} steps each, rotated step by step: median step CPU time "
          + ", ".join(f"{kind} {statistics.median(v) * 1e3:.2f} ms ({statistics.median(v) / reference:.4f})"
                      for kind, v in times.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", choices=["learn", "band", "throughput"])
    parser.add_argument("--preset", default="llama-tiny")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--lora", action="store_true", help="band: LoRA r=16 on q/k/v/o instead of full fine-tuning")
    parser.add_argument("--blocks", type=int, default=40, help="throughput: 4 × this many steps per corpus")
    args = parser.parse_args()
    torch.set_num_threads(1)  # one thread: the same reduction order every run, and less noise on a shared host
    {"learn": learn, "band": band, "throughput": throughput}[args.study](args)


if __name__ == "__main__":
    main()
