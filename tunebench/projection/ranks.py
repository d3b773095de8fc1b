"""N GPUs on paper: per-rank memory from the fake step for N ranks, step time from the single-GPU phases plus the
collectives' bytes over the table's link model, with the overlap assumption stated.

Collective payloads per optimizer step (what tests/scanner/test_collectives.py measured on gloo: DDP all-reduces exactly
the gradient bytes; FSDP2 with reshard_after_forward all-gathers every parameter twice and reduce-scatters the
gradients once):
  * DDP: all-reduce of the trainable gradients (their dtype), once per optimizer step (accumulation steps skip
    the sync), in 25 MiB buckets;
  * FSDP2: per micro-batch, an all-gather of all parameters in forward and again in backward, a reduce-scatter of
    the trainable gradients; one collective per decoder layer (+1 for the root).
Ring collectives over N GPUs: all-reduce moves 2(N−1)/N of the payload per GPU, all-gather and reduce-scatter
(N−1)/N, at the table's bus bandwidth (NCCL's busbw), plus the link latency per ring step and collective.
No overlap assumed: the collectives' ring time is added to the step whole. DDP's buckets are launched during
backward and FSDP2 prefetches a layer ahead, but on 2 H200s (docs/evidence/projection-ngpu-h200.md) the step grew
by more than the ring time (DDP 10.7 ms for 9.0 ms of all-reduce, FSDP2 16.5 ms for 11.7 ms): NCCL's kernels take
SMs and memory bandwidth from the compute they run beside, so overlap hid nothing measurable. (The earlier model,
which hid all but the last bucket or layer, projected 2-GPU steps 6.5 % and 13 % too fast there.)
Per-rank work: the measured micro-batch per GPU (data parallel), so forward and backward stay; FSDP steps the
optimizer on 1/N of the parameters (optimizer and clip phases ÷ N).
FSDP1 moves what FSDP2 moves with full sharding; with grad-op sharding (ZeRO-2) a layer's parameters stay gathered
from forward to backward, so they are gathered once per micro-batch.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

logger = logging.getLogger(__name__)

DDP_BUCKET = 25 * 1024**2
PARALLELISMS = ("ddp", "fsdp2", "fsdp1-full_shard", "fsdp1-shard_grad_op")
SHARDED = ("fsdp2", "fsdp1-full_shard", "fsdp1-shard_grad_op")


@dataclass(frozen=True)
class Collective:
    kind: str  # all_reduce, all_gather, reduce_scatter
    payload: float  # bytes of the full logical tensor(s), per step
    count: int  # collectives per step (latency terms)


@dataclass(frozen=True)
class Link:
    bandwidth: float  # B/s, NCCL bus bandwidth
    latency: float  # s per ring step


def collectives(parallelism: str, n: int, param_bytes: float, grad_bytes: float, layers: int,
                micro_batches: int) -> list[Collective]:
    """The collectives of one optimizer step per rank (payloads as the scanner counts them)."""
    if n <= 1:
        return []
    if parallelism == "ddp":
        return [Collective("all_reduce", grad_bytes, max(1, math.ceil(grad_bytes / DDP_BUCKET)))]
    units = layers + 1
    # all-gathers in forward and (but for grad-op sharding) again in backward, reduce-scatters in backward
    gathers = 1 if parallelism == "fsdp1-shard_grad_op" else 2
    return [*[Collective("all_gather", param_bytes * micro_batches, units * micro_batches)] * gathers,
            Collective("reduce_scatter", grad_bytes * micro_batches, units * micro_batches)]


def seconds(c: Collective, n: int, link: Link) -> float:
    """Ring time of one step's collectives of a kind."""
    share, steps = (2 * (n - 1) / n, 2 * (n - 1)) if c.kind == "all_reduce" else ((n - 1) / n, n - 1)
    return c.payload * share / link.bandwidth + c.count * steps * link.latency


def exposed(comms: list[Collective], n: int, link: Link) -> float:
    """Communication time the step pays: every collective's ring time (no overlap: the module's docstring)."""
    return sum(seconds(c, n, link) for c in comms)


def rank_phases(phases: dict[str, float], parallelism: str, n: int, measured_on: int = 1) -> dict[str, float]:
    """Per-rank phase times on `n` GPUs from phases measured on `measured_on`: data parallel keeps forward and
    backward; FSDP shards the optimizer step and clipping (1/GPUs of the parameters each)."""
    out = dict(phases)
    if parallelism in SHARDED:
        for phase in ("optimizer", "clip"):
            out[phase] = phases.get(phase, 0.0) * max(1, measured_on) / max(1, n)
    return out


def link_of(gpu, n: int) -> tuple[Link | None, str]:
    """The link N GPUs talk over: the host's GPU link up to 8 GPUs, the network beyond (when the table has it)."""
    latency = (gpu.value("link_latency_us") or 0.0) * 1e-6
    if n <= 8 and gpu.value("gpu_link_gb_per_s"):
        return Link(gpu.value("gpu_link_gb_per_s") * 1e9, latency), f"GPU link {gpu.cited('gpu_link_gb_per_s')}"
    if n > 8 and gpu.value("network_gb_per_s"):
        return Link(gpu.value("network_gb_per_s") * 1e9, latency), f"network {gpu.cited('network_gb_per_s')}"
    return None, f"no {'network' if n > 8 else 'GPU link'} figure for {gpu.name} in the GPU table"
