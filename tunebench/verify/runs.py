"""What `benchmark.py verify` runs: the scanner and torch's MemTracker on the same step of a preset, plus the scan's
cost, from typed VerifyOptions (the command line reads them in tunebench.cli.verify).

Run 1 puts the scanner's memory scan and MemTracker on the same optimizer step of one run (in a process of its own)
and gives the difference per category. Run 2 (no MemTracker, which slows its step ~70×) times every step: how much
slower the memory-scanned step is than the median unscanned step, and how far the scanner's reported (phase-timed)
step is from that median.
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass

from tunebench.experiment.quantization import Quantization

logger = logging.getLogger(__name__)

# The quantized bases verify can build, named as the framework configs that set them.
QUANTIZED_BASES = {
    "none": Quantization(), "qlora": Quantization("bnb-4bit", "nf4", True, "bfloat16"),
    "qlora-fp4": Quantization("bnb-4bit", "fp4", False, "bfloat16"), "lora-int8": Quantization("bnb-8bit"),
}


@dataclass(frozen=True)
class VerifyOptions:
    """One verification: the model and what trains on it, the step's shape, the scanned step, where it runs."""

    model: str  # a preset or a local folder
    cuda: bool  # on CUDA device 0, else the CPU
    batch: int
    seq: int
    peft: str = "none"  # none | lora
    gradient_checkpointing: bool = False
    quantization: str = "none"  # a name of QUANTIZED_BASES
    grad_accum: int = 1
    steps: int = 16  # of the timing run
    scan_step: int = 4  # the optimizer step scanned and tracked


def _trainer(model, options: VerifyOptions, callbacks, steps: int, batch: int, seq: int, grad_accum: int):
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
    checkpointing = {names["gradient_checkpointing"]: options.gradient_checkpointing,
                     names["gradient_checkpointing_kwargs"]: {"use_reentrant": False}}
    training = TrainingArguments(
        output_dir="/tmp/tunebench-verify", max_steps=steps, per_device_train_batch_size=batch,
        gradient_accumulation_steps=grad_accum, bf16=options.cuda, use_cpu=not options.cuda, optim="adamw_torch_fused",
        **checkpointing,
        report_to=[], save_strategy="no", logging_strategy="no", logging_nan_inf_filter=False, disable_tqdm=True,
        dataloader_num_workers=0, accelerator_config={"non_blocking": True},
    )
    from transformers.trainer_callback import PrinterCallback

    trainer = Trainer(model=model, args=training, train_dataset=rows, callbacks=callbacks)
    trainer.remove_callback(PrinterCallback)  # its dict of train metrics is not verify's output
    return trainer


def _model(options: VerifyOptions):
    from peft import LoraConfig, TaskType, get_peft_model

    from tunebench.experiment.models import load_model

    quantization = QUANTIZED_BASES[options.quantization]
    model = load_model(options.model, "bfloat16" if options.cuda else "float32",
                       init_device="cuda:0" if options.cuda else "cpu", quantization=quantization)
    if options.peft == "lora":
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


def _memory_run(options: VerifyOptions, shape: dict) -> tuple[list[dict], int | None, int | None]:
    """Run 1: the scanner and MemTracker on one step, one peak instant for both (the scanner first, so it arms
    before MemTracker enters). Only plain numbers leave this function, so the run can be freed after it."""
    from tunebench.verify.output import quiet_libraries

    quiet_libraries()  # first: a spawned process (the parent's logging levels are not inherited); scanner imports peft
    import torch

    from scanner import Scanner
    from tunebench.verify.memtracker_step import MemTrackerStep, compare

    scanner = Scanner(steps=options.scan_step, time_steps="off", output=None, log_to_trainer=False)
    tracker = MemTrackerStep(options.scan_step, split_by_holder=options.cuda)
    model = _model(options)
    quant_state = _quant_state_reference(model, options.cuda) if options.quantization != "none" else 0
    _trainer(model, options, [scanner, tracker], **{**shape, "steps": options.scan_step}).train()
    # MemTracker sees only tensors it registers or sees made: a quantized weight's state was made before it.
    peak = dict(tracker.peak or {})
    peak["Parameter"] = peak.get("Parameter", 0) + quant_state
    peak["Total"] = peak.get("Total", 0) + quant_state
    categories = compare(scanner.flat_metrics(), peak, options.cuda, tracker.split)
    if quant_state:
        measured = scanner.flat_metrics().get("scan_mem_quant_state")
        categories.append({"category": "quant_state", "scanner_bytes": measured, "memtracker_bytes": quant_state,
                           "difference": (measured - quant_state) / quant_state if measured is not None else None})
    max_allocated = torch.cuda.max_memory_allocated() if options.cuda else None
    return categories, max_allocated, (tracker.peak or {}).get("Total")


def verify(options: VerifyOptions) -> dict:
    """Run 1 (the scanner and MemTracker on one step, in a process of its own) and run 2 (every step timed): the
    result verify prints and writes."""
    import torch

    from scanner import Scanner
    from tunebench.experiment.steady import SteadyPolicy
    from tunebench.experiment.step_timer import StepTimer

    shape = dict(steps=options.steps, batch=options.batch, seq=options.seq, grad_accum=options.grad_accum)
    # Run 1 in a process of its own: when it ends, its model, optimizer state and Trainer are gone with it, so a
    # model over half the GPU can be verified (freed in-process, a 22B model still held 45 GB: something of the
    # Trainer keeps it). Spawned, never forked: the parent may hold CUDA.
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        categories, max_allocated, memtracker_total = pool.submit(_memory_run, options, shape).result()
    # Run 2: the cost of scanning, from every step's time (the step timer of the harness).
    timed = Scanner(steps=options.scan_step, output=None, log_to_trainer=False)
    device = torch.device("cuda:0" if options.cuda else "cpu")
    timer = StepTimer(device, SteadyPolicy(warmup_steps=options.scan_step + 1))
    _trainer(_model(options), options, [timed, timer], **shape).train()
    seconds = [s.seconds for s in timer.finish()]
    unscanned = seconds[options.scan_step + 1:]  # after the scan and the step that absorbs its end
    median = statistics.median(unscanned)
    flat = timed.flat_metrics()
    return {
        "model": options.model, "peft": options.peft, "gradient_checkpointing": options.gradient_checkpointing,
        "quantization": options.quantization,
        "device": torch.cuda.get_device_name(0) if options.cuda else "cpu", "torch": torch.__version__, **shape,
        "scan_step": options.scan_step, "categories": categories, "max_memory_allocated": max_allocated,
        "memtracker_total": memtracker_total,
        "memory_step_overhead": seconds[options.scan_step - 1] / median - 1,
        "reported_step_vs_median": flat["scan_time_step"] / median - 1 if flat.get("scan_time_step") else None,
        # The same step by the step timer's clock: an independent check of the scanner's step time.
        "reported_step": flat.get("scan_time_step_chosen"), "reported_step_seconds": flat.get("scan_time_step"),
        "median_unscanned_step_seconds": median, "step_seconds": seconds,
    }
