"""Collective accounting of the scanned step from a torch.profiler trace: count, bytes, dtype and time per kind.

Why the profiler: collectives issued from C++ (DDP's reducer, FSDP's hooks) never pass through Python, so
patching `torch.distributed` misses them; the profiler sees them on every backend. On NCCL each collective
emits a `record_param_comms` event carrying "Collective name", "In/Out msg nelems" and "dtype", and runs as
`nccl*` CUDA kernels (their durations are the communication time). On gloo there is no
`record_param_comms`; each collective is a `gloo:<op>` event with its input shapes and dtype, and its
duration is the gloo worker's time.

Bytes of a collective are its full logical payload: max(input, output) elements × element size. So an
all-gather counts the gathered tensor, a reduce-scatter the unsharded input, an all-reduce its tensor.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)

_KIND_ALIASES = {
    "allreduce": "all_reduce", "all_reduce": "all_reduce", "allreduce_coalesced": "all_reduce",
    "allgather": "all_gather", "all_gather": "all_gather", "_allgather_base": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather", "all_gather_into_tensor": "all_gather",
    "allgather_coalesced": "all_gather", "all_gather_single": "all_gather",
    "reduce_scatter": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter", "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "reduce_scatter_single": "reduce_scatter",
    "broadcast": "broadcast", "alltoall": "all_to_all", "all_to_all": "all_to_all", "alltoall_base": "all_to_all",
    "all_to_allv": "all_to_all", "send": "send", "recv": "recv", "recv_anysource": "recv", "reduce": "reduce",
    "gather": "gather", "scatter": "scatter", "barrier": "barrier",
}
_IGNORED = {"init", "wait", "split", "comm_split"}
_DTYPE_BYTES = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2, "bfloat16": 2, "c10::bfloat16": 2,
    "c10::half": 2, "int": 4, "int32": 4, "long": 8, "int64": 8, "long int": 8, "short": 2, "int16": 2,
    "char": 1, "int8": 1, "signed char": 1, "unsigned char": 1, "uint8": 1, "byte": 1, "bool": 1,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1,
}


def normalise_kind(name: str) -> str | None:
    key = name.strip().lower().removeprefix("nccl:").removeprefix("gloo:").removeprefix("c10d::").rstrip("_")
    if key in _IGNORED:
        return None
    return _KIND_ALIASES.get(key, key)


def dtype_bytes(dtype: str) -> int | None:
    text = str(dtype).strip().lower().removeprefix("torch.").removeprefix("at::")
    return _DTYPE_BYTES.get(text)


def _numel(dims: Any) -> int:
    if not isinstance(dims, list) or not dims:
        return 0
    if all(isinstance(d, int) for d in dims):
        total = 1
        for d in dims:
            total *= d
        return total
    return sum(_numel(d) for d in dims)  # a TensorList


def _merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def _exposed(comm: list[tuple[float, float]], compute: list[tuple[float, float]]) -> float:
    """Time during which communication kernels ran and no compute kernel did (not hidden by overlap)."""
    comm, compute = _merge(comm), _merge(compute)
    exposed, j = 0.0, 0
    for start, end in comm:
        covered = 0.0
        while j < len(compute) and compute[j][1] <= start:
            j += 1
        k = j
        while k < len(compute) and compute[k][0] < end:
            covered += min(end, compute[k][1]) - max(start, compute[k][0])
            k += 1
        exposed += (end - start) - covered
    return exposed


def summarise_trace(trace: dict[str, Any], world_size: int) -> dict[str, Any]:
    """Per-kind {count, bytes, dtypes, time_s} plus totals and exposed time, from a chrome trace dict."""
    events = [e for e in trace.get("traceEvents", []) if isinstance(e, dict) and e.get("ph") == "X"]
    param_comms = [e for e in events if e.get("name") == "record_param_comms"]
    kinds: dict[str, dict[str, Any]] = {}
    if param_comms:  # NCCL (and any backend that records param comms): exact sizes from the event args
        _add_param_comms(kinds, param_comms)
        source = "record_param_comms"
    else:  # gloo: one `gloo:<op>` event per collective, with input shapes and dtype
        _add_gloo(kinds, events, world_size)
        source = "gloo"
    comm_kernels, compute_kernels = [], []
    for event in events:
        if event.get("cat") != "kernel":
            continue
        span = (float(event["ts"]), float(event["ts"]) + float(event.get("dur", 0.0)))
        (comm_kernels if "nccl" in str(event.get("name", "")).lower() else compute_kernels).append(span)
    kernel_time = sum(b - a for a, b in comm_kernels) / 1e6
    if comm_kernels and source == "record_param_comms":
        _add_kernel_times(kinds, events)
    total_time = kernel_time if comm_kernels else sum(k["time_s"] for k in kinds.values())
    return {
        "source": source,
        "kinds": kinds,
        "count": sum(k["count"] for k in kinds.values()),
        "bytes": sum(k["bytes"] for k in kinds.values()),
        "time_s": total_time,
        "exposed_time_s": _exposed(comm_kernels, compute_kernels) / 1e6 if comm_kernels else None,
    }


def _add(kinds: dict[str, dict[str, Any]], kind: str | None, nbytes: int | None, dtype: str | None,
         seconds: float) -> None:
    """One collective into its kind's entry."""
    if kind is None:
        return
    entry = kinds.setdefault(kind, {"count": 0, "bytes": 0, "dtypes": [], "bytes_by_dtype": {}, "time_s": 0.0})
    entry["count"] += 1
    entry["bytes"] += int(nbytes or 0)
    if dtype and dtype not in entry["dtypes"]:
        entry["dtypes"].append(dtype)
    # Per dtype, so gradient traffic (e.g. bf16/fp32) stands apart from integer bookkeeping (DDP's
    # bucket/unused-parameter syncs, the Trainer's token-count gathers).
    entry["bytes_by_dtype"][dtype] = entry["bytes_by_dtype"].get(dtype, 0) + int(nbytes or 0)
    entry["time_s"] += seconds


def _add_param_comms(kinds: dict[str, dict[str, Any]], param_comms: list[dict]) -> None:
    for event in param_comms:
        args = event.get("args", {})
        kind = normalise_kind(str(args.get("Collective name", "")))
        dtype = str(args.get("dtype", ""))
        size = dtype_bytes(dtype)
        nelems = max(int(args.get("In msg nelems", 0) or 0), int(args.get("Out msg nelems", 0) or 0))
        _add(kinds, kind, nelems * size if size else None, dtype, 0.0)


def _add_gloo(kinds: dict[str, dict[str, Any]], events: list[dict], world_size: int) -> None:
    for event in events:
        name = str(event.get("name", ""))
        if not name.startswith("gloo:"):
            continue
        kind = normalise_kind(name)
        args = event.get("args", {})
        dims, types = args.get("Input Dims", []), args.get("Input type", [])
        dtype = str(types[0]) if types else ""
        size = dtype_bytes(dtype)
        numel = _numel(dims[:1]) if dims else 0
        if kind == "all_gather":
            numel *= world_size  # gloo records the local shard; the payload is the gathered tensor
        _add(kinds, kind, numel * size if size else None, dtype, float(event.get("dur", 0.0)) / 1e6)


_KERNEL_MARKERS = (("all_reduce", "allreduce"), ("all_gather", "allgather"), ("reduce_scatter", "reducescatter"),
                   ("broadcast", "broadcast"), ("send", "sendrecv"), ("all_to_all", "alltoall"))


def _add_kernel_times(kinds: dict[str, dict[str, Any]], events: list[dict]) -> None:
    """NCCL kernel time attributed to kinds by kernel name (e.g. ncclDevKernel_AllGather_RING_LL)."""
    for event in events:
        name = str(event.get("name", "")).lower()
        if event.get("cat") == "kernel" and "nccl" in name:
            for kind, marker in _KERNEL_MARKERS:
                if marker in name.replace("_", "") and kind in kinds:
                    kinds[kind]["time_s"] += float(event.get("dur", 0.0)) / 1e6
                    break


def flat_collectives(summary: dict[str, Any] | None, prefix: str = "scan_comm_") -> dict[str, Any]:
    """`scan_comm_*` columns: totals, exposed time, and count/bytes/time per kind."""
    if not summary:
        return {}
    out: dict[str, Any] = {
        prefix + "count": summary["count"], prefix + "bytes": summary["bytes"], prefix + "time": summary["time_s"],
        prefix + "exposed_time": summary["exposed_time_s"],
    }
    for kind, entry in sorted(summary["kinds"].items()):
        out[f"{prefix}{kind}_count"] = entry["count"]
        out[f"{prefix}{kind}_bytes"] = entry["bytes"]
        out[f"{prefix}{kind}_time"] = entry["time_s"]
        out[f"{prefix}{kind}_dtype"] = ",".join(entry["dtypes"])
    return out
