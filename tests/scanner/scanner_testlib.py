"""Tiny random-weight models and a Trainer runner shared by the scanner tests (no hub downloads)."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

VOCAB = 256


def tiny_config(**kw) -> LlamaConfig:
    base = dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=VOCAB,
        max_position_embeddings=256,
        attn_implementation="sdpa",
    )
    base.update(kw)
    return LlamaConfig(**base)


def tiny_llama(dtype=torch.float32, **kw) -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(tiny_config(**kw)).to(dtype)


def lm_dataset(n: int = 64, seq: int = 32, pad_last: int = 0, with_mask: bool = True) -> list[dict]:
    """Random token rows; the last `pad_last` positions of every row are padding (mask 0, label -100)."""
    g = torch.Generator().manual_seed(1)
    rows = []
    for _ in range(n):
        ids = torch.randint(1, VOCAB, (seq,), generator=g)
        labels = ids.clone()
        row = {"input_ids": ids, "labels": labels}
        if with_mask:
            mask = torch.ones(seq, dtype=torch.long)
            if pad_last:
                mask[-pad_last:] = 0
                labels[-pad_last:] = -100
            row["attention_mask"] = mask
        rows.append(row)
    return rows


def train(model, scanner, dataset=None, trainer_cls=Trainer, max_steps: int = 3, **arg_kw):
    """Run a short CPU Trainer with `scanner`; returns the trainer."""
    kw = dict(
        output_dir=arg_kw.pop("output_dir", "/tmp/scanner-tests"),
        per_device_train_batch_size=2,
        max_steps=max_steps,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
        logging_strategy="no",
        optim="adamw_torch",
        dataloader_num_workers=0,
    )
    kw.update(arg_kw)
    trainer = trainer_cls(
        model=model,
        args=TrainingArguments(**kw),
        train_dataset=dataset if dataset is not None else lm_dataset(),
        callbacks=[scanner],
    )
    trainer.train()
    return trainer


def numel_bytes(params) -> int:
    """Analytic size: sum of numel x element size over unique parameters."""
    seen, total = set(), 0
    for p in params:
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel() * p.element_size()
    return total


def _is_scanner_hook(fn) -> bool:
    from scanner.phases import PhaseProbe

    return isinstance(getattr(fn, "__self__", None), PhaseProbe)


def no_hooks_left(model, optimizer) -> bool:
    """True when no hook installed by the scanner remains (other libraries' hooks are allowed)."""
    hook_dicts = []
    for m in model.modules():
        hook_dicts += [m._forward_hooks, m._forward_pre_hooks]
    for p in model.parameters():
        hook_dicts.append(getattr(p, "_post_accumulate_grad_hooks", None) or {})
    opt = optimizer
    while hasattr(opt, "optimizer"):
        opt = opt.optimizer
    hook_dicts += [opt._optimizer_step_pre_hooks, opt._optimizer_step_post_hooks]
    return not any(_is_scanner_hook(fn) for d in hook_dicts for fn in d.values())
