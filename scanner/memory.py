"""Exact byte accounting of tensor storages and the allocator/host memory readings the scanner reports."""

from __future__ import annotations

import logging
import os
import resource
import time
import weakref
from collections.abc import Iterable

import torch

logger = logging.getLogger(__name__)

# The CUDA caching allocator hands out blocks in multiples of 512 bytes (kMinBlockSize), so a storage of
# n bytes costs round_up(n, 512) of `memory_allocated`. Counting that way keeps the categories additive with
# the allocator's own figures; on CPU there is no such rounding and sizes are the raw nbytes.
CUDA_BLOCK_BYTES = 512


def allocation_bytes(nbytes: int, device: torch.device) -> int:
    """Bytes an allocation of `nbytes` costs on `device` (rounded to the CUDA block size there)."""
    if device.type == "cuda" and nbytes > 0:
        return -(-nbytes // CUDA_BLOCK_BYTES) * CUDA_BLOCK_BYTES
    return nbytes


def storage_key(t: torch.Tensor) -> tuple[int, int] | None:
    """(data_ptr, nbytes) of the storage backing `t`, or None for storage-less/empty tensors.

    A DTensor (FSDP2's sharded parameters, gradients and optimizer state) is a wrapper without storage of its
    own: what this rank holds is its local shard.
    """
    local = getattr(t, "_local_tensor", None)
    if isinstance(local, torch.Tensor):
        t = local
    try:
        st = t.untyped_storage()
        nbytes = st.nbytes()
        ptr = st.data_ptr()
    except (RuntimeError, NotImplementedError):  # tensor subclasses / meta tensors without a storage
        return None
    if nbytes == 0 or ptr == 0:
        return None
    return ptr, nbytes


def quantization_state_tensors(model: torch.nn.Module) -> list[torch.Tensor]:
    """Tensors a quantized weight keeps beside its packed data, which are no parameters or buffers of the model:
    bitsandbytes' 4-bit QuantState (block scales `absmax`, code book, and with double quantization the scales'
    own state) and 8-bit's per-row scales (`SCB`, which the first forward moves from the weight to its
    module's `state`). The weight is as large as its packed data plus these."""
    found: list[torch.Tensor] = []
    for module in model.modules():
        for p in module._parameters.values():
            state = getattr(p, "quant_state", None)
            while state is not None:
                found.extend(t for t in (getattr(state, n, None) for n in ("absmax", "code", "offset"))
                             if isinstance(t, torch.Tensor))
                state = getattr(state, "state2", None) if getattr(state, "nested", False) else None
            found.append(getattr(p, "SCB", None))
        found.append(getattr(getattr(module, "state", None), "SCB", None))
    return [t for t in found if isinstance(t, torch.Tensor)]


def parameter_bytes(model: torch.nn.Module, device: torch.device) -> tuple[int, int, set[int]]:
    """(parameter bytes, the part that is quantization state, their storages' pointers): a quantized weight is
    its packed data plus its quantization state, both the parameter's memory."""
    params, pointers = unique_storage_bytes(model.parameters(), device)
    state, state_pointers = unique_storage_bytes(quantization_state_tensors(model), device)
    return params + state, state, pointers | state_pointers


def unique_storage_bytes(tensors: Iterable[torch.Tensor], device: torch.device) -> tuple[int, set[int]]:
    """Sum of unique storage sizes of `tensors` living on `device`, and the set of their data pointers.

    Deduplication is by storage, so tied weights and views are counted once.
    """
    seen: set[int] = set()
    total = 0
    for t in tensors:
        if not isinstance(t, torch.Tensor) or t.device != device:
            continue
        key = storage_key(t)
        if key is None or key[0] in seen:
            continue
        seen.add(key[0])
        total += allocation_bytes(key[1], device)
    return total, seen


def optimizer_state_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Every tensor held in `optimizer.state` (moments, `step` counters, ...)."""
    out = []
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                out.append(value)
    return out


class LiveStorages:
    """Reference-counted set of storages currently held for backward, with their running byte total.

    Several holders (a saved-tensor slot, a checkpoint input) may pin the same storage; it is counted once and
    leaves the total when the last holder lets go.
    """

    def __init__(self, device: torch.device):
        self.device = device
        self._refs: dict[int, list[int]] = {}
        self.total = 0
        self.max_total = 0

    def add(self, ptr: int, nbytes: int) -> None:
        entry = self._refs.get(ptr)
        if entry is not None:
            entry[0] += 1
            return
        size = allocation_bytes(nbytes, self.device)
        self._refs[ptr] = [1, size]
        self.total += size
        if self.total > self.max_total:
            self.max_total = self.total

    def release(self, ptr: int) -> None:
        entry = self._refs.get(ptr)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] == 0:
            del self._refs[ptr]
            self.total -= entry[1]

    def __contains__(self, ptr: int) -> bool:
        return ptr in self._refs


class CudaAllocator:
    """Host-side reads of the CUDA caching allocator's bookkeeping; none of these synchronise the device."""

    def __init__(self, device: torch.device):
        self.device = device

    def stats(self) -> dict:
        return torch.cuda.memory_stats(self.device)

    def allocated(self) -> int:
        return torch.cuda.memory_allocated(self.device)

    def max_allocated(self) -> int:
        return torch.cuda.max_memory_allocated(self.device)

    def reset_peak(self) -> None:
        torch.cuda.reset_peak_memory_stats(self.device)


def device_memory_used(device: torch.device) -> int | None:
    """Device memory in use as the driver (NVML) sees it, or None where NVML is unavailable."""
    if device.type != "cuda":
        return None
    fn = getattr(torch.cuda, "device_memory_used", None)
    if fn is None:
        return None
    try:
        return int(fn(device))
    except Exception as exc:  # pynvml missing or driver query refused: report absent, never guess
        logger.debug("NVML memory query unavailable: %s", exc)
        return None


def host_rss() -> tuple[int | None, int | None]:
    """(current RSS, peak RSS) of this process in bytes, from /proc where available."""
    current = peak = None
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    current = int(line.split()[1]) * 1024
                elif line.startswith("VmHWM:"):
                    peak = int(line.split()[1]) * 1024
    except OSError:
        pass
    if peak is None:
        # ru_maxrss is KiB on Linux; this branch only runs where /proc is missing.
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return current, peak


def process_start_epoch() -> float | None:
    """Wall-clock (epoch seconds) at which this process started, from /proc; None where unknown.

    The start is in clock ticks since boot; /proc/uptime (10 ms resolution) turns it into "seconds ago".
    (The boot time in /proc/stat has whole-second resolution: up to a second off.)
    """
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            # The command name may contain spaces, so split after its closing parenthesis.
            fields = fh.read().rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])  # field 22 overall: starttime in clock ticks since boot
        with open("/proc/uptime", encoding="ascii") as fh:
            uptime = float(fh.read().split()[0])
        return time.time() - (uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


class _Detach:
    """A finalizer as a hook handle: `remove()` detaches it (a probe removes its handles together)."""

    __slots__ = ("finalizer",)

    def __init__(self, finalizer: weakref.finalize):
        self.finalizer = finalizer

    def remove(self) -> None:
        self.finalizer.detach()


def exclude_while_alive(model: torch.nn.Module, excluded: set[int], device: torch.device) -> list[_Detach]:
    """Parameters and buffers are excluded from the saved tensors by their storage's address, which is theirs only
    while they live: a weight freed during a scan (FSDP2's regathered ones, a module's replaced weight) hands its
    address back to the allocator, which may give it to an activation. Each address in `excluded` leaves it when
    the last of the model's parameters, buffers and quantization states on it dies (tied weights and views share
    one). Returns handles that stop this."""
    holders: dict[int, int] = {}
    handles = []
    for t in [*model.parameters(), *model.buffers(), *quantization_state_tensors(model)]:
        key = storage_key(t) if isinstance(t, torch.Tensor) and t.device == device else None
        if key is None or key[0] not in excluded:
            continue
        holders[key[0]] = holders.get(key[0], 0) + 1
        handles.append(_Detach(weakref.finalize(t, _last_holder_gone, excluded, holders, key[0])))
    return handles


def _last_holder_gone(excluded: set[int], holders: dict[int, int], ptr: int) -> None:
    holders[ptr] -= 1
    if holders[ptr] == 0:
        excluded.discard(ptr)
