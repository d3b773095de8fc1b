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
import statistics
import sys
from pathlib import Path

from tunebench.bounds import Range
from tunebench.command_line import Parser, option_problems
from tunebench.experiment.quantization import Quantization

logger = logging.getLogger(__name__)

# The quantized bases verify can build, named as the framework configs that set them.
QUANTIZED_BASES = {
    "none": Quantization(), "qlora": Quantization("bnb-4bit", "nf4", True, "bfloat16"),
    "qlora-fp4": Quantization("bnb-4bit", "fp4", False, "bfloat16"), "lora-int8": Quantization("bnb-8bit"),
}


# Every numeric option's range (tunebench.command_line): NaN, infinities and absurd values are exit 2.
VERIFY_RANGES = {"--batch": Range(1, 4096), "--seq": Range(1, 2**20), "--grad_accum": Range(1, 1024),
                 "--steps": Range(5, 10_000), "--scan_step": Range(2, 1000), "--tolerance": Range(0, 1, low_open=True)}
# The synthetic rows are built in memory before training (steps × batch × grad_accum rows of seq tokens).
MAX_TOKENS = 2**27


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="benchmark.py verify", description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None, help="preset or local dir (default: llama-3.2-1b on GPU, llama-tiny on CPU)")
    p.add_argument("--peft", choices=["none", "lora"], default="none", help="LoRA adapters on the attention projections")
    p.add_argument("--gradient_checkpointing", action="store_true", help="checkpoint every decoder layer")
    p.add_argument("--quantization", choices=sorted(QUANTIZED_BASES), default="none",
                   help="a bitsandbytes-quantized base (with --peft lora), as the framework configs of that name")
    p.add_argument("--batch", type=int, default=None, help="micro-batch (default 8 on GPU, 2 on CPU)")
    p.add_argument("--seq", type=int, default=None, help="sequence length (default 1024 on GPU, 64 on CPU)")
    p.add_argument("--grad_accum", type=int, default=1, help="micro-batches per optimizer step")
    p.add_argument("--steps", type=int, default=16, help="steps of the timing run (scan on step 4)")
    p.add_argument("--scan_step", type=int, default=4, help="the optimizer step scanned and tracked")
    p.add_argument("--tolerance", type=float, default=0.03, help="largest accepted relative difference per category "
                   "(0.03: ±3 %%)")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto", help="`auto`: cuda when one is visible")
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
    from transformers.trainer_callback import PrinterCallback

    trainer = Trainer(model=model, args=training, train_dataset=rows, callbacks=callbacks)
    trainer.remove_callback(PrinterCallback)  # its dict of train metrics is not verify's output
    return trainer


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
    from tunebench.verify.output import quiet_libraries

    quiet_libraries()  # first: a spawned process (the parent's logging levels are not inherited); scanner imports peft
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
    from tunebench.experiment.model_config import config_problem
    from tunebench.experiment.models import resolve_model_source

    ranged = option_problems(args, VERIFY_RANGES)
    if ranged:
        return f"{ranged[0].key} {ranged[0].message.removeprefix('out of range: ')}: out of range (fix: " \
               f"{ranged[0].fix})"
    if args.steps < args.scan_step + 3:
        return "needs --steps >= --scan_step + 3 (fix: e.g. --steps 16)"
    tokens = args.steps * (args.batch or 8) * args.grad_accum * (args.seq or 1024)
    if tokens > MAX_TOKENS:
        return f"--steps × --batch × --grad_accum × --seq = {tokens:,} tokens, more than the {MAX_TOKENS:,} verify " \
               "builds in memory (fix: smaller values)"
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
    found = None if args.model.startswith("preset:") else config_problem(args.model)
    if found:
        return f"--model: {found[0]} (fix: {found[1]})"
    return None


def main(argv: list[str] | None = None) -> int:
    from concurrent.futures.process import BrokenProcessPool

    import torch

    from tunebench.fileio import write_atomic
    from tunebench.verify.output import quiet_libraries, report

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
    quiet_libraries()
    try:
        result = verify(args)
    except torch.OutOfMemoryError as exc:
        print(f"benchmark.py verify: out of memory with {args.model} (batch {args.batch}, sequence {args.seq}): "
              f"{str(exc).splitlines()[0][:200]} (fix: a smaller --batch or --seq, --gradient_checkpointing, or "
              "a GPU with more memory)", file=sys.stderr)
        return 1
    except BrokenProcessPool:
        # The memory run's process died without a Python error: the kernel's OOM killer (host memory) or a
        # signal. Its own stderr above says more when there is more to say.
        print(f"benchmark.py verify: the memory run of {args.model} (batch {args.batch}, sequence {args.seq}) died "
              "without an error, most often out of host memory (fix: a smaller model, --batch or --seq, or a "
              "host with more memory)", file=sys.stderr)
        return 1
    text, passed = report(result, args.tolerance)
    print(text)
    if args.out:
        write_atomic(args.out, json.dumps(result, indent=2))
    return 0 if passed else 1
