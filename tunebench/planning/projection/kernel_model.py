"""How long each measured kernel would take on another GPU: compute-bound work scales with the matmul rate,
bandwidth-bound work with the memory bandwidth, host copies with the host link, and a kernel's fixed cost stays.

A kernel of d seconds is split into its fixed cost f = min(d, the source's kernel floor), which scales only with
the floors' ratio, and its work d − f, which scales with the rate that binds it:
  * matmuls (class `gemm`) whose operator's shapes are known: their own roofline. FLOPs = 2·M·N·K(·batch), bytes =
    the two inputs and the output; the work scales by max(FLOPs/F', bytes/B') ÷ max(FLOPs/F, bytes/B), so a thin
    matmul (LoRA's rank-16 products) scales with bandwidth and a square one with the matmul rate;
  * matmuls without shapes and fused attention: the matmul rate;
  * optimizer, norm, reduction, copy, elementwise and unknown (`other`) kernels: the memory bandwidth;
  * host<->device copies (`transfer`): the host link; collectives (`comm`): unchanged here (ranks.py models links).
The only GPU-specific inputs are the table's figures; no factor is fitted to measurements.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from tunebench.planning.projection.gpu_table import Gpu

logger = logging.getLogger(__name__)

COMPUTE_CLASSES = ("gemm", "attention")
BANDWIDTH_CLASSES = ("optimizer", "norm", "reduction", "copy", "elementwise", "other")
_ELEMENT = {"c10::bfloat16": 2, "c10::half": 2, "bfloat16": 2, "half": 2, "float": 4, "float32": 4, "double": 8,
            "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1, "signed char": 1, "unsigned char": 1, "int": 4, "long": 8}
_MATMULS = {"aten::mm": 0, "aten::addmm": 1, "aten::bmm": 0, "aten::baddbmm": 1, "aten::_scaled_mm": 0}


@dataclass(frozen=True)
class Rates:
    """A GPU's rates in SI units (FLOP/s, B/s, s)."""

    name: str
    flops: float
    bandwidth: float
    host_link: float | None = None
    floor: float = 0.0

    @classmethod
    def of(cls, gpu: Gpu) -> Rates:
        link = gpu.value("host_link_gb_per_s")
        return cls(gpu.name, gpu.value("bf16_tflops") * 1e12, gpu.value("memory_tb_per_s") * 1e12,
                   link * 1e9 if link else None, (gpu.value("kernel_floor_us") or 0.0) * 1e-6)


def matmul_work(op: str, dims_text: str, types_text: str) -> tuple[float, float] | None:
    """(FLOPs, bytes moved) of a matmul operator from its recorded input shapes and dtypes; None otherwise."""
    skip = _MATMULS.get(op)
    if skip is None or not dims_text:
        return None
    try:
        dims = json.loads(dims_text)
        types = json.loads(types_text) if types_text else []
        a, b = dims[skip], dims[skip + 1]
        element = _ELEMENT.get(str(types[skip]).lower(), 2) if len(types) > skip else 2
        if len(a) == 2 and len(b) == 2:
            (m, k), (_, n), batch = a, b, 1
        elif len(a) == 3 and len(b) == 3:
            (batch, m, k), (_, _, n) = a, b
        else:
            return None
    except (ValueError, TypeError, IndexError):
        return None
    flops = 2.0 * batch * m * n * k
    return flops, float(element * batch * (m * k + k * n + m * n))


def work_ratio(row: dict, src: Rates, dst: Rates) -> float:
    """Target ÷ source time of a kernel's work (its duration beyond the fixed cost)."""
    cls = row["class"]
    if cls == "gemm":
        work = matmul_work(row.get("op", ""), row.get("op_dims", ""), row.get("op_types", ""))
        if work is not None:
            flops, moved = work
            return max(flops / dst.flops, moved / dst.bandwidth) / max(flops / src.flops, moved / src.bandwidth)
    return class_ratio(cls, src, dst)


def class_ratio(cls: str, src: Rates, dst: Rates) -> float:
    """Target ÷ source time of a class's work when nothing but its class is known."""
    if cls in COMPUTE_CLASSES:
        return src.flops / dst.flops
    if cls == "transfer":
        return src.host_link / dst.host_link if src.host_link and dst.host_link else 1.0
    if cls in ("comm", "sync"):
        return 1.0
    return src.bandwidth / dst.bandwidth


def kernel_seconds(row: dict, src: Rates, dst: Rates) -> float:
    """The kernel's duration on the target (seconds)."""
    duration = row["dur_us"] * 1e-6
    fixed = min(duration, src.floor)
    floors = dst.floor / src.floor if src.floor > 0 else 1.0
    return fixed * floors + (duration - fixed) * work_ratio(row, src, dst)


def phase_kernel_times(rows: list[dict], src: Rates, dst: Rates, steps: int) -> dict[str, tuple[float, float]]:
    """phase → (summed kernel seconds on the source, on the target), per scanned step; GPU work only."""
    out: dict[str, list[float]] = {}
    for row in rows:
        if row["class"] == "sync":
            continue
        entry = out.setdefault(row["phase"], [0.0, 0.0])
        entry[0] += row["dur_us"] * 1e-6
        entry[1] += kernel_seconds(row, src, dst)
    return {phase: (a / steps, b / steps) for phase, (a, b) in out.items()}


def phase_kernel_times_from_columns(columns: dict, src: Rates, dst: Rates) -> dict[str, tuple[float, float]]:
    """The same from a row's `scan_kernel_<phase>_<class>_time` columns (no shapes, no fixed cost: coarser)."""
    from scanner.kernel_classes import CLASSES
    from scanner.kernel_split import PHASES

    out = {}
    for phase in PHASES:
        pairs = [(float(v), float(v) * class_ratio(cls, src, dst)) for cls in CLASSES
                 if _number(v := columns.get(f"scan_kernel_{phase}_{cls}_time"))]
        if pairs:
            out[phase] = (sum(a for a, _ in pairs), sum(b for _, b in pairs))
    return out


def _number(value) -> bool:
    try:
        return value is not None and float(value) == float(value)
    except (TypeError, ValueError):
        return False
