"""The column registry: every CSV column declared once — kind, unit, better direction, compare family, meaning.

The CSV writer (which columns are configuration), compare (what is a metric, its family and direction),
the report (labels and units) and the docs' column reference page all read this module; a test fails when a
produced column is declared nowhere. Training arguments need no entry here: any TrainingArguments / SFTConfig
/ tunebench entry field is an `argument` column, documented by its dataclass.

Kinds: identity (what the experiment is), argument (how it was configured), outcome (status and messages),
metric (a measurement), environment (where it ran), bookkeeping (how it was measured).
"""

from __future__ import annotations

import logging

from tunebench.results.columns import declared as extra
from tunebench.results.columns import environment
from tunebench.results.columns.types import (
    BOOKKEEPING,
    ENVIRONMENT,
    HIGHER,
    IDENTITY,
    LOWER,
    METRIC,
    OUTCOME,
    S_ACCEL,
    S_BOOK,
    S_COMM,
    S_ENV,
    S_ID,
    S_MEM,
    S_OUT,
    S_PRED,
    S_RUN,
    S_SCAN,
    S_SIDE,
    S_START,
    S_STEADY,
    TWO_SIDED,
    Column,
    _k,
    _m,
)
from tunebench.vocabulary import Direction

logger = logging.getLogger(__name__)

REGISTRY: tuple[Column, ...] = (
    # ---------------------------------------------------------------- identity
    _k("experiment_id", IDENTITY, "-", S_ID, "first 12 hex digits of a SHA-256 over the fully resolved experiment"),
    _k("scenario", IDENTITY, "-", S_ID, "scenario name"),
    _k("framework_config", IDENTITY, "-", S_ID, "framework config name (`none` = baseline)"),
    _k("model_name_or_path", IDENTITY, "-", S_ID, "model (`preset:<name>`, a local dir or a hub id)"),
    _k("num_gpus", IDENTITY, "count", S_ID, "GPUs (on `device_type=cpu`: processes)"),
    _k("device_type", IDENTITY, "-", S_ID, "`cuda` or `cpu`"),
    _k("effective_batch_size", IDENTITY, "samples", S_ID, "samples per optimizer step, all devices"),
    _k("per_device_train_batch_size", IDENTITY, "samples", S_ID, "micro-batch per device"),
    _k("gradient_accumulation_steps", IDENTITY, "count", S_ID, "micro-batches per optimizer step"),
    _k("max_seq_len", IDENTITY, "tokens", S_ID, "maximum tokens per sequence"),
    _k("packing", IDENTITY, "bool", S_ID, "packing on/off"),
    _k("peft_method", IDENTITY, "-", S_ID, "`none`, `lora`, `prompt-tuning`"),
    _k("torch_dtype", IDENTITY, "-", S_ID, "dtype the weights are created in"),
    _k("quantization", IDENTITY, "-", S_ID,
       "the base's quantization: `none`, `bnb-4bit-<nf4|fp4>[-dq]` (bitsandbytes 4-bit, `-dq`: double quantization), "
       "`bnb-8bit`, `gptq-<bits>bit-g<group>-<rtn|checkpoint>` (fms's GPTQ base: `rtn` = tunebench's round-to-nearest "
       "packing of the random or given weights, `checkpoint` = a GPTQ checkpoint as given)"),
    # ---------------------------------------------------------------- outcome
    _k("status", OUTCOME, "-", S_OUT, "`ok`, `oom`, `error`, `timeout`, `skipped`"),
    _k("error_messages", OUTCOME, "-", S_OUT, "last traceback, or why it was skipped; a run whose loss went NaN or "
                                              "infinite is an `error` starting `nonfinite_loss:` (no loss figure)"),
    _k("measurement_warning", OUTCOME, "-", S_OUT,
       "empty, or why the figures are not trustworthy (too few steady steps, a step-time spread above the limit, "
       "an attention kernel other than the prediction's or the config's, an impossible MFU/HFU)"),
    # ---------------------------------------------------------------- steady state
    _m("steady_step_time_median", "s", LOWER, "time", S_STEADY, "median optimizer-step time over the steady steps"),
    _m("steady_step_time_p10", "s", LOWER, "time", S_STEADY, "10th percentile of the steady step times"),
    _m("steady_step_time_p90", "s", LOWER, "time", S_STEADY, "90th percentile of the steady step times"),
    _m("steady_step_time_cv", "fraction", None, "stability", S_STEADY, "std / mean of the steady step times"),
    _m("steady_step_time_robust_cv", "fraction", None, "stability", S_STEADY,
       "1.4826 × median absolute deviation ÷ median of the steady step times (robust to a few outlying steps; "
       "what measurement_warning judges)"),
    _m("steady_step_time_ci_pct", "%", None, "stability", S_STEADY,
       "half-width of the median's 95 % confidence interval (distribution-free), % of the median"),
    _m("steady_steps", "count", None, "count", S_STEADY, "steps in the steady window"),
    _m("steady_tokens_per_second", "tokens/s", HIGHER, "throughput", S_STEADY,
       "mean tokens of a steady step (padding included, all ranks) ÷ median step time"),
    _m("steady_nonpad_tokens_per_second", "tokens/s", HIGHER, "throughput", S_STEADY,
       "the same for non-padding tokens (global)"),
    _m("steady_nonpad_tokens_per_second_per_device", "tokens/s", HIGHER, "throughput", S_STEADY,
       "the above ÷ processes"),
    *(Column(n, kind, unit, meaning, S_STEADY, direction or Direction.IGNORE, family)
      for n, kind, unit, direction, family, meaning in extra.SCALING_COLUMNS),
    _m("steady_mfu", "fraction", HIGHER, "throughput", S_STEADY,
       "model FLOPs of a mean steady step ÷ median step time ÷ (peak × devices); empty on CPU or unknown GPUs"),
    _m("steady_hfu", "fraction", HIGHER, "throughput", S_STEADY,
       "as steady_mfu, counting gradient-checkpointing recompute as work"),
    _m("steady_padding_fraction", "fraction", None, "ratio", S_STEADY, "1 − non-padding / all tokens of the steady "
                                                                       "steps"),
    _m("steady_energy_joules", "J", None, "energy", S_STEADY, "sidecar: ∫ power dt over the steady window, all GPUs"),
    _m("steady_energy_joules_per_nonpad_token", "J/token", LOWER, "energy", S_STEADY,
       "steady_energy_joules ÷ non-padding tokens of the steady window"),
    _m("total_steps", "count", None, "count", S_STEADY, "optimizer steps run (auto mode may stop before max_steps)"),
    _m("first_step_seconds", "s", LOWER, "startup", S_STEADY, "time of optimizer step 1 (allocator growth, kernel "
                                                              "selection)"),
    _k("attn_implementation_used", METRIC, "-", S_STEADY, "attention implementation the model ran with (`sdpa`, "
                                                          "`eager`, …)"),
    # ---------------------------------------------------------------- torch.compile
    _m("compile_seconds", "s", LOWER, "startup", S_ACCEL,
       "torch.compile: seconds spent compiling (dynamo frames and lazily compiled backward graphs), all steps"),
    _m("compile_count", "count", None, "count", S_ACCEL, "torch.compile: compilations (forward frames + backward "
                                                         "graphs)"),
    _m("compile_recompiles", "count", LOWER, "count", S_ACCEL,
       "torch.compile: compilations of a frame already compiled (a guard failed: new shapes, dtypes, …)"),
    _m("compile_last_step", "count", None, "count", S_ACCEL, "torch.compile: the last optimizer step that compiled"),
    _m("compile_steady_recompiles", "count", LOWER, "count", S_ACCEL,
       "torch.compile: compilations after the warm-up (those steps are left out of the steady window, and warned)"),
    # ---------------------------------------------------------------- fms-acceleration
    _k("fms_plugins", METRIC, "-", S_ACCEL, "fms-acceleration plugin paths the row ran through fms's "
                                            "AccelerationFramework, `+`-joined (`auto_gptq`, `bitsandbytes`, "
                                            "`fused_ops_and_kernels`, ...); empty without fms"),
    _k("fms_versions", METRIC, "-", S_ACCEL, "the fms packages it used, `name==version`, `;`-joined"),
    _k("fms_patches", METRIC, "-", S_ACCEL, "what was changed to run them, `;`-joined: tunebench's compatibility "
                                            "fixes, what fms left changed process-wide and tunebench restored, and "
                                            "fms's model patches (`rule <id> x<modules>`: foak's kernels)"),
    # ---------------------------------------------------------------- loss parity
    _m("train_loss_last_step", "-", None, "loss", S_ACCEL, "the last optimizer step's loss (sum of its micro-batch "
                                                           "losses)"),
    _k("loss_parity_baseline", METRIC, "-", S_ACCEL,
       "experiment_id of the baseline the loss is compared with: same scenario, framework config `none`, same "
       "arguments but those the framework config sets (itself for a baseline row)"),
    _m("loss_parity_steps", "count", None, "count", S_ACCEL, "optimizer steps with a loss in both runs"),
    _m("loss_parity_max_rel_diff", "fraction", LOWER, "loss", S_ACCEL,
       "max over those steps of |loss − baseline loss| ÷ |baseline loss|"),
    _m("loss_parity_final_rel_diff", "fraction", None, "loss", S_ACCEL,
       "(loss − baseline loss) ÷ |baseline loss| at the last common step (signed)"),
    _m("loss_parity_tolerance", "fraction", None, "loss", S_ACCEL,
       "relative difference that counts as the same numerics: 2 × loss_parity_band, or the dtype's fixed tolerance "
       "where no band was measured ([Loss parity](../explanations/accelerations.md#loss-parity))"),
    _m("loss_parity_band", "fraction", None, "loss", S_ACCEL,
       "the band of repeat noise: the largest loss_parity_max_rel_diff of the baseline's band runs (rows reordered)"),
    _m("loss_parity_band_runs", "count", None, "count", S_ACCEL, "band runs behind loss_parity_band"),
    _k("loss_parity_band_source", METRIC, "-", S_ACCEL,
       "`folder: N band run(s)`, `table: <evidence>` (tunebench/results/parity/loss_band.csv) or `none: <why>`"),
    _k("loss_parity_ok", METRIC, "-", S_ACCEL,
       "loss_parity_max_rel_diff ≤ loss_parity_tolerance; false is a measurement_warning"),
    _k("loss_parity_note", METRIC, "-", S_ACCEL,
       "why an ok row's loss parity columns are empty: it logged no per-step loss, its baseline is not in the "
       "folder, or the baseline failed"),
    *(Column(n, kind, unit, meaning, extra.S_LEARN, direction or Direction.IGNORE, family)
      for n, kind, unit, direction, family, meaning in extra.LEARNING_COLUMNS),
    # ---------------------------------------------------------------- whole run
    _m("train_loss", "-", TWO_SIDED, "loss", S_RUN, "Trainer's mean training loss"),
    _m("train_runtime", "s", LOWER, "whole_run", S_RUN, "Trainer's training time (all steps, warm-up included)"),
    _m("train_samples_per_second", "samples/s", HIGHER, "whole_run", S_RUN, "from the Trainer (global, whole run)"),
    _m("train_steps_per_second", "steps/s", HIGHER, "whole_run", S_RUN, "from the Trainer (whole run)"),
    _m("train_tokens", "tokens", None, "count", S_RUN, "tokens fed to the model, all ranks, padding included"),
    _m("train_nonpad_tokens", "tokens", None, "count", S_RUN, "the same without padding"),
    _m("train_tokens_per_second", "tokens/s", HIGHER, "whole_run", S_RUN, "train_tokens ÷ train_runtime"),
    _m("train_nonpad_tokens_per_second", "tokens/s", HIGHER, "whole_run", S_RUN, "train_nonpad_tokens ÷ train_runtime"),
    _m("train_nonpad_tokens_per_second_per_device", "tokens/s", HIGHER, "whole_run", S_RUN, "the above ÷ processes"),
    _m("train_tokens_per_second_per_device", "tokens/s", HIGHER, "whole_run", S_RUN,
       "train_tokens_per_second ÷ processes: what Hugging Face's `train_tokens_per_second` (and fms-acceleration's "
       "benchmark CSV) reports, padded tokens per device"),
    _m("padding_fraction", "fraction", None, "ratio", S_RUN, "1 − non-padding / all tokens, whole run"),
    _m("train_model_flops", "FLOP", None, "count", S_RUN, "analytic model FLOPs of the run "
       "([MFU](../explanations/steady-state.md#mfu-and-hfu))"),
    _m("mfu", "fraction", HIGHER, "whole_run", S_RUN, "train_model_flops ÷ train_runtime ÷ (peak × devices)"),
    _m("trainable_parameters", "count", None, "count", S_RUN, "parameters with requires_grad"),
    _m("total_parameters", "count", None, "count", S_RUN, "all parameters"),
    _m("num_processes", "count", None, "count", S_RUN, "world size"),
    _k("distributed_type", METRIC, "-", S_RUN, "what accelerate ran: `NO`, `MULTI_CPU`, `MULTI_GPU`, `FSDP`"),
    # ---------------------------------------------------------------- start-up
    _m("startup_seconds", "s", LOWER, "startup", S_START, "process start → the first optimizer step begins (training "
                                                          "entry)"),
    _m("startup_imports_seconds", "s", LOWER, "startup", S_START, "process start → torch/transformers/TRL imported"),
    _m("startup_data_seconds", "s", LOWER, "startup", S_START, "tokenizer and preprocessed dataset (a cache read)"),
    _m("startup_model_seconds", "s", LOWER, "startup", S_START,
       "model build (presets: random init on the GPU) or load"),
    _m("startup_trainer_seconds", "s", LOWER, "startup", S_START, "SFTTrainer construction (PEFT wrap, dataset "
                                                                  "preparation)"),
    _m("startup_train_setup_seconds", "s", LOWER, "startup", S_START,
       "train() → first step: accelerator.prepare, optimizer, data loader"),
    _m("startup_launcher_seconds", "s", LOWER, "startup", S_START,
       "harness spawn → the training entry's process started (accelerate/torchrun start-up)"),
    _m("experiment_wall_seconds", "s", LOWER, "startup", S_START, "whole subprocess, spawn to exit"),
    _m("startup_preload_seconds", "s", None, "startup", S_START,
       "preloaded experiments: how long the run waited for its preload server's one-time imports (not in "
       "startup_seconds); the command line spawns the server as a run begins, so this is what its reading of the "
       "inputs did not hide"),
    _m("entry_wall_seconds", "s", LOWER, "startup", S_START, "training entry: arguments parsed → results written"),
    # ---------------------------------------------------------------- memory (harness)
    _m("mem_peak_host_rss_bytes", "bytes", LOWER, "memory", S_MEM,
       "peak host RSS of rank 0's own process (`VmHWM`; `ru_maxrss` would carry its launcher's peak)"),
    _m("mem_peak_torch_max_allocated_bytes", "bytes", LOWER, "memory", S_MEM,
       "`torch.cuda.max_memory_allocated()` at the end of rank 0's run"),
    _m("mem_peak_torch_max_reserved_bytes", "bytes", LOWER, "memory", S_MEM, "`torch.cuda.max_memory_reserved()` "
                                                                             "likewise"),
    _m("mem_torch_mem_alloc_in_bytes", "bytes", LOWER, "memory", S_MEM,
       "with `--log_memory_hf`: HF's before_init + init delta + train delta (allocated at the end of training)"),
    _m("mem_peak_torch_mem_alloc_in_bytes", "bytes", LOWER, "memory", S_MEM,
       "with `--log_memory_hf`: the above + `train_mem_gpu_peaked_delta`"),
    # ---------------------------------------------------------------- sidecar
    _m("mem_nvidia_mem_reserved", "MiB", LOWER, "memory_mib", S_SIDE,
       "mean over the experiment's GPUs of (peak `memory.used` − baseline before launch)"),
    _m("mem_nvidia_mem_reserved_max", "MiB", LOWER, "memory_mib", S_SIDE, "max of those per-GPU peaks"),
    _m("mem_nvidia_mem_reserved_gpu<i>", "MiB", LOWER, "memory_mib", S_SIDE,
       "per-GPU calibrated peak; `i` = position in the experiment's GPUs (its `cuda:i`)"),
    _m("nvidia_gpu_util_mean", "%", None, "utilization", S_SIDE, "mean `utilization.gpu`"),
    _m("energy_joules", "J", None, "energy", S_SIDE, "∫ `power.draw` dt over the whole experiment, all GPUs"),
    _m("energy_joules_per_nonpad_token", "J/token", LOWER, "energy", S_SIDE,
       "energy_joules ÷ train_nonpad_tokens (start-up and idle included: see steady_energy_*)"),
    _k("nvidia_smi_samples", BOOKKEEPING, "count", S_SIDE, "poll lines used"),
    _k("nvidia_smi_malformed_lines", BOOKKEEPING, "count", S_SIDE, "poll lines rejected"),
    # ---------------------------------------------------------------- scanner
    _k("scan_step", BOOKKEEPING, "-", S_SCAN, "memory-scanned step (or `first-last`)"),
    _k("scan_steps_scanned", BOOKKEEPING, "count", S_SCAN, "how many memory-scanned steps"),
    _k("scan_time_source", BOOKKEEPING, "-", S_SCAN,
       "`time_window` (phases from light-hook steps) or `memory_steps` (no window fitted: hooks included)"),
    _k("scan_time_window", BOOKKEEPING, "-", S_SCAN, "phase-timed steps (`first-last`)"),
    _k("scan_time_step_chosen", BOOKKEEPING, "-", S_SCAN, "the timed step reported: the window's median step"),
    _m("scan_time_step", "s", LOWER, "phase", S_SCAN, "the reported step's time"),
    _m("scan_time_step_min", "s", LOWER, "phase", S_SCAN, "fastest timed step"),
    _m("scan_time_step_max", "s", LOWER, "phase", S_SCAN, "slowest timed step"),
    _m("scan_time_step_vs_median", "fraction", None, "stability", S_SCAN,
       "scan_time_step ÷ steady_step_time_median − 1: how representative the reported step is"),
    *(_m(f"scan_time_{phase}", "s", LOWER, "phase", S_SCAN, f"the reported step's {meaning} (phases sum to "
                                                            f"scan_time_step)")
      for phase, meaning in (("forward", "forward passes"), ("backward", "backward passes, recompute included"),
                             ("clip", "gradient clipping and pre-optimizer callbacks"),
                             ("optimizer", "optimizer.step"),
                             ("other", "remainder: data loading, zero_grad, callbacks"))),
    _m("scan_memory_step_time", "s", None, "phase", S_SCAN, "time of the memory-scanned step (its hooks included)"),
    _m("scan_micro_batches", "count", None, "count", S_SCAN, "forward/backward passes in the step"),
    _m("scan_tokens", "tokens", None, "count", S_SCAN, "tokens the model received in the reported step"),
    _m("scan_nonpad_tokens", "tokens", None, "count", S_SCAN, "the same without padding"),
    _m("scan_tokens_per_second", "tokens/s", HIGHER, "phase", S_SCAN,
       "scan_tokens ÷ scan_time_step, summed over ranks"),
    _m("scan_nonpad_tokens_per_second", "tokens/s", HIGHER, "phase", S_SCAN, "the same without padding"),
    _m("scan_mem_params", "bytes", LOWER, "memory", S_SCAN, "parameter storages (this rank's shard)"),
    _m("scan_mem_quant_state", "bytes", LOWER, "memory", S_SCAN,
       "the part of scan_mem_params that is quantization state: bitsandbytes' block scales, code books, nested "
       "scales (4-bit) or row scales (8-bit)"),
    _m("scan_mem_buffers", "bytes", LOWER, "memory", S_SCAN, "buffer storages"),
    _m("scan_mem_grads", "bytes", LOWER, "memory", S_SCAN, "gradients at the peak (CPU: their full size)"),
    _m("scan_mem_optimizer", "bytes", LOWER, "memory", S_SCAN, "every tensor in optimizer.state"),
    _m("scan_mem_activations", "bytes", LOWER, "memory", S_SCAN,
       "saved for backward at the peak (CUDA) / the step's maximum (CPU)"),
    _m("scan_mem_activations_max", "bytes", LOWER, "memory", S_SCAN, "maximum over the step"),
    _m("scan_mem_other", "bytes", LOWER, "memory", S_SCAN,
       "held since before the step, none of the above: library workspaces, DDP buckets (CUDA)"),
    _m("scan_mem_block_tails", "bytes", LOWER, "memory", S_SCAN,
       "allocated blocks beyond their requests at the peak: a free block under 1 MiB larger than asked for is "
       "handed out whole (CUDA without expandable segments; 0 with them)"),
    _m("scan_mem_temporaries", "bytes", LOWER, "memory", S_SCAN,
       "peak − the categories above − other − block tails (CUDA)"),
    _m("scan_mem_peak_allocated", "bytes", LOWER, "memory", S_SCAN,
       "allocator peak in the step (CUDA; empty on CPU, which has no device allocator: the memory of a CPU run is "
       "`mem_peak_host_rss_bytes`, and its tensors by category the other `scan_mem_*` columns)"),
    _m("scan_mem_peak_reserved", "bytes", LOWER, "memory", S_SCAN, "allocator reserved peak in the step (CUDA)"),
    _m("scan_mem_fragmentation", "bytes", LOWER, "memory", S_SCAN, "peak reserved − peak allocated (CUDA)"),
    _m("scan_mem_alloc_retries", "count", LOWER, "count", S_SCAN, "allocator retries in the step (CUDA)"),
    _m("scan_mem_ooms", "count", LOWER, "count", S_SCAN, "allocator OOMs in the step (CUDA)"),
    _m("scan_mem_nvml_used", "bytes", None, "memory", S_SCAN, "NVML device memory used at the end of the scan "
                                                              "(device-wide)"),
    _m("scan_mem_cuda_context", "bytes", None, "memory", S_SCAN,
       "scan_mem_nvml_used − reserved: context, workspaces, …"),
    _m("scan_mem_host_rss", "bytes", None, "memory", S_SCAN, "host RSS at the end of the scan"),
    _m("scan_mem_host_peak_rss", "bytes", None, "memory", S_SCAN, "host peak RSS at the end of the scan"),
    _m("scan_mem_imbalance", "fraction", LOWER, "stability", S_SCAN, "max peak ÷ mean peak over ranks − 1"),
    _k("scan_peak_phase", METRIC, "-", S_SCAN, "phase in which the step's peak happened"),
    _k("scan_attention_backend", METRIC, "-", S_SCAN,
       "attention kernel the memory-scanned step ran: `flash`, `efficient`, `cudnn`, `math`, `flash_attention_2`, "
       "`none` (eager), `a+b` when mixed"),
    _m("scan_attention_calls", "count", None, "count", S_SCAN, "fused attention calls in that step"),
    _m("scan_init_time", "s", LOWER, "startup", S_SCAN, "process start → first step (scanner's own clock)"),
    _m("scan_checkpoint_save_time", "s", LOWER, "startup", S_SCAN, "longest checkpoint save (empty when none)"),
    _m("scan_tokens_per_second_per_device", "tokens/s", HIGHER, "phase", S_SCAN, "mean over ranks"),
    _m("scan_nonpad_tokens_per_second_per_device", "tokens/s", HIGHER, "phase", S_SCAN, "mean over ranks"),
    _m("scan_tokens_per_device", "tokens", None, "count", S_SCAN, "mean over ranks"),
    _m("scan_nonpad_tokens_per_device", "tokens", None, "count", S_SCAN, "mean over ranks"),
    _k("scan_rank", BOOKKEEPING, "-", S_SCAN, "reporting rank (single process)"),
    _k("scan_world_size", BOOKKEEPING, "count", S_SCAN, "world size seen by the scanner"),
    _k("scan_ranks", BOOKKEEPING, "count", S_SCAN, "ranks merged into the row"),
    # ---------------------------------------------------------------- collectives
    _m("scan_comm_count", "count", None, "count", S_COMM, "collectives in the memory-scanned step"),
    _m("scan_comm_bytes", "bytes", LOWER, "memory", S_COMM, "their full payloads: max(input, output) × element size"),
    _m("scan_comm_time", "s", LOWER, "phase", S_COMM, "NCCL kernel time (gloo: collective time on its thread)"),
    _m("scan_comm_exposed_time", "s", LOWER, "phase", S_COMM, "NCCL kernel time not overlapped by compute (CUDA)"),
    _m("scan_comm_<kind>_count", "count", None, "count", S_COMM, "per kind (`all_reduce`, `all_gather`, …)"),
    _m("scan_comm_<kind>_bytes", "bytes", LOWER, "memory", S_COMM, "per kind"),
    _m("scan_comm_<kind>_time", "s", LOWER, "phase", S_COMM, "per kind"),
    _k("scan_comm_<kind>_dtype", METRIC, "-", S_COMM, "per kind: dtypes seen"),
    *(Column(n, kind, unit, meaning, extra.S_KERNEL, direction or Direction.IGNORE, family)
      for n, kind, unit, direction, family, meaning in extra.KERNEL_COLUMNS),
    # ---------------------------------------------------------------- prediction
    _m("pred_mem_<category>", "bytes", None, "memory", S_PRED,
       "predicted per rank at the step's peak (`params`, `buffers`, `grads`, `optimizer`, `activations`, "
       "`temporaries`, `other`: cuBLAS workspaces and DDP buckets); on CPU, activations are the step's maximum"),
    _m("pred_mem_peak", "bytes", None, "memory", S_PRED, "predicted peak allocated per rank (the sum of the above)"),
    _m("pred_capacity_bytes", "bytes", None, "memory", S_PRED, "one GPU's memory (--plan_device or the GPU present)"),
    _m("pred_mem_<category>_upper", "bytes", None, "memory", S_PRED,
       "calibrated upper bound (CUDA): the prediction × (1 + the largest under-prediction measured for this GPU and "
       "allocator setting in tunebench/planning/residuals.csv, which every evidence run extends); `peak` too, plus "
       "`pred_mem_bound_extra` (torch.compile rows: compiled steps' largest measured under-prediction, and "
       "for max-autotune its step 1's, 2.0 %; planning/accelerations.py; plus what the eager step saves in layer "
       "classes no GPU run verified compiled, planning/compile_bounds.py)"),
    _m("pred_mem_reserved", "bytes", None, "memory", S_PRED, "what the step needs reserved: pred_mem_peak_upper + the "
                                                             "allocator's slack measured over it at a GPU's edge "
                                                             "(pred_mem_peak on CPU); compare with "
                                                             "scan_mem_peak_reserved at the edge (below it the cache "
                                                             "keeps more)"),
    _k("pred_fits", METRIC, "-", S_PRED, "pred_mem_reserved ≤ capacity − 1 GiB (CUDA context)"),
    _m("pred_fit_margin_bytes", "bytes", None, "memory", S_PRED, "usable capacity − pred_mem_reserved (negative: OOM)"),
    _m("pred_seconds", "s", None, "time", S_PRED, "time the prediction took (0 when a cached shape was reused)"),
    _m("pred_attention", "-", None, None, S_PRED,
       "attention kernel the prediction assumed (the target GPU's choice: `cudnn`, `flash`, `efficient`, `math`; "
       "`none` for eager); a different `scan_attention_backend` is a measurement_warning"),
    _m("pred_error_<category>", "fraction", None, "stability", S_PRED,
       "after the run: predicted ÷ measured − 1 (the scanner's category; `peak` against max_memory_allocated)"),
    _k("pred_note", METRIC, "-", S_PRED,
       "how the prediction modelled what the row turns on (torch.compile, Liger, flex attention, a quantized base, "
       "8-bit outlier columns) and what it does not model; on a sharded row whose per-rank peak is not below the "
       "same experiment's on one GPU, why (`sharding saves nothing here`: FSDP's float32 master weights, unsharded "
       "activations, gathered layers, each with its bytes); why a `pred_error_*` is empty although both figures "
       "exist (packed rows: the scanned step held fewer tokens than the full rows predicted)"),
    *(Column(n, kind, unit, meaning, extra.S_PROJ, direction or Direction.IGNORE, family)
      for n, kind, unit, direction, family, meaning in extra.PROJECTION_COLUMNS),
    # ---------------------------------------------------------------- environment
    _k("gpu_name", ENVIRONMENT, "-", S_ENV, "`torch.cuda.get_device_name()`"),
    _k("gpu_count", ENVIRONMENT, "count", S_ENV, "GPUs nvidia-smi lists"),
    _k("driver_version", ENVIRONMENT, "-", S_ENV, "NVIDIA driver"),
    _k("cuda_alloc_conf", ENVIRONMENT, "-", S_ENV, "`PYTORCH_CUDA_ALLOC_CONF` of a CUDA experiment "
                                                   "(`expandable_segments:True` unless you set it)"),
    _k("<package>_version", ENVIRONMENT, "-", S_ENV, "torch, transformers, trl, peft, accelerate, datasets"),
    _k("tunebench_git_sha", ENVIRONMENT, "-", S_ENV, "tunebench's commit (`-dirty` with local changes)"),
    _k("host_cpu_count", ENVIRONMENT, "count", S_ENV, "logical CPUs of the host that ran the experiment "
                                                      "(`os.cpu_count()`)"),
    *(_k(name, ENVIRONMENT, u, S_ENV, meaning) for name, u, meaning in environment.RUN_ENVIRONMENT),
    *(_k(name, ENVIRONMENT, u, environment.SECTION, meaning) for name, u, meaning in environment.STEADY_ENVIRONMENT),
    # ---------------------------------------------------------------- bookkeeping
    _k("process_start_unix", BOOKKEEPING, "s", S_BOOK, "unix time the training entry's process started"),
    _k("experiment_start_unix", BOOKKEEPING, "s", S_BOOK, "unix time the harness launched the experiment"),
    _k("experiment_end_unix", BOOKKEEPING, "s", S_BOOK, "unix time its process group was gone"),
    _k("executor", BOOKKEEPING, "-", S_BOOK, "`local`, `ray` or `slurm`"),
    _k("host_load_avg_1m", BOOKKEEPING, "-", S_BOOK, "highest 1-minute load average of the host while the experiment "
       "ran (sampled every 2 s); above `host_cpu_count` on a CPU run: a `host loaded` measurement warning"),
    _k("repeat", BOOKKEEPING, "count", S_BOOK, "which run of the experiment this row is (`--repeats`: 1..N)"),
    _k("repeats", BOOKKEEPING, "count", S_BOOK,
       "ok runs of this experiment in the results folder (when more than one)"),
    _m("steady_nonpad_tokens_per_second_olympic", "tokens/s", HIGHER, "throughput", S_BOOK,
       "mean over the experiment's runs without the fastest and slowest (three runs or more)"),
    _m("steady_nonpad_tokens_per_second_spread_pct", "%", None, "stability", S_BOOK,
       "(max - min) / olympic mean of steady_nonpad_tokens_per_second over the experiment's runs"),
    _m("steady_step_time_median_olympic", "s", LOWER, "time", S_BOOK,
       "mean of steady_step_time_median over the experiment's runs without the fastest and slowest"),
    _m("steady_step_time_median_spread_pct", "%", None, "stability", S_BOOK,
       "(max - min) / olympic mean of steady_step_time_median over the experiment's runs"),
    _k("ray_node", BOOKKEEPING, "-", S_BOOK, "with `--executor ray`: IP address of the node that ran it (several "
                                             "nodes: "
       "their addresses in node-rank order)"),
    _k("concurrent_experiments", BOOKKEEPING, "count", S_BOOK,
       "other experiments that ran at any moment during this one (shared host CPU, PCIe, power: timing may suffer)"),
    _k("concurrent_experiment_ids", BOOKKEEPING, "-", S_BOOK,
       "which: the experiment_id of each of them, `;`-separated (empty: it ran alone)"),
    _k("startup_preloaded", BOOKKEEPING, "-", S_BOOK,
       "forked from the preload server (torch/transformers/TRL imported once per matrix) instead of a new interpreter"),
)
