"""Training entry of one experiment (`python -m tunebench.experiment.train --key value ...`): TRL SFTTrainer, results.json."""

from __future__ import annotations

import json
import logging
import os
import resource
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from tunebench.experiment.arguments import StrictArgumentParser
from tunebench.fileio import write_atomic

logger = logging.getLogger(__name__)

MEMORY_LOGGING_CHOICES = {"scanner", "huggingface", "nvidia", "all", "none"}


def parse_memory_logging(value: str) -> set[str]:
    modes = {m.strip() for m in value.split(",") if m.strip()}
    unknown = modes - MEMORY_LOGGING_CHOICES
    if unknown:
        raise ValueError(f"memory_logging: unknown mode(s) {sorted(unknown)}; use {sorted(MEMORY_LOGGING_CHOICES)}")
    if "all" in modes:
        return {"scanner", "huggingface", "nvidia"}
    return modes - {"none"}


def write_json_atomic(path: str | Path, payload: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(payload, indent=2, sort_keys=True, default=str))


class TokenCounter:
    """Counts the tokens each training forward receives: padded, non-padding, and Σ length² (for attention
    FLOPs). Accumulates on the device, so no host sync happens until `totals()` at the end of training."""

    def __init__(self):
        self._sums = None  # tensor [padded, nonpad, sum_sq, sequences]
        self._handle = None

    def attach(self, module) -> None:
        self._handle = module.register_forward_pre_hook(self._hook, with_kwargs=True)

    def detach(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def _hook(self, module, args, kwargs):
        import torch

        if not torch.is_grad_enabled():
            return
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        if input_ids is None:
            return
        mask, positions = kwargs.get("attention_mask"), kwargs.get("position_ids")
        if mask is not None and mask.dim() == 2:
            lengths = mask.sum(-1)
            nonpad, sum_sq, sequences = lengths.sum(), (lengths.long() ** 2).sum(), lengths.new_tensor(lengths.numel())
        elif positions is not None:
            # Packed rows restart positions at 0 for every sequence: Σ over a sequence of (2p + 1) = len², so
            # Σ length² needs no boundary search (which would force a device sync).
            flat = positions.reshape(-1).long()
            nonpad, sum_sq, sequences = flat.new_tensor(flat.numel()), (2 * flat + 1).sum(), (flat == 0).sum()
        else:
            nonpad = input_ids.new_tensor(input_ids.numel())
            sum_sq = input_ids.new_tensor(input_ids.shape[0] * input_ids.shape[-1] ** 2)
            sequences = input_ids.new_tensor(input_ids.shape[0])
        step = torch.stack([input_ids.new_tensor(input_ids.numel()), nonpad.long(), sum_sq.long(), sequences.long()])
        self._sums = step if self._sums is None else self._sums + step

    def totals(self) -> dict[str, int]:
        """Summed over all ranks when torch.distributed is up (tokens are global, never a per-rank mean)."""
        import torch
        import torch.distributed as dist

        sums = self._sums if self._sums is not None else torch.zeros(4, dtype=torch.long)
        if dist.is_available() and dist.is_initialized():
            sums = sums.clone()
            dist.all_reduce(sums)
        padded, nonpad, sum_sq, sequences = (int(x) for x in sums.tolist())
        return {"padded_tokens": padded, "nonpad_tokens": nonpad, "sum_squared_lengths": sum_sq, "sequences": sequences}


def build_peft_config(peft_args):
    if peft_args.peft_method == "none":
        return None
    from peft import LoraConfig, PromptTuningConfig, TaskType

    if peft_args.peft_method == "lora":
        return LoraConfig(r=peft_args.r, lora_alpha=peft_args.lora_alpha, lora_dropout=peft_args.lora_dropout,
                          target_modules=list(peft_args.target_modules), task_type=TaskType.CAUSAL_LM)
    return PromptTuningConfig(num_virtual_tokens=peft_args.num_virtual_tokens, task_type=TaskType.CAUSAL_LM)


def hf_memory_columns(metrics: dict[str, Any]) -> dict[str, int | None]:
    """The reference tool's columns from HF's TrainerMemoryTracker (skip_memory_metrics=False), in bytes:

    allocated at end of training = before_init + init_alloc_delta + train_alloc_delta
    peak during training         = that + train_peaked_delta   (HF's "peaked" is the peak above the end value)
    """
    keys = ("before_init_mem_gpu", "init_mem_gpu_alloc_delta", "train_mem_gpu_alloc_delta", "train_mem_gpu_peaked_delta")
    if not all(k in metrics for k in keys):
        return {"mem_torch_mem_alloc_in_bytes": None, "mem_peak_torch_mem_alloc_in_bytes": None}
    allocated = metrics[keys[0]] + metrics[keys[1]] + metrics[keys[2]]
    return {"mem_torch_mem_alloc_in_bytes": int(allocated),
            "mem_peak_torch_mem_alloc_in_bytes": int(allocated + metrics[keys[3]])}


def make_scanner(bench_args, results_dir: Path):
    """The scanner callback (issue B) when memory_logging includes it; each rank writes its own report."""
    from scanner import Scanner

    # The scanner suffixes `.rank<r>` itself when there are several ranks.
    return Scanner(steps=bench_args.scan_steps, output=["stdout", str(results_dir / "scan.json")])


def run(argv: list[str]) -> dict[str, Any]:
    import torch
    from accelerate import PartialState
    from trl import SFTTrainer

    from tunebench.experiment.data import prepare_dataset
    from tunebench.experiment.flops import mfu, training_flops
    from tunebench.experiment.models import build_tokenizer, load_model
    from tunebench.telemetry.environment import environment_columns

    model_args, data_args, peft_args, bench_args, sft_config = StrictArgumentParser().parse_argv(argv)
    memory_logging = parse_memory_logging(bench_args.memory_logging)
    sft_config.max_length = data_args.max_seq_len
    sft_config.skip_memory_metrics = "huggingface" not in memory_logging
    state = PartialState()
    results_dir = Path(bench_args.results_json).parent if bench_args.results_json else Path(sft_config.output_dir)

    tokenizer = build_tokenizer(model_args.model_name_or_path)
    with state.main_process_first():  # rank 0 builds the cache, the others then read it
        dataset = prepare_dataset(data_args, tokenizer, sft_config.dataset_text_field or "text", seed=sft_config.seed)
    model = load_model(model_args.model_name_or_path, model_args.torch_dtype, model_args.attn_implementation,
                       init_device=preset_init_device(model_args, sft_config, state))
    callbacks = [make_scanner(bench_args, results_dir)] if "scanner" in memory_logging else []
    trainer = SFTTrainer(model=model, args=sft_config, train_dataset=dataset, processing_class=tokenizer,
                         peft_config=build_peft_config(peft_args), callbacks=callbacks)
    counter = TokenCounter()
    counter.attach(trainer.model)
    train_metrics = trainer.train().metrics
    counter.detach()
    tokens = counter.totals()

    runtime = float(train_metrics["train_runtime"])
    world = state.num_processes
    device_name = torch.cuda.get_device_name(0) if torch.cuda.is_available() and not sft_config.use_cpu else None
    flops = training_flops(trainer.model, tokens["nonpad_tokens"], tokens["sum_squared_lengths"])
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    row: dict[str, Any] = {
        "status": "ok",
        "error_messages": "",
        "train_loss": train_metrics.get("train_loss"),
        "train_runtime": runtime,
        "train_samples_per_second": train_metrics.get("train_samples_per_second"),
        "train_steps_per_second": train_metrics.get("train_steps_per_second"),
        "train_tokens_per_second": tokens["padded_tokens"] / runtime,
        "train_nonpad_tokens_per_second": tokens["nonpad_tokens"] / runtime,
        "train_nonpad_tokens_per_second_per_device": tokens["nonpad_tokens"] / runtime / world,
        "padding_fraction": 1 - tokens["nonpad_tokens"] / tokens["padded_tokens"] if tokens["padded_tokens"] else None,
        "train_tokens": tokens["padded_tokens"],
        "train_nonpad_tokens": tokens["nonpad_tokens"],
        "train_model_flops": flops,
        "mfu": mfu(flops, runtime, world, device_name),
        "num_processes": world,
        "trainable_parameters": trainable,
        "total_parameters": sum(p.numel() for p in trainer.model.parameters()),
        "mem_peak_host_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        **hf_memory_columns(train_metrics),
        **environment_columns("cpu" if device_name is None else "cuda"),
    }
    if device_name:
        row["gpu_name"] = device_name
        row["mem_peak_torch_max_allocated_bytes"] = torch.cuda.max_memory_allocated()
        row["mem_peak_torch_max_reserved_bytes"] = torch.cuda.max_memory_reserved()
    row["distributed_type"] = str(trainer.accelerator.distributed_type).split(".")[-1]
    if callbacks:
        row.update(gather_scan_metrics(callbacks[0].flat_metrics()))
    return row if state.is_main_process else {}


def gather_scan_metrics(local: dict[str, Any]) -> dict[str, Any]:
    """Every rank's scan metrics, merged on all ranks (max / min / mean per category, summed throughput)."""
    import torch.distributed as dist

    from tunebench.experiment.rank_merge import merge_rank_metrics

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return local
    per_rank: list[dict[str, Any]] = [{} for _ in range(dist.get_world_size())]
    dist.all_gather_object(per_rank, local)
    return merge_rank_metrics(per_rank)


def preset_init_device(model_args, sft_config, state) -> str:
    """This rank's GPU for presets trained on CUDA, unless FSDP offloads to the host or the user said cpu."""
    import torch

    offload = "offload" in str(sft_config.fsdp) or bool((sft_config.fsdp_config or {}).get("cpu_offload"))
    if model_args.preset_init_device == "cpu" or sft_config.use_cpu or offload or not torch.cuda.is_available():
        return "cpu"
    return f"cuda:{state.local_process_index}"


def _error_class(exc: BaseException) -> str:
    import torch

    if isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower():
        return "oom"
    return "error"


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=os.environ.get("TUNEBENCH_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--"]:  # the separator a launcher may pass through (see launch.build_launch)
        argv = argv[1:]
    started = time.time()
    results_json = None
    if "--results_json" in argv:
        results_json = argv[argv.index("--results_json") + 1]
    try:
        row = run(argv)
    except BaseException as exc:  # record, then re-raise so the exit code tells the harness too
        rank = os.environ.get("RANK", "0")
        if results_json:
            write_json_atomic(Path(results_json).with_name(f"error_rank{rank}.json"), {
                "status": "timeout" if isinstance(exc, KeyboardInterrupt) else _error_class(exc),
                "error_messages": "".join(traceback.format_exception(exc))[-4000:],
                "rank": int(rank),
            })
        raise
    if row and results_json:
        row["entry_wall_seconds"] = time.time() - started
        write_json_atomic(results_json, row)
    _destroy_process_group()
    return 0


def _destroy_process_group() -> None:
    """Gloo/NCCL threads still alive at interpreter exit can abort the process ("terminate called...")."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
