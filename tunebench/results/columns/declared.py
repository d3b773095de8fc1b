"""Declarations of the kernel-split (scanner) and projection columns, as plain data that registry.py registers.

Each entry is (name, kind, unit, direction, family, meaning); tunebench.results.columns.registry turns them into
`Column`s in its REGISTRY, under the two sections named here (types.py lists them in SECTIONS), so the CSV,
compare, the report and the docs read them like every other column.
"""

from __future__ import annotations

import logging

from tunebench.vocabulary import Direction

logger = logging.getLogger(__name__)

HIGHER, LOWER = Direction.LOWER_IS_WORSE, Direction.HIGHER_IS_WORSE  # as types.py: higher / lower is better

S_KERNEL = "Kernel split (scanner, CUDA)"
S_PROJ = "Projection (`plan --project_from`)"
S_LEARN = "Learning: the data's floor and time to a target loss"
_PHASES = "`forward`, `backward`, `clip`, `optimizer`, `other`"
_CLASSES = ("`gemm`, `attention`, `comm`, `optimizer`, `norm`, `reduction`, `copy`, `elementwise`, `transfer` "
            "(host↔device copies), `other`")

KERNEL_COLUMNS: tuple[tuple, ...] = (
    ("scan_kernel_source", "bookkeeping", "-", None, None,
     "`cuda` when the memory-scanned step's GPU kernels were split (one row each in `kernels.csv.gz`)"),
    ("scan_kernel_note", "metric", "-", None, None,
     "why the kernel split is empty (a CPU run, a failure), or what it left out"),
    ("scan_kernel_count", "metric", "count", None, "count", "GPU kernels, memcpys and memsets launched in the step"),
    ("scan_kernel_time", "metric", "s", None, "phase", "their summed durations"),
    ("scan_kernel_busy_time", "metric", "s", None, "phase", "the union of their intervals: the GPU's busy time"),
    ("scan_kernel_span_time", "metric", "s", None, "phase", "first kernel start → last kernel end"),
    ("scan_kernel_host_sync_time", "metric", "s", None, "phase",
     "host time spent waiting for the GPU (synchronize calls, synchronous copies): rows of class `sync`"),
    ("scan_kernel_<phase>_busy_time", "metric", "s", None, "phase",
     f"busy time of the kernels launched in a phase ({_PHASES})"),
    ("scan_kernel_<phase>_<class>_time", "metric", "s", None, "phase",
     "summed durations of a class's kernels launched in a phase (classes the phase ran)"),
    ("scan_kernel_<class>_time", "metric", "s", None, "phase", f"summed durations per class: {_CLASSES}"),
)

PROJECTION_COLUMNS: tuple[tuple, ...] = (
    ("proj_device", "identity", "-", None, None, "the GPU projected to (a name of the GPU table)"),
    ("proj_source_device", "identity", "-", None, None, "the GPU the experiment was measured on"),
    ("proj_num_gpus", "identity", "count", None, None, "GPUs projected to (default: the measured run's own count)"),
    ("proj_parallelism", "identity", "-", None, None,
     "`single`, `ddp`, `fsdp2`, `fsdp1-full_shard` or `fsdp1-shard_grad_op` (N GPUs on paper)"),
    ("proj_source_num_gpus", "identity", "count", None, None, "GPUs the experiment was measured on"),
    ("proj_source_parallelism", "identity", "-", None, None,
     "how it shared its work there (a row measured on several GPUs projects with its own)"),
    ("proj_steady_tokens_per_second", "metric", "tokens/s", HIGHER, "throughput",
     "projected steady tokens/s, all GPUs (padding included, as steady_tokens_per_second)"),
    ("proj_steady_nonpad_tokens_per_second", "metric", "tokens/s", HIGHER, "throughput",
     "the same without padding"),
    ("proj_step_time", "metric", "s", LOWER, "time", "projected optimizer-step time"),
    ("proj_time_<phase>", "metric", "s", None, "phase",
     f"projected time of a phase ({_PHASES}); `comm` is the exposed communication time"),
    ("proj_gpu_busy_time", "metric", "s", None, "phase", "projected GPU busy time of a step (kernels only)"),
    ("proj_host_gap_time", "metric", "s", None, "phase",
     "projected step time the GPU is not busy (waiting for the host): the replayed step − the busy time"),
    ("proj_host_elasticity", "metric", "fraction", None, "stability",
     "how much of a change in the host's speed reaches the step (d ln step ÷ d ln host time, by the replay): 0 "
     "GPU-bound, 1 host-bound; near 1 the projection is only as good as the target machine's host (empty without "
     "kernel rows)"),
    ("proj_comm_bytes", "metric", "bytes", None, "memory", "bytes each rank sends through collectives per step"),
    ("proj_mem_peak", "metric", "bytes", None, "memory", "per-rank peak from the fake step (pred_mem_peak)"),
    ("proj_fits", "metric", "-", None, None, "the per-rank prediction fits the target GPU (pred_fits)"),
    ("proj_usd_per_million_tokens", "metric", "USD/Mtoken", LOWER, None,
     "price per GPU hour (`--gpu_hour_usd`, never shipped) × GPUs × hours per million non-padding tokens"),
    ("proj_joules_per_token", "metric", "J/token", LOWER, "energy",
     "the table's power figure × GPUs × step time ÷ non-padding tokens of a step (empty without a power figure)"),
    ("proj_error", "metric", "fraction", None, "stability",
     "projected ÷ measured steady tokens/s − 1, where the experiment was also measured on the target"),
    ("proj_note", "metric", "-", None, None, "the method, its inputs and every assumption the projection made"),
)

SCALING_COLUMNS: tuple[tuple, ...] = (  # several GPUs against the same work on one (results.scaling)
    ("scaling_efficiency", "metric", "fraction", HIGHER, "ratio",
     "several GPUs: steady_nonpad_tokens_per_second ÷ (GPUs × the one-GPU twin's): the twin is a one-GPU row of "
     "the folder doing the same work per device (every argument equal but the parallelism's own; checkpointing "
     "alike, whichever switch); 1 = perfect scaling"),
    ("comm_exposed_share", "metric", "fraction", LOWER, "ratio",
     "several GPUs: (steady median step − the twin's) ÷ steady median step: what the GPUs added to the same work's "
     "step, communication not hidden behind compute and its slow-down of the compute beside it"),
    ("scaling_baseline_id", "metric", "-", None, None,
     "experiment_id of the one-GPU twin (`;`-separated when repeated)"),
)

LEARNING_COLUMNS: tuple[tuple, ...] = (
    ("data_entropy_floor_nats", "metric", "nats/token", None, None,
     "the lowest loss any model can reach on the data: ln k for the `markov` corpus (k = "
     "synthetic_markov_branching), ln(ids used) for `uniform`; empty for your own data (see the note)"),
    ("data_entropy_floor_note", "metric", "-", None, None, "why data_entropy_floor_nats is empty"),
    ("loss_first_step", "metric", "nats", None, "loss", "the loss of optimizer step 1 (the initial weights)"),
    ("loss_target", "metric", "nats", None, "loss",
     "loss_target_fraction of the way from loss_first_step to the floor, or loss_target_nats when given"),
    ("loss_target_steps", "metric", "count", LOWER, "whole_run",
     "the first optimizer step whose loss is at or below loss_target"),
    ("loss_target_tokens", "metric", "tokens", LOWER, "whole_run",
     "non-padding tokens of steps 1..loss_target_steps, all ranks"),
    ("loss_target_seconds", "metric", "s", LOWER, "whole_run",
     "step times of steps 1..loss_target_steps (compilation and warm-up included; a memory-scanned step counts "
     "the steady median instead of its hooked time)"),
    ("loss_target_note", "metric", "-", None, None,
     "why the loss_target_* figures are empty: no floor and no loss_target_nats, or not reached in the run"),
)
