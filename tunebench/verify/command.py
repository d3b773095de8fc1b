"""`benchmark.py verify`: the scanner and torch's MemTracker on the same step of a preset, plus the scan's cost.

  python benchmark.py verify [--model preset:llama-3.2-1b] [--peft lora] [--gradient_checkpointing]
                             [--batch 8] [--seq 1024] [--grad_accum 1] [--steps 16] [--out verify.json]

Run 1 puts the scanner's memory scan and MemTracker on the same optimizer step of one run and prints the
difference per category. Run 2 (no MemTracker, which slows its step ~70×) times every step and reports how much
slower the memory-scanned step is than the median unscanned step, and how far the scanner's reported (phase-
timed) step is from that median. Exit 0 when every category is within --tolerance, 1 otherwise, 2 on bad input.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import math
import statistics
import sys
from pathlib import Path

from tunebench.experiment.quantization import Quantization

logger = logging.getLogger(__name__)

# The quantized bases verify can build, named as the framework configs that set them.
QUANTIZED_BASES = {
    "none": Quantization(), "qlora": Quantization("bnb-4bit", "nf4", True, "bfloat16"),
    "qlora-fp4": Quantization("bnb-4bit", "fp4", False, "bfloat16"), "lora-int8": Quantization("bnb-8bit"),
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="benchmark.py verify", description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None, help="preset or local dir (default: llama-3.2-1b on GPU, llama-tiny on CPU)")
    p.add_argument("--peft", choices=["none", "lora"], default="none")
    p.add_argument("--gradient_checkpointing", action="store_true")
    p.add_argument("--quantization", choices=sorted(QUANTIZED_BASES), default="none",
                   help="a bitsandbytes-quantized base (with --peft lora), as the framework configs of that name")
    p.add_argument("--batch", type=int, default=None, help="micro-batch (default 8 on GPU, 2 on CPU)")
    p.add_argument("--seq", type=int, default=None, help="sequence length (default 1024 on GPU, 64 on CPU)")
    p.add_argument("--grad_accum", type=int, default=1)
    p.add_argument("--steps", type=int, default=16, help="steps of the timing run (scan on step 4)")
    p.add_argument("--scan_step", type=int, default=4)
    p.add_argument("--tolerance", type=float, default=0.03, help="largest accepted relative difference")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--out", default=None, help="also write the full result as JSON here")
    return p


def _trainer(model, args, callbacks, steps: int, batch: int, seq: int, grad_accum: int):
    import torch
    from transformers import Trainer, TrainingArguments

    rows = []
    generator = torch.Generator().manual_seed(0)
    for _ in range(steps * batch * grad_accum):
        ids = torch.randint(3, model.config.vocab_size, (seq,), generator=generator)
        rows.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()})
    from tunebench.experiment.entry_parser import checkpointing_renames

    # Under the name this transformers reads (the old one warns on newer versions).
    names = {old: checkpointing_renames().get(old, old) for old in ("gradient_checkpointing",
                                                                     "gradient_checkpointing_kwargs")}
    checkpointing = {names["gradient_checkpointing"]: args.gradient_checkpointing,
                     names["gradient_checkpointing_kwargs"]: {"use_reentrant": False}}
    training = TrainingArguments(
        output_dir="/tmp/tunebench-verify", max_steps=steps, per_device_train_batch_size=batch,
        gradient_accumulation_steps=grad_accum, bf16=args.cuda, use_cpu=not args.cuda, optim="adamw_torch_fused",
        **checkpointing,
        report_to=[], save_strategy="no", logging_strategy="no", logging_nan_inf_filter=False, disable_tqdm=True,
        dataloader_num_workers=0, accelerator_config={"non_blocking": True},
    )
    return Trainer(model=model, args=training, train_dataset=rows, callbacks=callbacks)


def _model(args):
    from peft import LoraConfig, TaskType, get_peft_model

    from tunebench.experiment.models import load_model

    quantization = QUANTIZED_BASES[args.quantization]
    model = load_model(args.model, "bfloat16" if args.cuda else "float32",
                       init_device="cuda:0" if args.cuda else "cpu", quantization=quantization)
    if args.peft == "lora":
        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, task_type=TaskType.CAUSAL_LM,
                                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
    if quantization.enabled:
        from tunebench.experiment.quantization import adapters_in_bfloat16

        adapters_in_bfloat16(model)  # as TRL's SFTTrainer keeps them on a quantized base
    return model


def _quant_state_reference(model, cuda: bool) -> int:
    """The quantization state's bytes, from the allocator on CUDA: what is allocated once the model is built
    (nothing else is yet) less every parameter and buffer storage; an independent check of the scanner's
    enumeration (scanner.memory.quantization_state_tensors). On CPU, that enumeration itself."""
    import torch

    from scanner.memory import quantization_state_tensors, unique_storage_bytes

    if not cuda:
        return unique_storage_bytes(quantization_state_tensors(model), torch.device("cpu"))[0]
    device = torch.device("cuda:0")
    torch.cuda.synchronize()
    named, _ = unique_storage_bytes([*model.parameters(), *model.buffers()], device)
    return torch.cuda.memory_allocated(device) - named


def _memory_run(args, shape: dict) -> tuple[list[dict], int | None, int | None]:
    """Run 1: the scanner and MemTracker on one step, one peak instant for both (the scanner first, so it arms
    before MemTracker enters). Only plain numbers leave this function, so the run can be freed after it."""
    import torch

    from scanner import Scanner
    from tunebench.verify.memtracker_step import MemTrackerStep, compare

    scanner = Scanner(steps=args.scan_step, time_steps="off", output=None, log_to_trainer=False)
    tracker = MemTrackerStep(args.scan_step, split_by_holder=args.cuda)
    model = _model(args)
    quant_state = _quant_state_reference(model, args.cuda) if args.quantization != "none" else 0
    _trainer(model, args, [scanner, tracker], **{**shape, "steps": args.scan_step}).train()
    # MemTracker sees only tensors it registers or sees made: a quantized weight's state was made before it.
    peak = dict(tracker.peak or {})
    peak["Parameter"] = peak.get("Parameter", 0) + quant_state
    peak["Total"] = peak.get("Total", 0) + quant_state
    categories = compare(scanner.flat_metrics(), peak, args.cuda, tracker.split)
    if quant_state:
        measured = scanner.flat_metrics().get("scan_mem_quant_state")
        categories.append({"category": "quant_state", "scanner_bytes": measured, "memtracker_bytes": quant_state,
                           "difference": (measured - quant_state) / quant_state if measured is not None else None})
    max_allocated = torch.cuda.max_memory_allocated() if args.cuda else None
    return categories, max_allocated, (tracker.peak or {}).get("Total")


def verify(args) -> dict:
    import torch

    from scanner import Scanner
    from tunebench.experiment.steady import SteadyPolicy
    from tunebench.experiment.step_timer import StepTimer

    shape = dict(steps=args.steps, batch=args.batch, seq=args.seq, grad_accum=args.grad_accum)
    # Run 1 in a process of its own: when it ends, its model, optimizer state and Trainer are gone with it, so a
    # model over half the GPU can be verified (freed in-process, a 22B model still held 45 GB: something of the
    # Trainer keeps it). Spawned, never forked: the parent may hold CUDA.
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        categories, max_allocated, memtracker_total = pool.submit(_memory_run, args, shape).result()
    # Run 2: the cost of scanning, from every step's time (the step timer of the harness).
    timed = Scanner(steps=args.scan_step, output=None, log_to_trainer=False)
    device = torch.device("cuda:0" if args.cuda else "cpu")
    timer = StepTimer(device, SteadyPolicy(warmup_steps=args.scan_step + 1))
    _trainer(_model(args), args, [timed, timer], **shape).train()
    seconds = [s.seconds for s in timer.finish()]
    unscanned = seconds[args.scan_step + 1:]  # after the scan and the step that absorbs its end
    median = statistics.median(unscanned)
    flat = timed.flat_metrics()
    return {
        "model": args.model, "peft": args.peft, "gradient_checkpointing": args.gradient_checkpointing,
        "quantization": args.quantization,
        "device": torch.cuda.get_device_name(0) if args.cuda else "cpu", "torch": torch.__version__, **shape,
        "scan_step": args.scan_step, "categories": categories, "max_memory_allocated": max_allocated,
        "memtracker_total": memtracker_total,
        "memory_step_overhead": seconds[args.scan_step - 1] / median - 1,
        "reported_step_vs_median": flat["scan_time_step"] / median - 1 if flat.get("scan_time_step") else None,
        # The same step by the step timer's clock: an independent check of the scanner's step time.
        "reported_step": flat.get("scan_time_step_chosen"), "reported_step_seconds": flat.get("scan_time_step"),
        "median_unscanned_step_seconds": median, "step_seconds": seconds,
    }


def input_problem(args) -> str | None:
    """The first bad option, as one line naming it and the fix; None when every option is usable."""
    from tunebench.experiment.models import resolve_model_source

    if not (0 < args.tolerance < math.inf):
        return f"--tolerance {args.tolerance}: must be a fraction > 0 (fix: e.g. --tolerance 0.03)"
    for option in ("batch", "seq", "grad_accum", "steps"):
        value = getattr(args, option)
        if value is not None and value < 1:
            return f"--{option} {value}: must be >= 1"
    if args.scan_step < 2 or args.steps < args.scan_step + 3:
        return "needs --scan_step >= 2 and --steps >= scan_step + 3 (fix: e.g. --steps 16)"
    try:
        resolve_model_source(args.model)
    except ValueError as exc:
        return f"--model: {exc} (fix: a preset such as preset:llama-tiny, or a local folder with config.json)"
    if args.quantization != "none" and args.peft != "lora":
        return f"--quantization {args.quantization}: a quantized base trains LoRA adapters only (fix: add --peft lora)"
    if args.quantization != "none" and importlib.util.find_spec("bitsandbytes") is None:
        return f"--quantization {args.quantization}: bitsandbytes is not installed (fix: pip install 'tunebench[quant]')"
    if not args.model.startswith("preset:") and not Path(args.model).is_dir():
        return f"--model {args.model!r}: verify builds models offline from a preset or a local folder (fix: one of those)"
    return None


def main(argv: list[str] | None = None) -> int:
    import torch

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    args.cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if args.device == "cuda" and not torch.cuda.is_available():
        print("benchmark.py verify: --device cuda but no CUDA GPU is visible (fix: --device cpu)", file=sys.stderr)
        return 2
    args.model = args.model or ("preset:llama-3.2-1b" if args.cuda else "preset:llama-tiny")
    problem = input_problem(args)
    if problem:
        print(f"benchmark.py verify: {problem}", file=sys.stderr)
        return 2
    args.batch = args.batch or (8 if args.cuda else 2)
    args.seq = args.seq or (1024 if args.cuda else 64)
    logging.basicConfig(level="WARNING")
    try:
        result = verify(args)
    except torch.OutOfMemoryError as exc:
        print(f"benchmark.py verify: out of memory with {args.model} (batch {args.batch}, sequence {args.seq}): "
              f"{str(exc).splitlines()[0][:200]} (fix: a smaller --batch or --seq, --gradient_checkpointing, or "
              "a GPU with more memory)", file=sys.stderr)
        return 1
    print(f"scanner vs MemTracker, step {args.scan_step} of {args.model} ({result['device']}):")
    for row in result["categories"]:
        diff = "n/a" if row["difference"] is None else f"{100 * row['difference']:+.2f} %"
        print(f"  {row['category']:<12} {row['scanner_bytes']:>16,} {row['memtracker_bytes']:>16,}  {diff}")
    print(f"memory-scanned step vs median unscanned step: {100 * result['memory_step_overhead']:+.2f} %")
    if result["reported_step_vs_median"] is not None:
        print(f"reported (phase-timed) step vs median step:   {100 * result['reported_step_vs_median']:+.2f} %")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
    bad = [r for r in result["categories"] if r["difference"] is None or abs(r["difference"]) > args.tolerance]
    return 1 if bad else 0
