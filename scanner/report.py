"""The scan report: memory-scanned and timed steps, their summary, and its JSON/text/flat-metric views."""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import torch

from .collectives import flat_collectives
from .kernel_split import flat_kernels

# Fields of StepReport that are summarised (median + spread) and flattened into `scan_*` metrics.
TIME_FIELDS = ("time_step", "time_forward", "time_backward", "time_clip", "time_optimizer", "time_other")
MEM_FIELDS = (
    "mem_params",
    "mem_quant_state",
    "mem_buffers",
    "mem_grads",
    "mem_optimizer",
    "mem_activations",
    "mem_activations_max",
    "mem_temporaries",
    "mem_other",
    "mem_block_tails",
    "mem_peak_allocated",
    "mem_peak_reserved",
    "mem_fragmentation",
    "mem_alloc_retries",
    "mem_ooms",
    "mem_nvml_used",
    "mem_cuda_context",
    "mem_host_rss",
    "mem_host_peak_rss",
)
COUNT_FIELDS = ("micro_batches", "tokens", "nonpad_tokens")
RATE_FIELDS = ("tokens_per_second", "nonpad_tokens_per_second")


@dataclass
class TimeStepReport:
    """One timed step (phase hooks only). Times in seconds."""

    step: int
    micro_batches: int
    tokens: int
    nonpad_tokens: int
    time_step: float
    time_forward: float
    time_backward: float
    time_clip: float
    time_optimizer: float
    time_other: float

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.time_step if self.time_step > 0 else 0.0

    @property
    def nonpad_tokens_per_second(self) -> float:
        return self.nonpad_tokens / self.time_step if self.time_step > 0 else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["tokens_per_second"] = self.tokens_per_second
        d["nonpad_tokens_per_second"] = self.nonpad_tokens_per_second
        return d


@dataclass
class StepReport(TimeStepReport):
    """One memory-scanned optimizer step. Sizes in bytes; None = not measurable on this device."""

    mem_params: int
    mem_buffers: int
    mem_grads: int
    mem_optimizer: int
    mem_activations: int
    mem_activations_max: int
    mem_quant_state: int = 0  # the part of mem_params that is quantization state (block scales, code books)
    mem_temporaries: int | None = None
    mem_other: int | None = None
    mem_block_tails: int | None = None  # allocator blocks beyond their requests at the peak (scanner.block_layout)
    mem_peak_allocated: int | None = None
    mem_peak_reserved: int | None = None
    mem_fragmentation: int | None = None
    mem_alloc_retries: int | None = None
    mem_ooms: int | None = None
    mem_nvml_used: int | None = None
    mem_cuda_context: int | None = None
    mem_host_rss: int | None = None
    mem_host_peak_rss: int | None = None
    peak_phase: str | None = None
    phase_peaks: dict = field(default_factory=dict)
    boundaries: list = field(default_factory=list)


def phase_times(rec, clock) -> dict[str, Any]:
    """Step and phase seconds plus token counts of a closed StepRecord whose marks the device has passed."""

    def total(intervals) -> float:
        return sum(clock.elapsed(a, b) for a, b in intervals if a is not None and b is not None)

    step_t = clock.elapsed(rec.start, rec.end)
    fwd, bwd, opt = total(rec.forward), total(rec.backward), total(rec.optimizer)
    clip = 0.0
    if rec.clip_start is not None and rec.optimizer and rec.optimizer[0][0] is not None:
        clip = clock.elapsed(rec.clip_start, rec.optimizer[0][0])
    # "other" is defined as the remainder so the phases add up to the measured step time exactly.
    other = step_t - fwd - bwd - opt - clip
    nonpad = sum(int(x.item()) if isinstance(x, torch.Tensor) else int(x) for x in rec.nonpad)
    return dict(step=rec.step, micro_batches=rec.micro_batches, tokens=rec.tokens, nonpad_tokens=nonpad,
                time_step=step_t, time_forward=fwd, time_backward=bwd, time_clip=clip, time_optimizer=opt,
                time_other=other)


def build_time_report(rec, clock) -> TimeStepReport:
    return TimeStepReport(**phase_times(rec, clock))


def build_step_report(rec, probe, host_rss: tuple, nvml_used: int | None) -> StepReport:
    """Resolve a closed memory-scanned StepRecord (after the end-of-scan sync) into a StepReport."""
    on_cuda = probe.alloc is not None
    r = StepReport(
        **phase_times(rec, probe.clock),
        mem_params=probe.params_bytes,
        mem_buffers=probe.buffers_bytes,
        mem_quant_state=probe.quant_state_bytes,
        # On CUDA: the categories at the allocator's peak instant. On CPU there is no peak to locate, so
        # activations are their maximum over the step and grads/optimizer their full size.
        mem_grads=rec.peak_grads if on_cuda else max((b["grads"] for b in rec.boundaries), default=0),
        mem_optimizer=rec.peak_optimizer if on_cuda else rec.optimizer_bytes,
        mem_activations=rec.peak_activations if on_cuda else rec.activations_max,
        mem_activations_max=rec.activations_max,
        mem_host_rss=host_rss[0],
        mem_host_peak_rss=host_rss[1],
        peak_phase=rec.peak_phase,
        phase_peaks=dict(rec.phase_peaks),
        boundaries=list(rec.boundaries),
    )
    if on_cuda:
        r.mem_peak_allocated = rec.peak
        named = r.mem_params + r.mem_buffers + r.mem_grads + r.mem_optimizer + r.mem_activations
        # Block tails are allocated bytes no tensor owns (scanner.block_layout): their own figure, not a
        # category's. "other" (held since before the step) is capped by what the peak leaves, so that
        # temporaries, the step's transient rest, never goes negative should some of it be freed before the peak.
        r.mem_block_tails = min(rec.peak_tails, max(0, rec.peak - named))
        r.mem_other = min(
            max(0, (rec.other_start or 0) - rec.start_tails), max(0, rec.peak - named - r.mem_block_tails)
        )
        r.mem_temporaries = rec.peak - named - r.mem_other - r.mem_block_tails
        r.mem_peak_reserved = rec.peak_reserved
        r.mem_fragmentation = rec.peak_reserved - rec.peak
        s0, s1 = rec.stats_start, rec.stats_end
        if s0 is not None and s1 is not None:
            r.mem_alloc_retries = s1.get("num_alloc_retries", 0) - s0.get("num_alloc_retries", 0)
            r.mem_ooms = s1.get("num_ooms", 0) - s0.get("num_ooms", 0)
            reserved_now = s1["reserved_bytes"]["all"]["current"]
            if nvml_used is not None:
                r.mem_nvml_used = nvml_used
                r.mem_cuda_context = nvml_used - reserved_now
    return r


@dataclass
class ScanReport:
    """All scanned steps of one training run on one rank, plus run-level timings."""

    steps: list[StepReport]
    rank: int = 0
    world_size: int = 1
    device: str = "cpu"
    init_time: float | None = None  # process start -> first optimizer step begins (s)
    checkpoint_saves: list = field(default_factory=list)  # [{"step": int, "seconds": float}]
    memory_snapshot: str | None = None
    profile_trace: str | None = None
    collectives: dict | None = None  # scanner.collectives.summarise_trace() of the scanned step(s)
    versions: dict = field(default_factory=dict)
    time_steps: list[TimeStepReport] = field(default_factory=list)  # the time window (phase hooks only)
    attention: dict | None = None  # scanner.kernels.attention_summary() of the memory-scanned step(s)
    kernels: dict | None = None  # scanner.kernel_split.summarise_kernels() of the memory-scanned step(s), or a note

    def representative_time_step(self) -> TimeStepReport | None:
        """The time window's median step (the lower middle one for an even count); None without a window."""
        if not self.time_steps:
            return None
        ordered = sorted(self.time_steps, key=lambda s: (s.time_step, s.step))
        return ordered[(len(ordered) - 1) // 2]

    def summary(self) -> dict[str, Any]:
        """Memory: median of every field over the memory-scanned steps (min/max as spread). Time and tokens:
        the time window's median step, or the memory-scanned steps' medians when no step was timed."""
        out: dict[str, Any] = {"steps": [s.step for s in self.steps]}
        rows = [s.to_dict() for s in self.steps]
        for name in TIME_FIELDS + MEM_FIELDS + COUNT_FIELDS + RATE_FIELDS:
            vals = [r[name] for r in rows if r[name] is not None]
            if not vals:
                out[name] = None
                continue
            med = statistics.median(vals)
            is_int = name in MEM_FIELDS or name in COUNT_FIELDS
            out[name] = int(round(med)) if is_int else float(med)
            if len(vals) > 1:
                out[name + "_min"], out[name + "_max"] = min(vals), max(vals)
        phases = [s.peak_phase for s in self.steps if s.peak_phase]
        out["peak_phase"] = statistics.mode(phases) if phases else None
        out["memory_step_time"] = out.get("time_step")
        chosen = self.representative_time_step()
        out["time_source"] = "time_window" if chosen is not None else "memory_steps"
        out["time_steps"] = [s.step for s in self.time_steps]
        if chosen is not None:
            for name in TIME_FIELDS + COUNT_FIELDS + RATE_FIELDS:
                out.pop(name + "_min", None)
                out.pop(name + "_max", None)
                out[name] = getattr(chosen, name)
            out["time_step_chosen"] = chosen.step
            times = [s.time_step for s in self.time_steps]
            if len(times) > 1:
                out["time_step_min"], out["time_step_max"] = min(times), max(times)
        return out

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("steps", "time_steps")}
        d["steps"] = [s.to_dict() for s in self.steps]
        d["time_steps"] = [s.to_dict() for s in self.time_steps]
        d["summary"] = self.summary()
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def flat_metrics(self, prefix: str = "scan_") -> dict[str, Any]:
        """Flat `scan_*` metrics (bytes, seconds, tokens/s) for CSV rows and tracker logs."""
        s = self.summary()
        out: dict[str, Any] = {}
        for name in TIME_FIELDS + MEM_FIELDS + COUNT_FIELDS:
            out[prefix + name] = s.get(name)
        out[prefix + "tokens_per_second"] = s.get("tokens_per_second")
        out[prefix + "nonpad_tokens_per_second"] = s.get("nonpad_tokens_per_second")
        out[prefix + "step"] = _step_range(s["steps"])
        out[prefix + "steps_scanned"] = len(self.steps)
        if "time_step_min" in s:
            out[prefix + "time_step_min"] = s["time_step_min"]
            out[prefix + "time_step_max"] = s["time_step_max"]
        out[prefix + "time_source"] = s["time_source"]
        out[prefix + "time_window"] = _step_range(s["time_steps"]) if s["time_steps"] else None
        out[prefix + "time_step_chosen"] = s.get("time_step_chosen")
        out[prefix + "memory_step_time"] = s["memory_step_time"]
        out[prefix + "attention_backend"] = self.attention["backend"] if self.attention else None
        out[prefix + "attention_calls"] = self.attention["calls"] if self.attention else None
        out[prefix + "peak_phase"] = s.get("peak_phase")
        out[prefix + "rank"] = self.rank
        out[prefix + "world_size"] = self.world_size
        out[prefix + "init_time"] = self.init_time
        out[prefix + "checkpoint_save_time"] = (
            max(c["seconds"] for c in self.checkpoint_saves) if self.checkpoint_saves else None
        )
        out.update(flat_collectives(self.collectives, prefix + "comm_"))
        out.update(flat_kernels(self.kernels, prefix + "kernel_"))
        return out

    def to_text(self) -> str:
        s = self.summary()
        steps = s["steps"]
        title = f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}-{steps[-1]} (median)"
        lines = [f"tunebench scanner - {title}, rank {self.rank}/{self.world_size}, device {self.device}"]
        t = s["time_step"] or 0.0
        if s["time_source"] == "time_window":
            window = _step_range(s["time_steps"])
            lines.append(f"{'time':<22}{'seconds':>12}{'share':>9}   step {s['time_step_chosen']}, the median of "
                         f"timed steps {window}")
        else:
            lines.append(f"{'time':<22}{'seconds':>12}{'share':>9}   memory-scanned step(s): hooks included")
        for name in TIME_FIELDS:
            v = s[name]
            share = f"{100 * v / t:8.1f}%" if t > 0 else ""
            lines.append(f"  {name[5:]:<20}{v:>12.4f}{share}")
        lines.append(
            f"  micro-batches {s['micro_batches']}, tokens {s['tokens']} ({s['nonpad_tokens']} non-padding), "
            f"{s['tokens_per_second']:.1f} tok/s ({s['nonpad_tokens_per_second']:.1f} non-padding)"
        )
        lines.append(f"{'memory':<22}{'size':>12}")
        for name in MEM_FIELDS:
            v = s[name]
            if v is None:
                continue
            text = str(v) if name in ("mem_alloc_retries", "mem_ooms") else human_bytes(v)
            lines.append(f"  {name[4:]:<20}{text:>12}")
        if s.get("peak_phase"):
            lines.append(f"  peak reached in: {s['peak_phase']}")
        if self.attention:
            lines.append(f"attention kernel: {self.attention['backend']} ({self.attention['calls']} calls)")
        if self.init_time is not None:
            lines.append(f"init time (process start -> first step): {self.init_time:.2f} s")
        for c in self.checkpoint_saves:
            lines.append(f"checkpoint save at step {c['step']}: {c['seconds']:.2f} s")
        return "\n".join(lines)


def _step_range(steps: list[int]) -> int | str | None:
    if not steps:
        return None
    return steps[0] if len(steps) == 1 else f"{steps[0]}-{steps[-1]}"


def human_bytes(n: int | float) -> str:
    sign = "-" if n < 0 else ""
    n = abs(float(n))
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{sign}{n:.0f} {unit}" if unit == "B" else f"{sign}{n:.2f} {unit}"
        n /= 1024
    return f"{sign}{n:.2f} TiB"


def merge_reports(reports: list) -> dict[str, Any]:
    """Aggregate per-rank reports (ScanReport or their flat metrics): min/max/mean of each numeric metric."""
    flats = [r.flat_metrics() if isinstance(r, ScanReport) else dict(r) for r in reports]
    if not flats:
        raise ValueError("merge_reports needs at least one report")
    out: dict[str, Any] = {"scan_ranks": len(flats)}
    for key in flats[0]:
        vals = [f.get(key) for f in flats]
        nums = [v for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if key in ("scan_rank",) or len(nums) != len(vals):
            continue
        out[key + "_max"] = max(nums)
        out[key + "_min"] = min(nums)
        out[key + "_mean"] = sum(nums) / len(nums)
    return out
