"""tunebench's one GPU table: each GPU's memory, compute capability and rates with their sources (gpus.yaml),
merged with a user's YAML. `plan` (capacity, attention kernels), the fit map, the projection and `tune` resolve a
GPU name through `GpuTable.lookup`, so a name means the same entry everywhere (planning.gpu_target).

A user file has the shipped form (`gpus:` a list of entries with `name`, optional `match` substrings and figures,
each a number or `{value, source}`). An entry whose name is already in the table overrides the figures it gives;
a new entry needs at least `bf16_tflops` and `memory_tb_per_s`. Every problem of the file is reported at once
(InputError: file, key, fix; exit 2), nothing is projected.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tunebench.bounds import Range
from tunebench.errors import InputError, InputProblem
from tunebench.user_files import read_yaml, shown

logger = logging.getLogger(__name__)

SHIPPED = Path(__file__).with_name("gpus.yaml")
POSITIVE = Range(0, 1e7, low_open=True)
FIGURES: dict[str, Range] = {
    "bf16_tflops": POSITIVE, "memory_tb_per_s": POSITIVE, "memory_mib": POSITIVE, "memory_gib": POSITIVE,
    "compute_capability": Range(1, 100), "power_w": POSITIVE,
    "gpu_link_gb_per_s": POSITIVE, "host_link_gb_per_s": POSITIVE, "network_gb_per_s": POSITIVE,
    "link_latency_us": Range(0, 1e7), "kernel_floor_us": Range(0, 1e7), "host_launch_us": POSITIVE,
    "unrolled_tb_per_s": POSITIVE, "strided_tb_per_s": POSITIVE, "host_cpu_op_us": POSITIVE,
    "host_step_us": POSITIVE,
    "usd_per_hour": Range(0, 1e6),  # a user's price of one GPU hour (never shipped)
}
REQUIRED = ("bf16_tflops", "memory_tb_per_s")
ENTRY_KEYS = {"name", "match", *FIGURES}
# A user's table lists the GPUs they project to: a few, or a few hundred; its file is read within these bounds.
MAX_BYTES = 256 * 2**10
MAX_VALUES = 50_000
MAX_ENTRIES = 1_000
MAX_PROBLEMS = 20  # reported at once; past that the file is not a GPU table
FIX = ("see tunebench/hardware/gpus.yaml for the form: gpus: [{name: ..., bf16_tflops: {value: 989, source: "
       "...}}]")


@dataclass(frozen=True)
class Gpu:
    """One GPU kind: figures (None where unknown) and where each came from."""

    name: str
    match: tuple[str, ...] = ()
    figures: dict[str, float | None] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)

    def value(self, figure: str) -> float | None:
        return self.figures.get(figure)

    def cited(self, figure: str) -> str:
        """`value (source)` for notes."""
        return f"{self.figures.get(figure)} ({self.sources.get(figure, 'no source')})"

    def capacity_bytes(self) -> int | None:
        """One GPU's memory in bytes: `memory_mib` (nvidia-smi's figure), else a user file's `memory_gib`."""
        if self.figures.get("memory_mib"):
            return int(self.figures["memory_mib"] * 1024**2)
        return int(self.figures["memory_gib"] * 1024**3) if self.figures.get("memory_gib") else None

    def arch(self) -> int | None:
        """The compute capability as torch's SDPA rules compare it (9.0 -> 90), None when the table has none."""
        capability = self.figures.get("compute_capability")
        return round(capability * 10) if capability else None

    def match_length(self, name: str) -> int:
        """How specifically `name` matches: the longest `match` fragment it holds (a fragment given alone, spaces
        stripped, counts too); 0 when none does."""
        text = name.strip().lower()
        return max((len(m) for m in self.match if m.lower() in text or m.strip().lower() == text), default=0)

    def matches(self, name: str) -> bool:
        return name.strip().lower() == self.name.lower() or self.match_length(name) > 0


@dataclass(frozen=True)
class GpuTable:
    gpus: tuple[Gpu, ...]
    user_entries: int = 0  # the first entries are a user's file's (they win a lookup)

    def lookup(self, name: str | None) -> Gpu | None:
        """The GPU an nvidia-smi / torch device name (or a table name) denotes: an exact name first, then the entry
        whose longest `match` fragment the name holds ("H100 PCIe" before "H100"), a user's entries before the
        shipped ones."""
        if not name:
            return None
        exact = [g for g in self.gpus if g.name.lower() == name.strip().lower()]
        if exact:
            return exact[0]
        for part in (self.gpus[:self.user_entries], self.gpus[self.user_entries:]):
            best = max(part, key=lambda g: g.match_length(name), default=None)
            if best is not None and best.match_length(name) > 0:
                return best
        return None

    def names(self) -> list[str]:
        return [g.name for g in self.gpus]


def _figure(raw: Any, key: str, where: str, source: str, problems: list[InputProblem]) -> tuple[float | None, str]:
    """(value, source) of one figure given as a number, null, or {value, source}; `key` is its dotted path in
    the file `where`."""
    cited = source
    if isinstance(raw, dict):
        unknown = set(raw) - {"value", "source"}
        if unknown or "value" not in raw:
            problems.append(
                InputProblem(
                    where,
                    key,
                    f"expected {{value, source}}, got keys {shown(sorted(map(str, raw)))}",
                    "e.g. {value: 989.4, source: 'datasheet'}",
                )
            )
            return None, cited
        if raw.get("source") is not None:
            if not isinstance(raw["source"], str):
                problems.append(InputProblem(where, f"{key}.source", "expected text", "a short citation"))
                return None, cited
            cited = raw["source"]
        raw = raw["value"]
    if raw is None:
        return None, cited
    bounds = FIGURES[key.rpartition(".")[2]]
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or bounds.problem(raw):
        problems.append(InputProblem(where, key, f"{shown(raw)} is not a number {bounds.describe()}",
                                     "give a plain number in the unit of the figure's name"))
        return None, cited
    return float(raw), cited


def _entry(raw: Any, index: int, path: str, problems: list[InputProblem]) -> Gpu | None:
    where = f"gpus[{index}]"
    if not isinstance(raw, dict):
        problems.append(InputProblem(path, where, f"expected a mapping, got {type(raw).__name__}", FIX))
        return None
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        problems.append(InputProblem(path, f"{where}.name", f"expected a GPU name, got {shown(name)}",
                                     "the name nvidia-smi shows, e.g. 'NVIDIA H100 80GB HBM3'"))
        return None
    for key in sorted(set(map(str, raw)) - ENTRY_KEYS)[:5]:
        problems.append(InputProblem(path, f"{where}.{key[:60]}", "unknown figure",
                                     f"one of {', '.join(sorted(FIGURES))}"))
    match = raw.get("match", [])
    if not isinstance(match, list) or not all(isinstance(m, str) and m.strip() for m in match):
        problems.append(InputProblem(path, f"{where}.match", f"expected a list of name fragments, got {shown(match)}",
                                     "e.g. match: ['H100 80GB HBM3']"))
        match = []
    figures, sources = {}, {}
    for key in FIGURES:
        if key in raw:
            figures[key], sources[key] = _figure(raw[key], f"{where}.{key}", path, f"your file {path}", problems)
    return Gpu(name.strip(), tuple(match), figures, sources)


def read_file(path: str | Path) -> list[Gpu]:
    """The entries of one table file; InputError with every problem found (at most MAX_PROBLEMS). The file is
    bounded before it is parsed (tunebench.user_files: MAX_BYTES on disk, MAX_VALUES once its aliases expand)."""
    path = str(path)
    problems: list[InputProblem] = []
    data = read_yaml(path, problems, max_bytes=MAX_BYTES, max_values=MAX_VALUES, what="GPU table")
    if problems:
        raise InputError([InputProblem(p.source, p.key if p.key != "-" else "--gpu_table", p.message,
                                       p.fix if "YAML" in p.message else f"{p.fix}; {FIX}") for p in problems])
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), list) or set(data) - {"gpus"}:
        raise InputError([InputProblem(path, "gpus", "expected a mapping with one key, `gpus`, holding a list", FIX)])
    if len(data["gpus"]) > MAX_ENTRIES:
        raise InputError([InputProblem(path, "gpus", f"{len(data['gpus']):,} entries, more than the {MAX_ENTRIES:,} "
                                       "a GPU table holds", "list the GPUs you project to")])
    entries = [_entry(raw, i, path, problems) for i, raw in enumerate(data["gpus"])]
    names = [g.name.lower() for g in entries if g is not None]
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append(InputProblem(path, "gpus", f"{shown(name)} is listed twice", "one entry per GPU"))
    if problems:
        raise InputError(problems[:MAX_PROBLEMS])
    return [g for g in entries if g is not None]


def merged(base: list[Gpu], user: list[Gpu], path: str) -> list[Gpu]:
    """User entries first (they win a lookup); a name already in `base` overrides figure by figure."""
    by_name = {g.name.lower(): g for g in base}
    problems, out = [], []
    for entry in user:
        known = by_name.pop(entry.name.lower(), None)
        if known is not None:
            entry = Gpu(known.name, entry.match or known.match, {**known.figures, **entry.figures},
                        {**known.sources, **entry.sources})
        missing = [k for k in REQUIRED if entry.figures.get(k) is None]
        if missing:
            problems.append(InputProblem(path, entry.name, f"no {' or '.join(missing)}",
                                         "give both the matmul rate and the memory bandwidth"))
        out.append(entry)
    if problems:
        raise InputError(problems)
    return out + [g for g in base if g.name.lower() in by_name]


def load_table(user_path: str | Path | None = None) -> GpuTable:
    """The shipped table, with a user's YAML merged in when given (InputError naming --gpu_table for a value that
    is no path: the API's callers hand anything)."""
    if user_path is not None and not isinstance(user_path, (str, os.PathLike)):
        raise InputError([InputProblem("command line", "--gpu_table", f"expected the path of a YAML file, got "
                                       f"{type(user_path).__name__} {shown(user_path)}",
                                       "e.g. --gpu_table my-gpus.yaml")])
    base = read_file(SHIPPED)
    if not user_path:
        return GpuTable(tuple(base))
    user = read_file(user_path)
    return GpuTable(tuple(merged(base, user, str(user_path))), user_entries=len(user))


def resolve(table: GpuTable, name: str | None, option: str) -> Gpu:
    """The table's entry for `name`; InputError naming the option and the known GPUs otherwise."""
    gpu = table.lookup(name)
    if gpu is None:
        raise InputError([InputProblem("command line", option, f"{name!r} is not in the GPU table",
                                       f"one of {', '.join(table.names())}, or add it with --gpu_table FILE")])
    return gpu
