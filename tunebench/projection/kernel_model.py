"""How long each measured kernel would take on another GPU: compute-bound work scales with the matmul rate,
bandwidth-bound work with the memory bandwidth, host copies with the host link, and a kernel's fixed cost stays.

A kernel of d seconds is split into its fixed cost f = min(d, the source's kernel floor), which scales only with
the floors' ratio, and its work d − f, which scales with the rate that binds it:
  * matmuls (class `gemm`) whose operator's shapes are known: their own roofline. FLOPs = 2·M·N·K(·batch), bytes =
    the two inputs and the output; the work scales by max(FLOPs/F', bytes/B') ÷ max(FLOPs/F, bytes/B), so a thin
    matmul (LoRA's rank-16 products) scales with bandwidth and a square one with the matmul rate;
  * matmuls without shapes and fused attention: the matmul rate;
  * elementwise, copy and norm kernels whose operator's shapes give the bytes they must stream: their roofline.
    At the source's roofline (bytes at their path's streaming rate ≥ ROOFLINE_FRACTION of the work) they scale
    with that rate, PyTorch's vectorized, unrolled (casts) and strided (broadcasts) paths each with its own
    measured rate; below it (bound by their own loads in flight, index arithmetic, tails) they keep their time
    unless the bytes at the target's rate take longer;
  * reductions, fused multi-tensor kernels (optimizer, foreach), a matmul's or attention's helper kernels and
    unknown (`other`) ones: the memory bandwidth;
  * host<->device copies (`transfer`): the host link; collectives (`comm`): unchanged here (ranks.py models links).
The only GPU-specific inputs are the table's figures; no factor is fitted to measurements.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass

from tunebench.hardware.gpus import Gpu

logger = logging.getLogger(__name__)

COMPUTE_CLASSES = ("gemm", "attention")
# A kernel whose bytes at its streaming rate take this share of its time or more is at the memory roofline
# (measured kernels at the roofline reach 0.9-1.05 of the copy's rate; those that are not, 0.25-0.75).
ROOFLINE_FRACTION = 0.85
BANDWIDTH_CLASSES = ("optimizer", "norm", "reduction", "copy", "elementwise", "other")
_ELEMENT = {"c10::bfloat16": 2, "c10::half": 2, "bfloat16": 2, "half": 2, "float": 4, "float32": 4, "double": 8,
            "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1, "signed char": 1, "unsigned char": 1, "int": 4, "long": 8}
_MATMULS = {"aten::mm": 0, "aten::addmm": 1, "aten::bmm": 0, "aten::baddbmm": 1, "aten::_scaled_mm": 0}


@dataclass(frozen=True)
class Rates:
    """A GPU's rates in SI units (FLOP/s, B/s, s). `unrolled`, `strided`: the streaming rates of PyTorch's
    unrolled (casts) and generic strided (broadcasts) elementwise kernels; None: the memory bandwidth."""

    name: str
    flops: float
    bandwidth: float
    host_link: float | None = None
    floor: float = 0.0
    unrolled: float | None = None
    strided: float | None = None

    @classmethod
    def of(cls, gpu: Gpu) -> Rates:
        link = gpu.value("host_link_gb_per_s")
        unrolled, strided = gpu.value("unrolled_tb_per_s"), gpu.value("strided_tb_per_s")
        return cls(gpu.name, gpu.value("bf16_tflops") * 1e12, gpu.value("memory_tb_per_s") * 1e12,
                   link * 1e9 if link else None, (gpu.value("kernel_floor_us") or 0.0) * 1e-6,
                   unrolled * 1e12 if unrolled else None, strided * 1e12 if strided else None)

    def streaming(self, kernel: str) -> float:
        """The rate a kernel of this name streams memory at: its elementwise path's, else the bandwidth."""
        if "unrolled_elementwise_kernel" in kernel:
            return min(self.unrolled or self.bandwidth, self.bandwidth)
        if "elementwise_kernel<" in kernel and "vectorized_elementwise_kernel" not in kernel:
            return min(self.strided or self.bandwidth, self.bandwidth)
        return self.bandwidth


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


def _tensors(dims_text: str, types_text: str) -> list[tuple[list[int], int]] | None:
    """(shape, bytes per element) of an operator's tensor arguments (scalars, lists and unknown dtypes left out)."""
    try:
        dims = json.loads(dims_text) if dims_text else []
        types = json.loads(types_text) if types_text else []
    except (ValueError, TypeError):
        return None
    out = []
    for shape, kind in zip(dims, types, strict=False):
        element = _ELEMENT.get(str(kind).lower())
        if element and isinstance(shape, list) and shape and all(isinstance(d, int) for d in shape):
            out.append((shape, element))
    return out


def streamed_bytes(op: str, dims_text: str, types_text: str) -> float | None:
    """Bytes an elementwise, copy or reduction operator must move at least: its tensor inputs read once, and its
    output (the broadcast of its inputs; the first input when in place; nothing for a reduction's small output)
    written once. None where the operator is not one whose kernel is that stream (a matmul's or attention's helper
    kernels, fused multi-tensor ops whose lists are not recorded)."""
    name = op.removeprefix("aten::")
    if not op.startswith("aten::") or name in _NOT_STREAMS or name.startswith(("_foreach", "_fused", "_cudnn",
                                                                                "_flash", "_efficient", "_scaled")):
        return None
    tensors = _tensors(dims_text, types_text)
    if not tensors:
        return None
    sizes = [math.prod(shape) * element for shape, element in tensors]
    if name == "fill_":
        return float(sizes[0])
    if name == "copy_":  # (destination, source): one read, one write
        return float(sum(sizes[:2]))
    if name.endswith("_"):
        return float(sum(sizes) + sizes[0])
    if name in _REDUCTIONS:
        return float(sum(sizes))
    rank = max(len(shape) for shape, _ in tensors)
    padded = [[1] * (rank - len(shape)) + shape for shape, _ in tensors]
    out = math.prod([max(column) for column in zip(*padded, strict=True)])
    return float(sum(sizes) + out * tensors[0][1])


_NOT_STREAMS = frozenset({*(m.removeprefix("aten::") for m in _MATMULS), "matmul", "linear", "embedding",
                          "embedding_dense_backward", "nll_loss_forward", "nll_loss_backward", "index", "gather",
                          "scatter", "index_put_", "nonzero", "_local_scalar_dense", "item", "cat", "stack"})
_REDUCTIONS = frozenset({"sum", "mean", "amax", "max", "min", "norm", "linalg_vector_norm", "var", "std",
                         "_log_softmax", "_softmax", "_log_softmax_backward_data", "_softmax_backward_data"})


def work_ratio(row: dict, src: Rates, dst: Rates, work: float | None = None) -> float:
    """Target ÷ source time of a kernel's work (its duration beyond the fixed cost, `work` seconds)."""
    cls = row["class"]
    if cls == "gemm":
        mm = matmul_work(row.get("op", ""), row.get("op_dims", ""), row.get("op_types", ""))
        if mm is not None:
            flops, moved = mm
            return max(flops / dst.flops, moved / dst.bandwidth) / max(flops / src.flops, moved / src.bandwidth)
    # A reduction may read its input more than once (a softmax: its maximum, its sum of exponentials, its output),
    # so its input's bytes are a lower bound that cannot show it below the roofline: it keeps its class's ratio.
    if cls in BANDWIDTH_CLASSES and cls != "reduction" and work:
        moved = streamed_bytes(row.get("op", ""), row.get("op_dims", ""), row.get("op_types", ""))
        if moved is not None:
            # Roofline: the kernel takes the longer of its bytes at its path's streaming rate and its other limits
            # (index arithmetic, tails, few blocks), which do not depend on the memory and scale with the SMs. A
            # kernel at the source's roofline scales with the streaming rates; one below it keeps its time unless
            # its bytes at the target's rate would take longer.
            kernel = row.get("name", "")
            rate_src, rate_dst = src.streaming(kernel), dst.streaming(kernel)
            if moved / rate_src >= ROOFLINE_FRACTION * work:
                return rate_src / rate_dst
            return max(moved / rate_dst, work * src.flops / dst.flops) / work
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
    return fixed * floors + (duration - fixed) * work_ratio(row, src, dst, duration - fixed)


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
