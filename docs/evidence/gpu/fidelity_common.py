"""What the GPU evidence drivers share: the two model cases, their Trainer run, per-step clocks, MemTracker,
comparisons.

scanner_fidelity.py, scanner_overhead.py and rank_memtracker.py import from here (never from each other).
"""

from __future__ import annotations

import gc
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments

from tunebench.verify.memtracker_step import CATEGORY_MAP as VERIFY_CATEGORY_MAP
from tunebench.verify.memtracker_step import MemTrackerStep as VerifyMemTrackerStep

CASES = {
    "a": dict(
        name="llama-3.2-1B shape, full FT, bf16, AdamW, seq 1024, micro-batch 8",
        model=dict(
            hidden_size=2048,
            num_hidden_layers=16,
            num_attention_heads=32,
            num_key_value_heads=8,
            intermediate_size=8192,
            vocab_size=128256,
            tie_word_embeddings=True,
        ),
        lora=False,
        gc=False,
        ga=1,
        seq=1024,
        mb=8,
    ),
    "b": dict(
        name="mistral-7B shape, LoRA r=16, gradient checkpointing, GA 4, seq 2048, micro-batch 2",
        model=dict(
            hidden_size=4096,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            intermediate_size=14336,
            vocab_size=32000,
            tie_word_embeddings=False,
        ),
        lora=True,
        gc=True,
        ga=4,
        seq=2048,
        mb=2,
    ),
}
TINY_MODEL = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=128,
    vocab_size=512,
)
# scanner report field -> MemTracker reference types: `benchmark.py verify`'s map, keyed without the CSV prefix
# (+ mem_other, compared with what MemTracker cannot see: compare_categories)
CATEGORY_MAP = {column.removeprefix("scan_"): refs for column, refs in VERIFY_CATEGORY_MAP.items()}


class StepTimer(TrainerCallback):
    """Per-step times from clock marks at every on_step_end (same window definition as the scanner)."""

    def __init__(self, cuda: bool):
        self.cuda, self.marks = cuda, []

    def _mark(self):
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def on_train_begin(self, args, state, control, **kw):
        self.marks = [self._mark()]
        self.host = [time.perf_counter()]  # host clock too: where outside the steps a run spends its time

    def on_step_end(self, args, state, control, **kw):
        self.marks.append(self._mark())
        self.host.append(time.perf_counter())

    def on_train_end(self, args, state, control, **kw):
        self.host_end = time.perf_counter()

    def step_times(self) -> list[float]:
        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) / 1e3 for a, b in zip(self.marks, self.marks[1:], strict=False)]
        return [b - a for a, b in zip(self.marks, self.marks[1:], strict=False)]


class MemTrackerStep(VerifyMemTrackerStep):
    """`benchmark.py verify`'s MemTracker step, plus the CUDA allocator's peak over that step and its wall time."""

    def __init__(self, step: int, cuda: bool):
        super().__init__(step)
        self.cuda = cuda
        self.max_allocated = self.seconds = None

    def _enter(self, model, optimizer):
        if self.cuda:  # the allocator peak of exactly the tracked step
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        super()._enter(model, optimizer)
        self.t0 = time.perf_counter()

    def on_step_end(self, args, state, control, **kw):
        leaving = state.global_step == self.step and self.tracker is not None
        super().on_step_end(args, state, control, **kw)
        if leaving:
            if self.cuda:
                torch.cuda.synchronize()
                self.max_allocated = torch.cuda.max_memory_allocated()
            self.seconds = time.perf_counter() - self.t0


def build_model(case: dict, tiny: bool, device: str):
    cfg = LlamaConfig(
        **(TINY_MODEL if tiny else case["model"]), max_position_embeddings=4096, attn_implementation="sdpa"
    )
    torch.manual_seed(0)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(old)
    if case["lora"]:
        import peft

        model = peft.get_peft_model(
            model,
            peft.LoraConfig(
                r=16,
                lora_alpha=32,
                task_type="CAUSAL_LM",
                target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
            ),
        )
    return model


def dataset(n: int, seq: int, vocab: int):
    g = torch.Generator().manual_seed(0)
    rows = []
    for _ in range(n):
        ids = torch.randint(0, vocab, (seq,), generator=g)
        rows.append({"input_ids": ids, "attention_mask": torch.ones(seq, dtype=torch.long), "labels": ids})
    return rows


def run(model, case, tiny, steps, callbacks, out_dir, trainer_ref: list | None = None):
    cuda = torch.cuda.is_available()
    seq, mb = (64, 2) if tiny else (case["seq"], case["mb"])
    args = TrainingArguments(
        output_dir=str(out_dir / "trainer"),
        max_steps=steps,
        per_device_train_batch_size=mb,
        gradient_accumulation_steps=case["ga"],
        bf16=cuda,
        use_cpu=not cuda,
        optim="adamw_torch",
        gradient_checkpointing=case["gc"],
        gradient_checkpointing_kwargs={"use_reentrant": False},
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    vocab = model.config.vocab_size
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=dataset(steps * mb * case["ga"], seq, vocab),
        callbacks=callbacks,
    )
    if trainer_ref is not None:
        trainer_ref[0] = trainer
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    trainer.train()
    if cuda:
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    del trainer
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return wall


def rel(a, b):
    if a is None or b is None:
        return None
    if b == 0:
        return 0.0 if a == 0 else None
    return abs(a - b) / abs(b)


def compare_categories(report: dict, peak: dict | None, max_allocated: int | None = None) -> dict:
    cmp = {}
    for field, refs in CATEGORY_MAP.items():
        ref = sum(peak.get(r, 0) for r in refs) if peak else None
        cmp[field] = {"scanner": report[field], "memtracker": ref, "rel_error": rel(report[field], ref)}
    other = other_vs_untracked(report, peak, max_allocated)
    if other is not None:
        cmp["mem_other"] = other
    return cmp


def other_vs_untracked(report: dict, peak: dict | None, max_allocated: int | None) -> dict | None:
    """The scanner's "other" vs what MemTracker cannot see: its shortfall from max_memory_allocated.

    MemTracker only tracks tensors created after it was entered; what else the allocator holds at its peak
    (cuBLAS workspaces, DDP buckets, buffers made earlier) is the difference."""
    if not (peak and max_allocated) or report.get("mem_other") is None:
        return None
    ref = max_allocated - peak.get("Total", 0)
    return {"scanner": report["mem_other"], "memtracker": ref, "rel_error": rel(report["mem_other"], ref)}
