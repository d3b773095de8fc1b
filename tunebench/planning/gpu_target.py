"""What a plan is judged against: `--plan_device` (or tune's `--project_to`) as a memory size or a GPU of the one GPU
table, else the GPU present. One resolver for `plan`, the fit map, the projection's memory verdict and `tune`, so a
GPU name means the same entry (capacity, compute capability, rates) in each of them.

A GPU *named* is a CUDA target: the plan runs the fake step as that GPU runs it (its attention kernels, CUDA's
autocast, the allocator's blocks). A size names no GPU: it is a budget, for a CUDA run the GPU present's kind (or
Hopper's kernels) and for a CPU run the process's memory.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

from tunebench.errors import InputError, InputProblem
from tunebench.hardware.gpus import Gpu, GpuTable, load_table

logger = logging.getLogger(__name__)

GIB = 1024**3
_SIZE = re.compile(r"\s*([\d.]+)\s*(GiB|GB|MiB|MB)\s*", re.I)
_UNITS = {"gib": GIB, "gb": 10**9, "mib": 1024**2, "mb": 10**6}


@dataclass(frozen=True)
class PlanTarget:
    """One GPU's memory (bytes; None: nothing to judge against), its name as the plan reports it (the table's, or
    nvidia-smi's for a GPU the table lacks), its compute capability × 10 (None: unknown, Hopper's kernels are
    assumed), its table entry (None for a size) and the table it was found in (the projection looks the measured
    GPU up in the same one)."""

    capacity: int | None = None
    name: str | None = None
    arch: int | None = None
    gpu: Gpu | None = None
    named: bool = False  # the user named a GPU (not a size, not the GPU present): the plan is for CUDA
    table: GpuTable | None = field(default=None, compare=False, repr=False)


def parse_size(spec: str) -> int | None:
    """Bytes of a size such as '80GiB', '24GB' or '4096MiB'; None when `spec` is not one."""
    match = _SIZE.fullmatch(spec)
    if not match:
        return None
    try:
        return int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    except (ValueError, OverflowError):
        return None


def device_names(spec: str | None, option: str = "--plan_device") -> list[str]:
    """The devices a --plan_device value lists, in order: sizes or GPU names separated by commas, each stripped
    ([] when none is given). InputError naming `option` for an empty entry (`,`, ` , `, `a,,b`) or one given
    twice: a list that names nothing is no device, and a silent drop would plan fewer than asked."""
    if spec is None or (isinstance(spec, str) and not spec.strip()):
        return []
    if not isinstance(spec, str):
        raise InputError([InputProblem("command line", option, f"expected a size or a GPU name, got "
                                       f"{type(spec).__name__}", "e.g. --plan_device 80GiB")])
    names = [part.strip() for part in spec.split(",")]
    fix = f'e.g. {option} "NVIDIA H200" (several, for --project_from: "NVIDIA H200, NVIDIA L40S")'
    if not all(names):
        raise InputError([InputProblem("command line", option, f"{spec[:80]!r} holds an empty entry between or "
                                       "around its commas", fix)])
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InputError([InputProblem("command line", option, f"{twice[0][:80]!r} is listed twice", fix)])
    return names


def one_device(spec: str | None, option: str = "--plan_device") -> str | None:
    """The one device a plan, a fit map or a run is judged against (device_names' checks); InputError for a list
    of several: each of them is a plan of its own."""
    names = device_names(spec, option)
    if len(names) > 1:
        raise InputError([InputProblem("command line", option, f"{len(names)} devices ({', '.join(names)[:120]}): "
                                       f"{option} takes one here (experiments are judged against one device)",
                                       f"run it once per device ({option} {names[0]!r}, then the next); "
                                       "`plan --project_from` projects measured runs onto several")])
    return names[0] if names else None


def names_gpu(spec: str | None) -> bool:
    """Whether a --plan_device value names a GPU (anything that is not a memory size)."""
    return bool(spec and spec.strip()) and parse_size(spec) is None


def plan_target(spec: str | None, detected: list | tuple = (), gpu_table: str | None = None,
                option: str = "--plan_device") -> PlanTarget:
    """The target `spec` names (a size or a GPU of the table merged with `gpu_table`), else the first GPU
    `detected` (nvidia-smi's GpuInfo: its own memory, the table's compute capability when it knows the kind).
    InputError naming `option` for a name the table lacks, a GPU without a memory figure, or a list of several
    devices (one_device)."""
    spec = one_device(spec, option)
    table = load_table(gpu_table) if gpu_table else None  # a table given is read (checked) even beside a size
    if spec:
        size = parse_size(spec)
        if size is not None:
            return PlanTarget(capacity=size, table=table)
        table = table or load_table(gpu_table)
        gpu = table.lookup(spec)
        if gpu is None:
            raise InputError([InputProblem("command line", option, f"{spec!r} is not a size (e.g. 80GiB) nor a GPU "
                                           "of the GPU table", f"a size such as 80GiB, one of "
                                           f"{', '.join(table.names())}, or add the GPU with --gpu_table FILE")])
        capacity = gpu.capacity_bytes()
        if capacity is None:
            raise InputError([InputProblem("command line", option, f"the GPU table gives no memory for {gpu.name}",
                                           "add memory_mib to its entry in a --gpu_table file")])
        return PlanTarget(capacity, gpu.name, gpu.arch(), gpu, named=True, table=table)
    if detected:
        here = detected[0]
        table = table or load_table(gpu_table)
        gpu = table.lookup(here.name)
        mib = here.memory_total_mib
        capacity = int(mib * 1024**2) if mib and mib == mib else (gpu.capacity_bytes() if gpu else None)
        return PlanTarget(capacity, here.name, gpu.arch() if gpu else None, gpu, table=table)
    return PlanTarget()
