"""GPU identity via nvidia-smi and the mapping of CUDA_VISIBLE_DEVICES entries to those GPUs."""

from __future__ import annotations

import logging
import math
import re
import shutil
import subprocess
from dataclasses import dataclass

logger = logging.getLogger(__name__)

# `name` goes last so that a GPU name containing a comma cannot shift the other fields.
IDENTITY_FIELDS: tuple[str, ...] = ("index", "uuid", "pci.bus_id", "memory.total", "driver_version", "name")
QUERY_TIMEOUT_S = 10.0

@dataclass(frozen=True)
class GpuInfo:
    """One physical GPU as nvidia-smi reports it."""

    index: int  # nvidia-smi's index (NVML enumeration order; not guaranteed to be CUDA's order)
    uuid: str  # "GPU-xxxxxxxx-...", stable across reboots and orderings
    pci_bus_id: str  # "00000000:07:00.0"
    name: str
    memory_total_mib: float
    driver_version: str
    mig_uuids: tuple[str, ...] = ()  # MIG instances carved out of this GPU (from `nvidia-smi -L`)


def nvidia_smi_path() -> str | None:
    """The nvidia-smi executable on PATH, or None."""
    return shutil.which("nvidia-smi")


def run_nvidia_smi(args: list[str], timeout_s: float = QUERY_TIMEOUT_S) -> str | None:
    """Run a one-shot nvidia-smi command; its stdout, or None (warning logged) if missing/failing/hanging."""
    exe = nvidia_smi_path()
    if exe is None:
        logger.warning("nvidia-smi not found on PATH: GPU memory/power columns will be empty")
        return None
    try:
        # subprocess.run kills the child on timeout and on any exception (KeyboardInterrupt included).
        proc = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        logger.warning("nvidia-smi %s hung for more than %.0f s and was killed", " ".join(args), timeout_s)
        return None
    except OSError as exc:
        logger.warning("nvidia-smi could not be started: %s", exc)
        return None
    if proc.returncode != 0:
        message = (proc.stderr or proc.stdout).strip().splitlines()
        logger.warning(
            "nvidia-smi %s failed (exit %d): %s",
            " ".join(args),
            proc.returncode,
            message[-1] if message else "",
        )
        return None
    return proc.stdout


def float_or_nan(value: str) -> float:
    # nvidia-smi writes "[N/A]", "[Not Supported]", "[Unknown Error]" for values it cannot read.
    try:
        return float(value)
    except ValueError:
        return math.nan


_MIG_LINE = re.compile(r"^\s+MIG .*\(UUID: (MIG-[^)\s]+)\)")
_GPU_LINE = re.compile(r"^GPU \d+: .*\(UUID: (GPU-[^)\s]+)\)")


def _mig_uuids_by_gpu(listing: str) -> dict[str, tuple[str, ...]]:
    """Parse `nvidia-smi -L`: MIG lines are indented under the GPU that hosts them."""
    result: dict[str, list[str]] = {}
    current: str | None = None
    for line in listing.splitlines():
        if match := _GPU_LINE.match(line):
            current = match.group(1)
            result[current] = []
        elif (match := _MIG_LINE.match(line)) and current is not None:
            result[current].append(match.group(1))
    return {uuid: tuple(migs) for uuid, migs in result.items()}


def query_gpus(timeout_s: float = QUERY_TIMEOUT_S) -> list[GpuInfo]:
    """All GPUs nvidia-smi sees; [] (warning logged) if nvidia-smi is missing or fails."""
    out = run_nvidia_smi(
        [f"--query-gpu={','.join(IDENTITY_FIELDS)}", "--format=csv,noheader,nounits"], timeout_s=timeout_s
    )
    if out is None:
        return []
    listing = run_nvidia_smi(["-L"], timeout_s=timeout_s) or ""
    migs = _mig_uuids_by_gpu(listing)
    gpus = []
    for text_line in filter(str.strip, out.splitlines()):
        # Split at most 5 times: whatever follows the 5th comma is the name, commas included.
        row = [field.strip() for field in text_line.split(",", len(IDENTITY_FIELDS) - 1)]
        if len(row) != len(IDENTITY_FIELDS):
            logger.warning("ignoring unparseable nvidia-smi identity line: %s", text_line)
            continue
        index, uuid, bus_id, mem_total, driver, name = row
        try:
            gpus.append(
                GpuInfo(
                    index=int(index),
                    uuid=uuid,
                    pci_bus_id=bus_id,
                    name=name,
                    memory_total_mib=float_or_nan(mem_total),
                    driver_version=driver,
                    mig_uuids=migs.get(uuid, ()),
                )
            )
        except ValueError:
            logger.warning("ignoring unparseable nvidia-smi identity line: %s", text_line)
    return gpus


def _pci_sort_key(bus_id: str) -> tuple[int, ...]:
    # "00000000:07:00.0" → (domain, bus, device, function), compared numerically (hex).
    parts = re.split(r"[:.]", bus_id)
    try:
        return tuple(int(p, 16) for p in parts)
    except ValueError:
        return (1 << 62,)


def _match_uuid_entry(entry: str, gpus: list[GpuInfo]) -> GpuInfo:
    if entry.startswith("MIG-GPU-"):  # pre-R470 form "MIG-GPU-<gpu uuid>/<gi>/<ci>"
        entry = entry[len("MIG-") :].split("/")[0]
    if entry.startswith("MIG-"):
        hosts = [g for g in gpus if entry in g.mig_uuids]
        if len(hosts) != 1:
            raise ValueError(
                f"CUDA_VISIBLE_DEVICES entry {entry!r} is not a MIG instance listed by `nvidia-smi -L`; "
                "use a UUID exactly as `nvidia-smi -L` prints it"
            )
        logger.warning(
            "%s is a MIG instance: nvidia-smi reports memory/power of the whole GPU %s (all its instances)",
            entry,
            hosts[0].uuid,
        )
        return hosts[0]
    # CUDA accepts any unique prefix of a GPU UUID.
    matches = [g for g in gpus if g.uuid.startswith(entry)]
    if len(matches) != 1:
        found = "matches several GPUs" if matches else "matches no GPU"
        raise ValueError(
            f"CUDA_VISIBLE_DEVICES entry {entry!r} {found} of {[g.uuid for g in gpus]}; "
            "set it to GPU indices or full UUIDs from `nvidia-smi -L`"
        )
    return matches[0]


def resolve_visible_gpus(
    cuda_visible_devices: str | None,
    gpus: list[GpuInfo],
    *,
    cuda_device_order: str | None = "PCI_BUS_ID",
) -> list[GpuInfo]:
    """Map a CUDA_VISIBLE_DEVICES value to nvidia-smi GPUs, in CUDA device order (cuda:0, cuda:1, ...).

    Why PCI order: integer entries are CUDA ordinals, and CUDA's default order (FASTEST_FIRST) may differ
    from nvidia-smi's. With CUDA_DEVICE_ORDER=PCI_BUS_ID (which the harness sets for every experiment) CUDA
    numbers GPUs by ascending PCI bus id, so we sort nvidia-smi's GPUs by bus id rather than trusting
    nvidia-smi's own index (NVML documents its enumeration order as not guaranteed). UUID entries
    ("GPU-...", unique prefixes, "MIG-...") are matched directly and need no ordering assumption.
    Returns [] when `gpus` is empty (nvidia-smi unavailable) or CUDA_VISIBLE_DEVICES is "".
    """
    if not gpus:
        return []
    by_pci = sorted(gpus, key=lambda g: _pci_sort_key(g.pci_bus_id))
    if cuda_visible_devices is None:
        return by_pci
    selected: list[GpuInfo] = []
    for raw in cuda_visible_devices.split(","):
        entry = raw.strip()
        if not entry:
            continue
        if re.fullmatch(r"-?\d+", entry):
            ordinal = int(entry)
            if ordinal < 0:  # CUDA semantics: a negative ordinal hides it and every later entry
                break
            if cuda_device_order not in (None, "PCI_BUS_ID") and len(gpus) > 1:
                raise ValueError(
                    f"CUDA_VISIBLE_DEVICES={cuda_visible_devices!r} uses indices under "
                    f"CUDA_DEVICE_ORDER={cuda_device_order}, whose order nvidia-smi cannot reproduce; "
                    "set CUDA_DEVICE_ORDER=PCI_BUS_ID or use GPU UUIDs"
                )
            if ordinal >= len(by_pci):
                raise ValueError(
                    f"CUDA_VISIBLE_DEVICES entry {entry!r} is out of range: nvidia-smi lists {len(by_pci)} "
                    f"GPU(s) (0..{len(by_pci) - 1})"
                )
            gpu = by_pci[ordinal]
        else:
            gpu = _match_uuid_entry(entry, gpus)
        if gpu in selected:
            raise ValueError(
                f"CUDA_VISIBLE_DEVICES={cuda_visible_devices!r} names GPU {gpu.uuid} twice; list each GPU once"
            )
        selected.append(gpu)
    return selected


def usable_gpus(gpus: list[GpuInfo], cuda_visible_devices: str | None,
                cuda_device_order: str | None) -> tuple[list[GpuInfo], list[int | str]]:
    """The GPUs a harness started under `cuda_visible_devices` may hand out, and the CUDA_VISIBLE_DEVICES entry
    each child gets for it (its PCI-order ordinal: children run under CUDA_DEVICE_ORDER=PCI_BUS_ID; a MIG
    instance keeps its UUID, which no ordinal names). Unset: every GPU nvidia-smi lists. A user who shares a
    node with `CUDA_VISIBLE_DEVICES=2,3` means those two; the harness must not start work on the others.

    Integer entries are CUDA ordinals in CUDA's order: PCI order, or CUDA's default (fastest first) on a node of
    one GPU model, where its ties fall back to PCI order; ValueError where nvidia-smi cannot tell the order."""
    by_pci = sorted(gpus, key=lambda g: _pci_sort_key(g.pci_bus_id))
    if cuda_visible_devices is None:
        return by_pci, list(range(len(by_pci)))
    same_model = len({g.name for g in gpus}) <= 1
    unset_or_default = cuda_device_order in (None, "", "FASTEST_FIRST")
    order = "PCI_BUS_ID" if unset_or_default and same_model else (cuda_device_order or "FASTEST_FIRST")
    chosen = resolve_visible_gpus(cuda_visible_devices, gpus, cuda_device_order=order)
    entries = [e.strip() for e in cuda_visible_devices.split(",") if e.strip()][:len(chosen)]
    slots: list[int | str] = [entry if entry.startswith("MIG-") else by_pci.index(gpu)
                              for entry, gpu in zip(entries, chosen, strict=True)]
    return chosen, slots
