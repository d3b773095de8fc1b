"""Measured rows projected onto a GPU kind (and N GPUs): the `proj_*` columns, cost and energy, and the note.

`project_rows(frame, table, gpu, folders)` works on any DataFrame of measured rows (a results folder's rows, tune's
points); where a row's experiment folder is known, its per-kernel file (kernels.csv.gz) refines the split (and its
spec.json gives the memory verdict on the target: projection/memory.py). The caller reads the rows and resolves
the GPU (tunebench.api.projecting): nothing here reads a results folder or a GPU name.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

import tunebench.projection.ranks as ranks
from tunebench.experiment.sharding import parallelism_of
from tunebench.hardware.gpus import Gpu, GpuTable
from tunebench.projection.host_replay import project_replay
from tunebench.projection.kernel_model import (
    Rates,
    kernel_seconds,
    phase_kernel_times,
    phase_kernel_times_from_columns,
)
from tunebench.projection.step_model import PHASES, Measured, Projected, project_step

logger = logging.getLogger(__name__)

KERNEL_ROWS = "kernels.csv.gz"
KERNEL_ROWS_RANK0 = "kernels.csv.rank0.gz"


def num(row: Any, key: str) -> float | None:
    """A finite number from a row (dict or Series), else None."""
    value = row.get(key) if hasattr(row, "get") else None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def measured_of(row: Any) -> tuple[Measured | None, str | None]:
    """What the model needs of a measured row, or why it cannot be projected."""
    if str(row.get("status", "ok")) != "ok":
        return None, f"status {row.get('status')}: nothing measured"
    step, rate = num(row, "steady_step_time_median"), num(row, "steady_tokens_per_second")
    if not step or not rate:
        return None, "no steady step time (steady_step_time_median)"
    phases = {p: num(row, f"scan_time_{p}") for p in PHASES}
    if any(v is None for v in phases.values()):
        return None, "no phase times (scan_time_*: run with the scanner)"
    if not sum(phases.values()) > 0:  # a step of no time projects to a rate of 1/0
        return None, "its phase times (scan_time_*) add up to no time: no step was timed"
    if num(row, "scan_kernel_busy_time") is None:
        return None, f"no kernel split (scan_kernel_*: {row.get('scan_kernel_note') or 'measured before the split'})"
    busy = {p: num(row, f"scan_kernel_{p}_busy_time") or 0.0 for p in PHASES}
    nonpad = num(row, "steady_nonpad_tokens_per_second") or rate
    return Measured(step, rate * step, nonpad * step, phases, busy), None


def _read_kernels(folder: Path | None) -> list[dict] | None:
    """The scanned step's kernel rows (rank 0's of a multi-GPU run: every rank runs the same kernels)."""
    path = next((folder / name for name in (KERNEL_ROWS, KERNEL_ROWS_RANK0) if folder and (folder / name).is_file()),
                None)
    if path is None:
        return None
    from scanner.kernel_split import read_rows

    try:
        return read_rows(str(path))
    except (OSError, ValueError, KeyError, EOFError) as exc:
        logger.warning("%s: unreadable (%s); projecting from the columns", path, exc)
        return None


def kernel_times(rows: list[dict] | None, row: Any, src: Rates, dst: Rates) -> tuple[dict, str]:
    """phase → (K_p, K'_p) and how they were obtained."""
    if rows:
        steps = max(1, len({r["step"] for r in rows}))
        return phase_kernel_times(rows, src, dst, steps), (
            f"{sum(r['class'] != 'sync' for r in rows) // steps} kernels of the scanned step, each by its class "
            "(matmuls by their shapes' roofline), fixed cost per kernel kept")
    return phase_kernel_times_from_columns(dict(row), src, dst), "scan_kernel_<phase>_<class>_time columns, by class"


def host_ratio(src: Gpu, dst: Gpu) -> tuple[float, str]:
    """How much longer the target's host takes for the same host work: the ratio of the table's `host_step_us`
    (a host-bound training step, gpu_peaks.py) when it gives one for both GPUs; else the same host. Single-call
    figures are not used: on one machine, two calls apart, a launch measured 7.8 and 13.4 µs and a CPU op 3.0 and
    5.8 µs (docs/evidence/projection-h100-h200.md)."""
    a, b = src.value("host_step_us"), dst.value("host_step_us")
    if a and b:
        return b / a, f"host time × {b / a:.3f} (host step {a:.2f} → {b:.2f} µs per kernel, table)"
    return 1.0, "host time kept as measured (the same host assumed: the table gives no host_step_us for both)"


def step_on_target(rows: list[dict] | None, measured: Measured, times: dict, src: Rates, dst: Rates,
                   ratio: float) -> tuple[Projected, str, float | None]:
    """The single-GPU step on the target: the launch-queue replay of the scanned step when its kernel rows are
    there (phases from the additive model, scaled to the replay's step), else the additive model alone; and the
    step's elasticity to the host's time (the replay's; None without it)."""
    single = project_step(measured, times, ratio)
    if not rows:
        return single, ("scaled by the phases' Σ projected ÷ Σ timed, each phase's host gap added to its scaled GPU "
                        "time (no kernel rows to replay)"), None
    target = {id(r): kernel_seconds(r, src, dst) for r in rows if r["class"] != "sync"}
    replayed = project_replay(rows, target, measured.step_time, ratio)
    scale = replayed.step_time / single.step_time if single.step_time > 0 else 1.0
    busy = sum(target.values()) / max(1, len({r["step"] for r in rows}))
    scales = [f"{s:.2f}" if isinstance(s, float) else s for s in replayed.host_scales]
    note = (f"launch-queue replay of the scanned step (host scale calibrated to it: {', '.join(scales)}), phases "
            "split as the phases' projected times")
    return Projected(replayed.step_time, {p: v * scale for p, v in single.phase_time.items()}, busy,
                     max(0.0, replayed.step_time - busy), single.clamped), note, replayed.host_elasticity


def _figures(gpu: Gpu) -> str:
    return (f"{gpu.name}: {gpu.value('bf16_tflops'):g} TFLOP/s [{gpu.sources.get('bf16_tflops', '')}], "
            f"{gpu.value('memory_tb_per_s'):g} TB/s [{gpu.sources.get('memory_tb_per_s', '')}]")


def project_one(row: Any, folder: Path | None, table: GpuTable, target: Gpu, n: int | None = None,
                parallelism: str | None = None) -> dict[str, Any]:
    """The `proj_*` columns of one measured row on `n` GPUs of `target` (proj_note alone when it cannot). A row
    measured on N GPUs projects to `n` GPUs (default: N) of its own parallelism: its modelled collectives on N
    come out, those on `n` go in, FSDP's sharded optimizer step scales by N/n. Onto its own GPU kind and count it
    returns the measurement."""
    measured_on = int(num(row, "num_gpus") or 1)
    own = parallelism_of(measured_on, {"fsdp": row.get("fsdp"), "fsdp_config": row.get("fsdp_config")})
    n = n or measured_on
    if measured_on > 1:
        parallelism, asked = own, parallelism
    out: dict[str, Any] = {"proj_device": target.name, "proj_source_device": row.get("gpu_name"),
                           "proj_num_gpus": n, "proj_parallelism": parallelism if n > 1 and parallelism else "single",
                           "proj_source_num_gpus": measured_on, "proj_source_parallelism": own}
    if measured_on > 1 and asked not in (None, own):
        return {**out, "proj_note": f"not projected: measured with {own} on {measured_on} GPUs, it projects to "
                                    f"GPUs of {own}; a one-GPU row of the same work projects onto {asked}"}
    measured, why = measured_of(row)
    source = table.lookup(str(row.get("gpu_name") or ""))
    if measured is not None and source is None:
        why = f"the measured GPU {row.get('gpu_name')!r} is not in the GPU table (add it with --gpu_table)"
    if measured is None or source is None:
        return {**out, "proj_note": f"not projected: {why}"}
    src, dst = Rates.of(source), Rates.of(target)
    rows = _read_kernels(folder)
    times, method = kernel_times(rows, row, src, dst)
    ratio, host_text = host_ratio(source, target)
    single, replay_text, elasticity = step_on_target(rows, measured, times, src, dst, ratio)
    phases = ranks.rank_phases(single.phase_time, parallelism or "", n, measured_on)
    step = sum(phases.values())
    exposed, comm_bytes, comm_note = _exposed_communication(row, source, target, measured_on, n, own, parallelism)
    if exposed is None:
        return {**out, "proj_note": f"not projected: {comm_note.lstrip('; ')}"}
    step += exposed
    if not step > 0:  # what the model left of the step: never a rate from it
        return {**out, "proj_note": "not projected: the modelled step takes no time"}
    per_gpu = 1 / measured_on
    tokens, nonpad = measured.tokens_per_step * per_gpu * n, measured.nonpad_tokens_per_step * per_gpu * n
    out.update({"proj_steady_tokens_per_second": tokens / step, "proj_steady_nonpad_tokens_per_second": nonpad / step,
                "proj_step_time": step, **{f"proj_time_{p}": v for p, v in phases.items()},
                "proj_time_comm": exposed, "proj_gpu_busy_time": single.busy_time,
                "proj_host_gap_time": single.gap_time, "proj_host_elasticity": elasticity,
                "proj_comm_bytes": comm_bytes})
    clamped = f"; phases whose scanned kernels outlasted the timed phase, scaled whole: {', '.join(single.clamped)}" \
        if single.clamped else ""
    out["proj_note"] = (f"roofline per kernel: {method}; {_figures(source)} → {_figures(target)}; {host_text}; "
                        f"steady median {measured.step_time:.4f} s: {replay_text}"
                        f"{clamped}{comm_note}{_sharded_from_one(measured_on, n, parallelism)}")
    return out


def _exposed_communication(row: Any, source: Gpu, target: Gpu, measured_on: int, n: int, own: str,
                           parallelism: str | None) -> tuple[float | None, float, str]:
    """(collective time the target adds to the step, its bytes, the note): on `n` GPUs less what the measured
    step on `measured_on` already holds; None where the model cannot say it."""
    comm_note, comm_bytes, exposed = "", 0.0, 0.0
    if n > 1:
        exposed, comm_bytes, comm_note = _communication(row, target, n, parallelism)
    if measured_on > 1 and exposed is not None:
        measured_comm, _, measured_note = _communication(row, source, measured_on, own)
        exposed = None if measured_comm is None else exposed - measured_comm
        comm_note = measured_note if measured_comm is None else (
            f"; the {measured_on}-GPU step less its own modelled collectives ({measured_comm * 1e3:.1f} ms)"
            + comm_note)
    if exposed is None and _same_collectives(source, target, measured_on, n):
        # collectives the model cannot say (FSDP over a quantized base) are in the measured step as they will be
        # on the target: the same count over the same link keeps them as measured (self-projection included)
        exposed, comm_note = 0.0, (f"; {n}× {parallelism} over the link it was measured on: its collectives kept "
                                   f"as measured ({comm_note.lstrip('; ')})")
    return exposed, comm_bytes, comm_note


def _same_collectives(source: Gpu, target: Gpu, measured_on: int, n: int) -> bool:
    """Whether the target runs the measured row's collectives as they were measured: as many GPUs, of the same kind
    or over a link of the same figures."""
    if measured_on != n or n < 2:
        return False
    link = ranks.link_of(target, n)[0]
    return target.name == source.name or (link is not None and link == ranks.link_of(source, n)[0])


def _sharded_from_one(measured_on: int, n: int, parallelism: str | None) -> str:
    """What a one-GPU row cannot tell about a sharded step on several: said in the note, never left silent."""
    if measured_on > 1 or n < 2 or parallelism not in ranks.SHARDED:
        return ""
    # docs/evidence/gpu-counts-h100.md: the eight FSDP2 rows projected from one H100 all ran slower than projected
    return (f"; optimistic: a one-GPU row has no {parallelism} step to scale, and the host time of its per-layer "
            "gathers, copies and launches is not modelled (FSDP2 from one H100 measured 4-41 % below the projection;"
            " project from a row measured on several GPUs)")


def _communication(row: Any, gpu: Gpu, n: int, parallelism: str | None) -> tuple[float | None, float, str]:
    """(exposed seconds, bytes per rank per step, note) of N-GPU data parallelism on `gpu`'s link; None when it
    cannot be said."""
    if parallelism not in ranks.PARALLELISMS:
        return None, 0.0, f"{n} GPUs need a parallelism ({' or '.join(ranks.PARALLELISMS)})"
    if parallelism in ranks.SHARDED and str(row.get("quantization", "none")) not in ("none", "nan", "None"):
        return None, 0.0, "FSDP over a quantized base: the bytes its 4-bit weights gather are not modelled"
    link, link_text = ranks.link_of(gpu, n)
    element = 4 if str(row.get("torch_dtype")) in ("float32", "float") else 2
    total, trainable = num(row, "total_parameters"), num(row, "trainable_parameters")
    if link is None or not total or trainable is None:
        return None, 0.0, link_text if link is None else "no parameter counts in the row"
    layers = _layers(str(row.get("model_name_or_path")))
    micro = int(num(row, "gradient_accumulation_steps") or 1)
    comms = ranks.collectives(parallelism, n, total * element, trainable * element, layers, micro)
    hidden = ranks.exposed(comms, n, link)
    moved = sum(c.payload for c in comms)
    note = (f"; {n}× {parallelism}: {', '.join(f'{c.kind} {c.payload / 1e9:.2f} GB' for c in comms)} per step over "
            f"{link_text}, latency {gpu.cited('link_latency_us')} µs per ring step; exposed {hidden * 1e3:.1f} ms "
            f"(no overlap with compute: projection/ranks.py)")
    return hidden, moved, note


def _layers(model: str) -> int:
    from tunebench.experiment.models import load_config

    try:
        config = load_config(model)
    except (OSError, ValueError):
        return 1
    return getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None) or 1


def cost_columns(projected: dict[str, Any], target: Gpu, gpu_hour_usd: float | None) -> dict[str, Any]:
    """USD per million non-padding tokens (the user's price: `gpu_hour_usd`, else the table's `usd_per_hour` from a
    user YAML) and J/token (the table's power figure)."""
    rate, n = projected.get("proj_steady_nonpad_tokens_per_second"), projected.get("proj_num_gpus") or 1
    out: dict[str, Any] = {"proj_usd_per_million_tokens": None, "proj_joules_per_token": None}
    price = gpu_hour_usd if gpu_hour_usd is not None else target.value("usd_per_hour")
    if rate:
        if price is not None:
            out["proj_usd_per_million_tokens"] = price * n / 3600 / rate * 1e6
        if target.value("power_w"):
            out["proj_joules_per_token"] = target.value("power_w") * n / rate
    return out


def project_rows(frame: pd.DataFrame, table: GpuTable, target: Gpu, folders: Mapping[tuple, Path] | None = None,
                 gpu_hour_usd: float | None = None, num_gpus: int | None = None,
                 parallelism: str | None = None) -> pd.DataFrame:
    """The rows of `frame` projected onto `num_gpus` of `target` (an entry of `table`, resolved by the caller):
    the frame's identity columns and the `proj_*` columns, one row per input row. `folders`: (experiment_id,
    repeat) → experiment folder, whose kernel rows (kernels.csv.gz) refine the split."""
    folders = folders or {}
    keep = [c for c in ("experiment_id", "scenario", "framework_config", "model_name_or_path", "num_gpus",
                        "peft_method", "per_device_train_batch_size", "gradient_accumulation_steps", "max_seq_len",
                        "repeat", "gpu_name", "steady_tokens_per_second", "steady_nonpad_tokens_per_second",
                        "steady_step_time_median") if c in frame.columns]
    rows = []
    for _, row in frame.iterrows():
        folder = folders.get((row.get("experiment_id"), int(num(row, "repeat") or 1)))
        projected = project_one(row, folder, table, target, num_gpus, parallelism)
        projected.update(cost_columns(projected, target, gpu_hour_usd))
        rows.append({**{c: row[c] for c in keep}, **projected})
    return pd.DataFrame(rows)
