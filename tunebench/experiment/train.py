"""Training entry of one experiment (`python -m tunebench.experiment.train --key value ...`): TRL SFTTrainer,
every step timed, the scanner on its steps; writes results.json (the row) and steps.json (per-step times)."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunebench.fileio import write_json
from tunebench.vocabulary import Status

logger = logging.getLogger(__name__)

STEPS_FILE = "steps.json"


def load_entry(argv: list[str]) -> tuple:
    """The entry's objects: from `--spec <folder>/spec.json` (the harness: values typed once, nothing parsed
    here), or from `--key value` arguments (by hand)."""
    from tunebench.experiment.entry_parser import build_entry, entry_parser
    from tunebench.experiment.spec import read_entry

    if argv[:1] == ["--spec"] and len(argv) == 2:
        return build_entry(read_entry(argv[1]))
    return entry_parser().parse_argv(argv)


@dataclass
class _Training:
    """One experiment's training, built: the trainer and what measures it."""

    sft_config: Any
    bench_args: Any
    state: Any  # accelerate's PartialState
    memory_logging: set[str]
    policy: Any  # experiment.steady.SteadyPolicy
    trackers: list
    quantization: Any
    counter: Any  # TokenCounter
    timer: Any  # StepTimer
    compile_watch: Any  # CompileWatch, or None without torch.compile
    trainer: Any
    on_cuda: bool
    device: Any  # torch.device
    floor: tuple  # the data's entropy floor (nats per token, or None) and why it is unknown
    scanned: frozenset  # memory-scanned steps and the step absorbing each scan's end (time to target skips them)
    fms: Any = None  # tunebench.experiment.fms.seam.FmsRun: fms-acceleration's plugins drive loading and augmenting


def run(entry: tuple, startup) -> tuple[dict[str, Any], list[dict]]:
    """Train one experiment; returns (row, per-step records) on rank 0 and ({}, []) elsewhere."""
    from tunebench.experiment import finite_loss
    from tunebench.experiment.throughput import steps_record

    training = _build(entry, startup)
    _freeze_what_lives_to_the_end()
    training.counter.attach(training.trainer.model)
    train_metrics = training.trainer.train().metrics
    training.counter.detach()
    if training.compile_watch is not None:  # a step that compiled is no steady step
        training.compile_watch.remove()
        training.timer.excluded.update(training.compile_watch.compiled_steps)
    startup.mark("train_begin", training.timer.train_begin_unix)
    step_times = training.timer.finish()
    token_steps = training.counter.per_step()
    losses = training.trainer.step_losses()
    row = _row(training, train_metrics, step_times, token_steps, losses, startup)
    row.update(_target_columns(training, step_times, token_steps, losses, row.get("steady_step_time_median")))
    row = finite_loss.guard(row, losses, len(step_times))
    policy, timer = training.policy, training.timer
    steady = set(range(1, len(step_times) + 1)) - set(range(1, policy.warmup_steps + 1)) - timer.excluded
    records = steps_record(step_times, token_steps, steady, losses)
    return (row, records) if training.state.is_main_process else ({}, [])


_frozen = False


def _freeze_what_lives_to_the_end() -> None:
    """Every object of the libraries and of the built model and trainer lives as long as the experiment: frozen out
    of the garbage collector (gc.freeze), whose full collections otherwise walk every one of them, a fork's
    inherited from the preload server included, and copy the pages they touch: the trainer's own gc.collect
    (accelerate's free_memory) was 0.25 s of a 1.3 s CPU experiment. Once a process; its exit unfreezes them, so
    that an interpreter that finalizes frees them as usual."""
    global _frozen
    if not _frozen:
        import atexit
        import gc

        gc.freeze()
        atexit.register(gc.unfreeze)
        _frozen = True


def _build(entry: tuple, startup) -> _Training:
    """The model, data, trainer and every tracker of the experiment, start-up phases marked."""
    import torch
    from accelerate import PartialState
    from transformers import set_seed

    from tunebench.experiment import components
    from tunebench.experiment.arguments import parse_memory_logging
    from tunebench.experiment.corpus import entropy_floor
    from tunebench.experiment.data import prepare_dataset
    from tunebench.experiment.entry_parser import quiet_renamed_checkpointing_warning
    from tunebench.experiment.models import build_tokenizer, load_model
    from tunebench.experiment.quantization import quantization_of
    from tunebench.experiment.tokens import TokenCounter
    from tunebench.experiment.trackers import make_trackers

    startup.mark("imports")
    quiet_renamed_checkpointing_warning()
    components.reconcile_matmul_precision()  # SFTConfig may have set TF32 through the new API alone
    model_args, data_args, peft_args, bench_args, sft_config = entry
    memory_logging = parse_memory_logging(bench_args.memory_logging)
    if components.scanner_off_for_compile(bench_args, bool(sft_config.torch_compile)):
        memory_logging.discard("scanner")
    policy = components.steady_policy(bench_args)
    windows = components.step_windows(bench_args, sft_config.max_steps, compiled=bool(sft_config.torch_compile))
    sft_config.max_length = data_args.max_seq_len
    sft_config.skip_memory_metrics = True  # unless a tracker asks for HF's memory metrics
    state = PartialState()
    results_dir = Path(bench_args.results_json).parent if bench_args.results_json else Path(sft_config.output_dir)
    trackers = make_trackers(memory_logging, windows, results_dir)
    for tracker in trackers:
        tracker.prepare(sft_config)

    tokenizer = build_tokenizer(model_args.model_name_or_path)
    with state.main_process_first():  # rank 0 builds the cache, the others then read it
        dataset = prepare_dataset(data_args, tokenizer, sft_config.dataset_text_field or "text", seed=sft_config.seed)
    startup.mark("data")
    floor = entropy_floor(data_args, tokenizer)
    # The Trainer seeds only after the model exists: a random-init model (a preset, a config-only folder) would
    # otherwise start from whatever the RNG held, and the same experiment would report a different loss each run.
    set_seed(sft_config.seed)
    quantization = quantization_of(model_args, sharded=bool(sft_config.fsdp))
    fms = fms_run(model_args, results_dir)
    # A quantized preset is loaded from a random checkpoint written once (experiment.quantization): the main process
    # writes it while the other ranks wait (transformers writes nothing from a rank other than 0), then they read it.
    with state.local_main_process_first() if quantization.enabled or fms else contextlib.nullcontext():
        init_device = components.preset_init_device(model_args, sft_config, state)
        sharded = bool(sft_config.fsdp) and state.num_processes > 1
        model = fms.load_model(model_args, init_device, sft_config.seed, sharded) if fms and fms.loads_model else \
            load_model(model_args.model_name_or_path, model_args.torch_dtype, model_args.attn_implementation,
                       init_device=init_device, quantization=quantization, seed=sft_config.seed)
    startup.mark("model")
    training = _Training(sft_config, bench_args, state, memory_logging, policy, trackers, quantization, TokenCounter(),
                         None, None, None, torch.cuda.is_available() and not sft_config.use_cpu, None, floor,
                         frozenset(range(windows.memory[0], windows.memory[1] + 2)) if windows.memory else frozenset(),
                         fms)
    _trainer(training, model, tokenizer, dataset, peft_args, windows)
    startup.mark("trainer")
    return training


def _trainer(training: _Training, model, tokenizer, dataset, peft_args, windows) -> None:
    """The step timer, the torch.compile watch and the SFTTrainer, with every tracker's callbacks."""
    import torch

    from tunebench.experiment import components
    from tunebench.experiment.compile_watch import CompileWatch
    from tunebench.experiment.step_timer import StepTimer
    from tunebench.experiment.trainer import BenchSFTTrainer

    sft_config, bench_args = training.sft_config, training.bench_args
    callbacks = [callback for tracker in training.trackers for callback in tracker.callbacks()]
    training.device = (torch.device(f"cuda:{training.state.local_process_index}") if training.on_cuda
                       else torch.device("cpu"))
    # After the scanner: host work a scan does at a step end then belongs to the scanned step.
    training.timer = StepTimer(training.device, training.policy, auto=bench_args.steady_state == "auto",
                               earliest_stop=windows.earliest_stop, token_counter=training.counter)
    training.timer.excluded.update(windows.excluded)
    callbacks.append(training.timer)
    training.compile_watch = CompileWatch().install() if sft_config.torch_compile else None
    if training.compile_watch is not None:
        callbacks.append(training.compile_watch)
    peft_config = components.build_peft_config(peft_args)
    if training.fms is not None:  # fms's augmentation: its GPTQ and bnb plugins add LoRA and hand back None
        model, peft_config = training.fms.augment(model, sft_config, peft_config)
    training.trainer = BenchSFTTrainer(model=model, args=sft_config, train_dataset=dataset, processing_class=tokenizer,
                                       peft_config=peft_config, callbacks=callbacks,
                                       sft_loss=bench_args.sft_loss, loss_band_seed=bench_args.loss_band_seed,
                                       loss_band_kind=bench_args.loss_band_kind)
    if training.fms is not None:
        training.fms.ready(model, training.trainer)
    components.keep_explicit_tf32(sft_config)  # the Trainer's accelerate may have turned TF32 on


def _target_columns(training: _Training, step_times, token_steps, losses: dict[int, float],
                    steady_median: float | None) -> dict[str, Any]:
    """The data's floor and the time to the target loss (tunebench.experiment.loss_target)."""
    from tunebench.experiment.loss_target import target_columns

    seconds = {timing.step: timing.seconds for timing in step_times}
    tokens = {timing.step: token_steps[i]["nonpad_tokens"] for i, timing in enumerate(step_times)
              if i < len(token_steps)}
    bench = training.bench_args
    return target_columns(losses, seconds, tokens, training.floor, bench.loss_target_fraction,
                          bench.loss_target_nats, set(training.scanned), steady_median)


def _row(training: _Training, train_metrics: dict, step_times, token_steps, losses: dict[int, float],
         startup) -> dict[str, Any]:
    """The experiment's row: whole-run and steady throughput, MFU, memory, environment, every tracker's columns."""
    import torch

    from tunebench.experiment.flops import mfu, training_flops
    from tunebench.experiment.kernel_checks import padding_free_problem
    from tunebench.experiment.throughput import steady_columns
    from tunebench.experiment.tokens import totals
    from tunebench.experiment.trackers import RunFacts, hf_memory_columns
    from tunebench.telemetry.environment import environment_columns

    trainer, sft_config, world = training.trainer, training.sft_config, training.state.num_processes
    tokens = totals(token_steps)
    runtime = float(train_metrics["train_runtime"])
    device_name = torch.cuda.get_device_name(training.device) if training.on_cuda else None
    flops = training_flops(trainer.model, tokens["nonpad_tokens"], tokens["sum_squared_lengths"])
    base_config = (trainer.model.get_base_model() if hasattr(trainer.model, "get_base_model") else trainer.model).config
    row: dict[str, Any] = {
        "status": Status.OK,
        "error_messages": "",
        "train_loss": train_metrics.get("train_loss"),
        "train_runtime": runtime,
        "train_samples_per_second": train_metrics.get("train_samples_per_second"),
        "train_steps_per_second": train_metrics.get("train_steps_per_second"),
        "train_tokens_per_second": tokens["padded_tokens"] / runtime,
        "train_nonpad_tokens_per_second": tokens["nonpad_tokens"] / runtime,
        "train_nonpad_tokens_per_second_per_device": tokens["nonpad_tokens"] / runtime / world,
        "train_tokens_per_second_per_device": tokens["padded_tokens"] / runtime / world,
        "padding_fraction": 1 - tokens["nonpad_tokens"] / tokens["padded_tokens"] if tokens["padded_tokens"] else None,
        "train_tokens": tokens["padded_tokens"],
        "train_nonpad_tokens": tokens["nonpad_tokens"],
        "train_model_flops": flops,
        "mfu": mfu(flops, runtime, world, device_name),
        **steady_columns(step_times, token_steps, trainer.model, world, device_name, training.policy,
                         training.timer.excluded),
        "attn_implementation_used": getattr(base_config, "_attn_implementation", None),
        "num_processes": world,
        "trainable_parameters": sum(p.numel() for p in trainer.model.parameters() if p.requires_grad),
        "total_parameters": sum(p.numel() for p in trainer.model.parameters()),
        "mem_peak_host_rss_bytes": own_peak_rss(),
        **environment_columns("cuda" if training.on_cuda else "cpu"),
        **startup.columns(),
    }
    if training.on_cuda:
        row["gpu_name"] = device_name
        row["mem_peak_torch_max_allocated_bytes"] = torch.cuda.max_memory_allocated(training.device)
        row["mem_peak_torch_max_reserved_bytes"] = torch.cuda.max_memory_reserved(training.device)
    row["distributed_type"] = str(trainer.accelerator.distributed_type).split(".")[-1]
    row.update(acceleration_columns(training.quantization, training.compile_watch, training.policy.warmup_steps,
                                    losses, row, training.fms))
    if "huggingface" not in training.memory_logging:  # the columns exist in every row, empty when not measured
        row.update(hf_memory_columns({}))
    for tracker in training.trackers:
        row.update(tracker.columns(RunFacts(train_metrics, row)))
    unlike = padding_free_problem(bool(sft_config.packing), bool(getattr(sft_config, "padding_free", False)),
                                  row["attn_implementation_used"])
    if unlike:
        row["measurement_warning"] = "; ".join(w for w in (row.get("measurement_warning"), unlike) if w)
    return row


def fms_run(model_args, folder: Path):
    """The experiment's fms-acceleration run (tunebench.experiment.fms.seam), or None without fms plugins."""
    from tunebench.experiment.fms.settings import fms_plugins_of

    plugins = fms_plugins_of(model_args.fms_plugins)
    if not plugins.enabled:
        return None
    from tunebench.experiment.fms.seam import FmsRun

    return FmsRun.start(plugins, folder)


def own_peak_rss() -> int | None:
    """This process's peak RSS in bytes (VmHWM). Not ru_maxrss: Linux carries the launcher's peak across the
    fork and exec into it (a 1.5 GB parent made a 10 MB child report 1.5 GB)."""
    from scanner.memory import host_rss
    return host_rss()[1]


def acceleration_columns(quantization, compile_watch, warmup_steps: int, losses: dict[int, float],
                         row: dict[str, Any], fms=None) -> dict[str, Any]:
    """The row's quantization label, torch.compile's columns (their warning joined to the row's), fms's columns and
    the last step's loss (the loss-parity columns compare whole trajectories, from steps.json, across rows)."""
    out: dict[str, Any] = {"quantization": quantization.label(),
                           "train_loss_last_step": losses[max(losses)] if losses else None}
    if fms is not None:
        out.update(fms.columns())
    if compile_watch is not None:
        columns = compile_watch.columns(warmup_steps)
        late = columns.pop("measurement_warning", None)
        out.update(columns)
        if late:
            out["measurement_warning"] = "; ".join(w for w in (row.get("measurement_warning"), late) if w)
    return out


def _error_class(exc: BaseException) -> str:
    import torch

    if isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower():
        return Status.OOM
    return "error"


ERROR_CHARS = 4000  # as tunebench.execution.failures keeps of a stderr tail


def error_record(exc: BaseException) -> str:
    """The exception's own line first, then as much of its traceback's end as fits: a long traceback's tail can
    leave the line out (torch.compile's errors end in a 'from user code' trace of the model's frames)."""
    headline = "".join(traceback.format_exception_only(exc)).strip()[:ERROR_CHARS // 4]
    trace = "".join(traceback.format_exception(exc))
    return f"{headline}\n{trace[-(ERROR_CHARS - len(headline) - 1):]}"


def main(argv: list[str] | None = None) -> int:
    from scanner.memory import process_start_epoch  # the process's own start time, from /proc
    from tunebench.experiment.startup import Startup
    from tunebench.lifetime.parent_death import die_with_launcher

    die_with_launcher()  # a rank of torchrun / accelerate launch dies with it, even if the harness is SIGKILLed

    startup = Startup(process_start_epoch())
    logging.basicConfig(level=os.environ.get("TUNEBENCH_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    argv = sys.argv[1:] if argv is None else argv
    started = time.time()
    results_json = None
    try:
        if argv[:1] == ["--spec"] and len(argv) == 2:  # known before anything is built, for the error file
            from tunebench.experiment.spec import read_entry

            results_json = read_entry(argv[1]).get("bench", {}).get("results_json") or None
        row, steps = run(load_entry(argv), startup)
    except BaseException as exc:  # record, then re-raise so the exit code tells the harness too
        rank = os.environ.get("RANK", "0")
        if results_json:
            write_json(Path(results_json).with_name(f"error_rank{rank}.json"), {
                "status": Status.TIMEOUT if isinstance(exc, KeyboardInterrupt) else _error_class(exc),
                "error_messages": error_record(exc),
                "rank": int(rank),
            })
        raise
    if row and results_json:
        row["entry_wall_seconds"] = time.time() - started
        if os.environ.get("TUNEBENCH_NOT_PRELOADED"):  # tunebench.execution.preload's fallback
            row["startup_preloaded"] = False
        write_json(Path(results_json).with_name(STEPS_FILE), steps)
        write_json(results_json, row)
    _destroy_process_group()
    return 0


def _destroy_process_group() -> None:
    """Gloo/NCCL threads still alive at interpreter exit can abort the process ("terminate called...")."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
